"""
The compiled HTTP/2 stack: the unmodified upstream C{h2}, C{hpack} and C{hyperframe}, compiled by Cython.

Why: by C{bench/h2_floor.py} these three libraries cost more per HTTP/2 request than
the whole of twingress's HTTP/1.1 work; compiled as they are (Cython turns each
module into a C extension that imports in place of its .py file: same classes,
same semantics, no source change) they cost about a third less
(docs/performance.md, "The compiled HTTP/2 stack").  Correctness stays theirs:
this file compiles, it never edits; h2spec and our HTTP/2 and gRPC tests run
against the compiled build in C{make test}.

Only the versions in C{PINNED} are compiled (the ones tested so); another
installed version is an error, not a silent pure fallback.  Two ways in:

  python h2stack.py inplace          compile the installed packages in this
                                     environment's site-packages (C{make compiled})
  python h2stack.py build            compile them into the cache only, touching no installed
                                     file (C{make run}'s background compile: the next
                                     C{inplace} then takes seconds)
  python h2stack.py remove           remove those extension modules again (C{make pure})
  python h2stack.py wheels DIR       put compiled wheels of the three in DIR, in place
                                     of any there, and DIR/constraints.txt pinning them
                                     (the Docker image's build stage: pip wheel --find-links
                                     DIR --constraint DIR/constraints.txt takes them)
  python h2stack.py suites           fetch the three's own test suites, from their pinned
                                     source distributions, into the cache (C{make test};
                                     --print-path: where, fetching nothing)

Upstream's suites are the check that compiling changed nothing: tests/unit/test_h2stack_suites.py
runs each, unmodified, against the installed packages, so against the compiled modules in
C{make test} (h2 1,662 tests, hpack 88, hyperframe 108).

Compiler directives: C{language_level=3} and C{annotation_typing=False}.  The
second keeps the libraries' type annotations what they are in Python, hints:
with it on, Cython would enforce some of them at run time (a C{float}
annotation becomes a C double, rejecting None), which is not the semantics
upstream tests.  Package C{__init__} modules stay interpreted (they only
import).

C{hpack.huffman_table} decodes every Huffman-coded literal a client sends (a
browser's C{:path} for each new resource, a C{traceparent} on every call):
interpreted, 2,600 instructions per coded byte, 81k for a 31-byte path.  Two
things make it compiled, neither an edit of its source:
  - C{DECLARATIONS}: Cython reads a C{.pxd} file beside a C{.py} module (an
    augmenting declaration file) for the C types of its names.  Its decoding
    loop's locals are small C ints, and its three flag constants C-level
    constants (they are no longer attributes of the module, which nothing
    reads).  Untyped, the compiled loop is slower than the interpreter.
  - C{COMPILE_ARGS}: its module body builds the 4,096-entry table, one function
    of 4.5 MB of C that gcc takes over 12 minutes to optimise.  Cython marks
    that function (and the other run-once setup) C{CYTHON_SMALL_CODE}, a macro
    it lets the build define: defined to optimise those at -O0, the module
    builds in under a minute (2.7 GB of memory), the loop at -O2.
  A 31-byte path decodes in 14.5k instructions, against 81k interpreted
  (bench/README.md, twenty-third session).

C{EXTENSION_TYPES}: h2's connection, its streams, their two state machines and
its frame buffer are declared extension types, by a C{cdef class} in the same
kind of augmenting C{.pxd}: each instance attribute upstream's code assigns
becomes a slot of C type C{object}, which the compiled methods read and write
directly instead of through the instance's dictionary (CPython's generic
attribute lookup was a sixth of an h2 request's instructions).  For Python code
nothing else changes: the attributes stay public and of any type, every class
keeps a C{__dict__} (any other attribute can still be set) and weak references,
and upstream's suites pass on it (above).  One difference is for compiled code:
a class mypyc compiles cannot subclass them (mypyc lays out its instances for a
base it takes for a Python class), so twingress's subclass of H2Connection is
interpreted (C{ingress/proxy/http2/goaway.py}).  hpack's and hyperframe's
classes stay plain: declared so, hpack's encoder, decoder and Huffman encoder
made no difference to an h2 request's count (399.2k and 399.7k against 399.4k
without), Cython refuses C{HeaderTable}'s class-level annotation, and each of
hyperframe's frame classes has two bases.  No method or local is typed: a C
integer where upstream has a Python one could overflow on a peer's varint.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

# distribution -> (version, its top-level package).  Keep the versions equal to setup.cfg's
# `compile` extra, which installs exactly these.
PINNED = {
    "h2": ("4.4.1", "h2"),
    "hpack": ("4.2.0", "hpack"),
    "hyperframe": ("6.1.0", "hyperframe"),
}
PACKAGES = [package for _, package in PINNED.values()]
# distribution -> the sha256 of its pinned source distribution on PyPI, whose tests/ is upstream's suite.
SDISTS = {
    "h2": "4e866ffb1a869ae14dd9b5e6beb5c24a13da0495ad72b65925ded182521c1516",
    "hpack": "0895cfa3b5531fc65fe439c05eb65144f123bf7a394fcaa56aa423548d8e45c0",
    "hyperframe": "f630908a00854a7adeabd6382b43923a4c4cd4b821fcb527e6ab9e15382a3b08",
}
DIRECTIVES = {"language_level": 3, "annotation_typing": False}
# Modules left interpreted (the module docstring says why).
INTERPRETED = {"__init__.py"}
# By module: the declaration file Cython reads beside it, written there only while it is compiled (the module docstring).
DECLARATIONS = {
    "hpack.huffman_table": """\
cimport cython

cdef int HUFFMAN_COMPLETE, HUFFMAN_EMIT_SYMBOL, HUFFMAN_FAIL

@cython.locals(state=cython.int, flags=cython.int, output_byte=cython.int, index=cython.int, input_byte=cython.int, decoded_bytes=bytearray)
cpdef bytes decode_huffman(huffman_string)
""",
}
# By module: the classes made extension types (the module docstring), each with the instance attributes
# upstream's code assigns (tests/unit/test_h2stack_types.py checks them against the pinned source).
EXTENSION_TYPES = {
    "h2.connection": {
        "H2ConnectionStateMachine": "state",
        "H2Connection": "_closed_streams _data_to_send _frame_dispatch_table _header_frames _inbound_flow_control_window_manager"
        " config decoder encoder highest_inbound_stream_id highest_outbound_stream_id incoming_buffer local_settings"
        " max_inbound_frame_size max_outbound_frame_size outbound_flow_control_window remote_settings state_machine streams",
    },
    "h2.stream": {
        "H2StreamStateMachine": "client headers_received headers_sent state stream_closed_by stream_id trailers_received trailers_sent",
        "H2Stream": "_actual_content_length _authority _expected_content_length _inbound_window_manager config"
        " max_outbound_frame_size outbound_flow_control_window request_method state_machine stream_id",
    },
    "h2.frame_buffer": {"FrameBuffer": "_data _headers_buffer _preamble _preamble_len max_frame_size"},
}


def extension_type_declarations(classes: dict[str, str]) -> str:
    """A module's C{.pxd} text for its classes in L{EXTENSION_TYPES}: object slots, a __dict__, weak references."""
    return "".join(
        f"cdef class {name}:\n    cdef public object {', '.join(attributes.split())}\n    cdef dict __dict__\n    cdef object __weakref__\n\n"
        for name, attributes in classes.items()
    )


DECLARATIONS |= {module: extension_type_declarations(classes) for module, classes in EXTENSION_TYPES.items()}
# C compiler options by module (the module docstring): CYTHON_SMALL_CODE marks the run-once setup functions.
COMPILE_ARGS = {"hpack.huffman_table": ["-DCYTHON_SMALL_CODE=__attribute__((cold, optimize(\"O0\")))"]}


def modules(package_dir: Path) -> list[Path]:
    """The modules of a package that are compiled: every .py file but those in C{INTERPRETED}."""
    return sorted(p for p in package_dir.glob("*.py") if p.name not in INTERPRETED)


def compile_packages(root: Path, packages: Sequence[str]) -> None:
    """Compile the packages under C{root} in place: an extension module beside each .py file."""
    from Cython.Build import cythonize
    from setuptools import Distribution

    with tempfile.TemporaryDirectory(prefix="h2stack-") as scratch:
        # build_dir: the generated C goes to the scratch directory, not beside the sources.
        work = Path(scratch)
        declared = {root / f"{name.replace('.', '/')}.pxd": text for name, text in DECLARATIONS.items() if name.split(".")[0] in packages}
        for path, text in declared.items():
            path.write_text(text)
        sources = [str(m) for package in packages for m in modules(root / package)]
        extensions = cythonize(sources, compiler_directives=DIRECTIVES, quiet=True, build_dir=str(work / "c"))
        for path in declared:
            path.unlink()  # read by cythonize only: the package keeps upstream's files plus the extension modules
        for extension in extensions:
            extension.extra_compile_args = COMPILE_ARGS.get(extension.name, [])
        distribution = Distribution({"ext_modules": extensions, "script_name": "h2stack.py"})
        build_ext = distribution.get_command_obj("build_ext")
        build_ext.build_lib = str(root)
        build_ext.build_temp = str(work / "build")
        build_ext.parallel = os.cpu_count() or 1
        build_ext.ensure_finalized()
        build_ext.run()


def extension_modules(root: Path, packages: Sequence[str]) -> Iterator[Path]:
    """The compiled modules of the packages under C{root}."""
    suffixes = (".so", ".pyd")
    for package in packages:
        yield from (p for p in (root / package).iterdir() if p.suffix in suffixes)


def check_installed() -> None:
    """Refuse to compile anything but the pinned versions (the ones our tests ran on)."""
    wrong = []
    for distribution, (version, _) in PINNED.items():
        installed = importlib.metadata.version(distribution)
        if installed != version:
            wrong.append(f"{distribution} {installed} (compiled build pins {version})")
    if wrong:
        sys.exit("h2stack.py: installed: " + ", ".join(wrong) + "; run pip install -e '.[compile]' first")


def site_packages() -> Path:
    """Where the pinned packages are installed in this environment."""
    return Path(sysconfig.get_paths()["purelib"])


def inplace() -> None:
    """Compile the installed packages where they are, from the cache when it has this build."""
    check_installed()
    root = site_packages()
    built = cached_build(root, PACKAGES)
    remove(root, PACKAGES)
    for package in PACKAGES:
        for module in extension_modules(built, [package]):
            shutil.copy2(module, root / package / module.name)
    print(f"h2stack.py: compiled {', '.join(PACKAGES)} in {root}")


def cached_build(root: Path, packages: Sequence[str]) -> Path:
    """A compiled copy of the packages, kept in the cache (a build takes minutes; CI keeps the cache).

    Keyed by what decides the result: the versions, the directives, the modules left interpreted, the
    declarations and compiler options, Cython's version and the interpreter's.  Other builds in the cache are removed with a new one.
    """
    import Cython

    decides = repr((PINNED, DIRECTIVES, sorted(INTERPRETED), DECLARATIONS, COMPILE_ARGS, Cython.__version__, sys.version))
    key = hashlib.sha256(decides.encode()).hexdigest()[:16]
    built = cache_root() / "h2stack" / key
    if (built / "complete").exists():
        return built
    built.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=built.parent))
    for package in packages:
        shutil.copytree(root / package, staging / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    compile_packages(staging, packages)
    (staging / "complete").touch()
    for old in built.parent.iterdir():
        if old.is_dir() and not old.name.startswith(f"{key}."):
            shutil.rmtree(old, ignore_errors=True)
    try:
        staging.rename(built)
    except OSError:  # another build of the same key finished first (make run's background compile beside make compiled)
        if not (built / "complete").exists():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return built


def remove(root: Path, packages: Sequence[str]) -> None:
    """Remove the extension modules: the packages are pure again."""
    for path in extension_modules(root, packages):
        path.unlink()


def wheels(directory: Path) -> None:
    """Put compiled wheels of the pinned versions in C{directory}, in place of any wheels of the three there.

    The pure wheels are fetched (pip: the index, or its --find-links), unpacked, compiled, retagged
    as platform wheels and packed again: the same files plus the extension modules.  The
    constraints file makes a later C{pip wheel} of twingress take exactly these versions (its own
    requirement, C{h2>=4.1}, would take a newer pure h2 from the index); among wheels of one
    version pip prefers the platform wheel, so these.
    """
    tag = platform_tag()
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.iterdir():
        if stale.suffix == ".whl" and stale.name.split("-")[0] in PINNED:
            stale.unlink()
    for distribution, (version, package) in PINNED.items():
        with tempfile.TemporaryDirectory(prefix="h2stack-wheel-") as scratch:
            work = Path(scratch)
            pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "--dest", str(work)]
            subprocess.run([*pip, f"{distribution}=={version}"], check=True)
            pure = work / f"{distribution}-{version}-py3-none-any.whl"
            subprocess.run([sys.executable, "-m", "wheel", "unpack", "--dest", str(work), str(pure)], check=True)
            tree = work / f"{distribution}-{version}"
            compile_packages(tree, [package])
            retag(tree / f"{distribution}-{version}.dist-info" / "WHEEL", tag)
            subprocess.run([sys.executable, "-m", "wheel", "pack", "--dest-dir", str(directory), str(tree)], check=True)
        print(f"h2stack.py: {distribution} {version} compiled ({tag})")
    pins = "".join(f"{distribution}=={version}\n" for distribution, (version, _) in PINNED.items())
    (directory / "constraints.txt").write_text(pins)


def cache_root() -> Path:
    """The build cache (C{TWINGRESS_CACHE}, else ~/.cache/twingress), as the testenv/ scripts use it."""
    return Path(os.environ.get("TWINGRESS_CACHE") or Path.home() / ".cache" / "twingress")


def suites_dir() -> Path:
    """Where L{suites} puts upstream's test suites: a directory per distribution and version, its tests/ within."""
    return cache_root() / "testenv" / "h2stack-suites"


def suite_path(distribution: str) -> Path:
    """The directory of one distribution's suite (its C{tests} package inside), for its pinned version."""
    return suites_dir() / f"{distribution}-{PINNED[distribution][0]}"


def suites() -> None:
    """Fetch each pinned source distribution (by its hash) and keep its tests/: a no-op once they are there."""
    if all((suite_path(distribution) / "complete").exists() for distribution in PINNED):
        print(suites_dir())
        return
    suites_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="h2stack-suites-") as scratch:
        work = Path(scratch)
        requirements = work / "requirements.txt"
        requirements.write_text("".join(f"{d}=={version} --hash=sha256:{SDISTS[d]}\n" for d, (version, _) in PINNED.items()))
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "--require-hashes",
                        "--dest", str(work), "-r", str(requirements)], check=True)
        for distribution, (version, _) in PINNED.items():
            unpack_tests(work / f"{distribution}-{version}.tar.gz", f"{distribution}-{version}/tests", work / "unpacked")
            target = suite_path(distribution)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(work / "unpacked" / f"{distribution}-{version}" / "tests", target / "tests")
            (target / "complete").touch()
    print(suites_dir())


def unpack_tests(archive: Path, tests: str, destination: Path) -> None:
    """Extract the directory C{tests} of a source distribution (its files and folders, nothing else) into C{destination}."""
    with tarfile.open(archive) as sdist:
        members = [m for m in sdist.getmembers() if (m.isfile() or m.isdir()) and (m.name == tests or m.name.startswith(tests + "/"))]
        if not members:
            sys.exit(f"h2stack.py: {archive.name} has no {tests}/")
        # The archive is the one its pinned hash names; the data filter (Python 3.11.4+) refuses any path outside destination all the same.
        if hasattr(tarfile, "data_filter"):
            sdist.extractall(destination, members=members, filter="data")
        else:
            sdist.extractall(destination, members=members)


def platform_tag() -> str:
    """The wheel tag of a CPython extension for this interpreter and platform (cp311-cp311-linux_x86_64)."""
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{python}-{python}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"


def retag(wheel_file: Path, tag: str) -> None:
    """Mark an unpacked wheel as a platform wheel: it holds extension modules now."""
    lines = wheel_file.read_text().splitlines()
    kept = [line for line in lines if line and not line.startswith(("Tag:", "Root-Is-Purelib:"))]  # headers only: a blank line would end them
    wheel_file.write_text("\n".join([*kept, "Root-Is-Purelib: false", f"Tag: {tag}", ""]))


def main(argv: Sequence[str]) -> None:
    """The command line (the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("inplace")
    commands.add_parser("build")
    commands.add_parser("remove")
    commands.add_parser("wheels").add_argument("directory", type=Path)
    commands.add_parser("suites").add_argument("--print-path", action="store_true", help="where the suites go; fetch nothing")
    args = parser.parse_args(argv)
    if args.command == "inplace":
        inplace()
    elif args.command == "build":
        check_installed()
        print(f"h2stack.py: compiled {', '.join(PACKAGES)} into {cached_build(site_packages(), PACKAGES)}")
    elif args.command == "remove":
        remove(site_packages(), PACKAGES)
    elif args.command == "wheels":
        wheels(args.directory)
    elif args.print_path:
        print(suites_dir())
    else:
        suites()


if __name__ == "__main__":
    main(sys.argv[1:])
