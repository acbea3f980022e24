"""
The twingress image as users run it: built from the Dockerfile by a real builder (podman, by
`make image` on local bookworm bases, see testenv/image.sh), then run the way
k8s/base/daemonset.yaml runs it — read-only root, all capabilities dropped but
NET_BIND_SERVICE, no_new_privs, the image's own user (uid 10001).

What no other test sees: that the image builds at all (.dockerignore, the COPY lines, the
venv), that its entrypoint finds the twistd plugin on a read-only root, that uid 10001 binds
:80 and :443 through the file capability the Dockerfile sets on the interpreter (and not through
a capability the runtime hands over), and that the request path in the image is the mypyc build.

Not covered here: building on the default bases python:3.11 / python:3.11-slim (no registry is
reachable from the test machine; hadolint, `make lint-docker`, checks the file for them).
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import struct
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import h2stack
from tests.deploy.image import DAEMONSET_LIKE, Image, built_image, podman, printed
from tests.support import ROOT, EchoBackend, Manifests, free_port, unavailable
from tests.test_wheel import OPTIONS, hot_modules

pytestmark = pytest.mark.image

CAP_NET_BIND_SERVICE = 10
VENV = "/opt/twingress"


@pytest.fixture(scope="module")
def image() -> Image:
    return built_image()


def setup_cfg_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser["metadata"]["version"]


def test_the_dockerfile_defaults_to_the_official_python_images() -> None:
    """Users build on python:3.11 / -slim; only the tests pass local bases (BUILD_IMAGE, RUNTIME_IMAGE)."""
    text = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^ARG (\w+_IMAGE)=(\S+)$", text, re.MULTILINE) == [("BUILD_IMAGE", "python:3.11"), ("RUNTIME_IMAGE", "python:3.11-slim")]
    assert re.findall(r"^FROM (\S+)", text, re.MULTILINE) == ["${BUILD_IMAGE}", "${RUNTIME_IMAGE}"]


def test_the_image_is_built_from_the_current_tree(image: Image, report) -> None:
    report(f"image {image.name}: {image.size / 1e6:.0f} MB ({image.size} bytes)")
    current = printed([str(ROOT / "testenv" / "image.sh"), "--print"])["TREE"]
    assert image.tree == current, f"{image.name} was built from tree {image.tree}, the work tree is {current}: run `make image`"
    assert image.name == f"localhost/twingress:{setup_cfg_version()}"
    ids = podman("image", "inspect", "--format", "{{.Id}}", image.name, image.rollout_name).stdout.split()
    assert len(ids) == 2 and ids[0] == ids[1], ids  # the rollout tag names the same build
    config = podman("image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}}", image.name).stdout.strip()
    assert config == '10001:10001 ["twistd","--pidfile=","-n","ingress"]'


def test_the_image_holds_this_tree_s_code(image: Image) -> None:
    """
    Every module of ingress/ in the image is the work tree's, byte for byte: a label says which
    tree an image was built from, but a builder's layer cache once kept an older install layer
    under the new label (the DaemonSet then ran code with a bug already fixed here).
    """
    listing = image.run(
        "-c",
        "import hashlib, pathlib, ingress; root = pathlib.Path(ingress.__file__).parent; "
        "print('\\n'.join(f'{p.relative_to(root.parent)} {hashlib.sha256(p.read_bytes()).hexdigest()}' for p in sorted(root.rglob('*.py'))))",
        options=["--entrypoint", "python3"],
    )
    assert listing.returncode == 0, listing.stderr
    inside = dict(line.split() for line in listing.stdout.splitlines())
    here = {str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((ROOT / "ingress").rglob("*.py"))}
    assert inside == here, sorted(k for k in here.keys() | inside.keys() if here.get(k) != inside.get(k))[:20]


def test_twistd_ingress_help_runs_on_a_read_only_root_as_10001(image: Image) -> None:
    helped = image.run("--help")
    assert helped.returncode == 0, helped.stderr
    missing = [option for option in OPTIONS if option not in helped.stdout]
    assert not missing, helped.stdout
    who = image.run(options=["--entrypoint", "id"])
    assert who.stdout.split()[:2] == ["uid=10001(twingress)", "gid=10001(twingress)"], who
    wrote = image.run("/opt/twingress/probe", options=["--entrypoint", "touch"])
    assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr, wrote


def test_the_interpreter_carries_cap_net_bind_service(image: Image) -> None:
    """The file capability itself (security.capability, VFS_CAP_REVISION 2 or 3: magic, then permitted/inheritable words)."""
    read = f"import os; p = os.path.realpath('{VENV}/bin/python3'); print(p); print(os.getxattr(p, 'security.capability').hex())"
    shown = image.run("-c", read, options=["--entrypoint", "python3"])
    assert shown.returncode == 0, shown.stderr
    path, raw = shown.stdout.split()
    assert not path.startswith(VENV), path  # the real interpreter, not the venv's symlink
    magic, permitted, _inheritable = struct.unpack_from("<III", bytes.fromhex(raw))
    assert magic & 0xFF000000 in (0x02000000, 0x03000000) and magic & 1, hex(magic)  # effective bit set
    assert permitted == 1 << CAP_NET_BIND_SERVICE, hex(permitted)


def interpreter(image: Image) -> str:
    shown = image.run("-c", f"import os; print(os.path.realpath('{VENV}/bin/python3'))", options=["--entrypoint", "python3"])
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.strip()


def test_the_archive_for_a_node_is_this_image_with_the_capability(image: Image) -> None:
    """
    What a node's runtime imports (`make image-archive`, a docker-archive): both tags of this build,
    and the interpreter's security.capability xattr in its layers (a runtime can only keep what the
    layer tar carries, as a PAX header SCHILY.xattr.security.capability).
    """
    if not Path(image.archive).exists():
        unavailable(f"no image archive {image.archive}: run `make image-archive` (make test does)")
    wanted = interpreter(image).lstrip("/")
    image_id = podman("image", "inspect", "--format", "{{.Id}}", image.name).stdout.strip()
    capability = None
    with tarfile.open(image.archive) as archive:
        [manifest] = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        assert sorted(manifest["RepoTags"]) == [image.name, image.rollout_name]
        assert manifest["Config"].removesuffix(".json") == image_id, "the archive is stale: run `make image-archive`"
        for layer in manifest["Layers"]:  # bottom to top: the last entry of the file wins
            with tarfile.open(fileobj=archive.extractfile(layer), mode="r|") as files:
                for member in files:
                    if member.name.removeprefix("./") == wanted:
                        capability = member.pax_headers.get("SCHILY.xattr.security.capability")
    assert capability is not None, f"{wanted} carries no file capability in the archive's layers"
    _magic, permitted = struct.unpack_from("<II", capability.encode("utf-8", "surrogateescape"))
    assert permitted == 1 << CAP_NET_BIND_SERVICE, hex(permitted)


def test_the_package_adds_its_twistd_plugin_and_leaves_twisted_s_own(image: Image) -> None:
    """
    setup.cfg packages twisted/plugins/ingress_plugin.py (twistd finds `ingress` through it) but no
    twisted/plugins/__init__.py, which would shadow Twisted's own plugins package.
    """
    listed = image.run("-c", "import importlib.metadata as m; print('\\n'.join(str(f) for f in m.files('twingress')))", options=["--entrypoint", "python3"])
    assert listed.returncode == 0, listed.stderr
    files = set(listed.stdout.split())
    assert "twisted/plugins/ingress_plugin.py" in files and "ingress/proxy/http1/server.py" in files, sorted(files)[:20]
    assert "twisted/plugins/__init__.py" not in files


def test_the_request_path_is_the_compiled_build(image: Image) -> None:
    modules = hot_modules()
    listed = image.run("-c", f"import importlib; print('\\n'.join(importlib.import_module(m).__file__ for m in {modules!r}))", options=["--entrypoint", "python3"])
    assert listed.returncode == 0, listed.stderr
    files = listed.stdout.split()
    assert len(files) == len(modules) >= 10
    assert all(f.startswith(f"{VENV}/lib/") and f.endswith(".so") for f in files), files


def test_the_http2_stack_is_the_compiled_build(image: Image) -> None:
    """h2, hpack and hyperframe at the versions h2stack.py pins, each module compiled (the packages' __init__ are not listed)."""
    probe = (
        "import importlib, importlib.metadata, pkgutil\n"
        f"for d, (v, p) in {h2stack.PINNED!r}.items():\n"
        "    print(d, importlib.metadata.version(d))\n"
        "    for m in pkgutil.iter_modules(importlib.import_module(p).__path__, p + '.'):\n"
        "        print(m.name, importlib.import_module(m.name).__file__)\n"
    )
    listed = image.run("-c", probe, options=["--entrypoint", "python3"])
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert [row for row in rows if row[0] in h2stack.PINNED] == [[d, v] for d, (v, _) in h2stack.PINNED.items()]
    modules = {name: path for name, path in rows if name not in h2stack.PINNED}
    interpreted = {name for name, path in modules.items() if not path.endswith(".so")}
    assert interpreted == set(), modules  # hpack.huffman_table too (h2stack.DECLARATIONS, COMPILE_ARGS)
    assert len(modules) >= 20, modules


def test_the_build_machine_ca_stays_out_of_the_image(image: Image) -> None:
    """testenv/image.sh mounts this machine's CA bundle for pip during the build; the image keeps its base's bundle."""
    bases = printed([str(ROOT / "testenv" / "base-images.sh"), "--print"])
    digest = ["--entrypoint", "sha256sum"]
    ours = image.run("/etc/ssl/certs/ca-certificates.crt", options=digest)
    base = podman("run", "--rm", "--network=none", *digest, bases["RUNTIME_IMAGE"], "/etc/ssl/certs/ca-certificates.crt", check=False)
    assert ours.returncode == 0 and base.returncode == 0, (ours.stderr, base.stderr)
    assert ours.stdout.split()[0] == base.stdout.split()[0]


@pytest.fixture
def served(image: Image, tmp_path: Path) -> Iterator[tuple[str, EchoBackend, str]]:
    """The image serving :80 and :443 on a pod address of the test network namespace, routing to an echo backend."""
    if os.environ.get("TWINGRESS_NETNS") != "1":
        unavailable("binding :80 and :443 needs the test network namespace: run under testenv/netns-run")
    address = os.environ["TWINGRESS_POD_IPS"].split()[-1]
    backend = EchoBackend("image-echo")
    manifests = Manifests(Path(tempfile.mkdtemp(dir=tmp_path)))
    manifests.path.chmod(0o755)  # uid 10001 reads it
    manifests.route("echo", "image.test", [backend.address])
    for written in manifests.path.iterdir():
        written.chmod(0o644)
    admin = free_port()
    name = f"twingress-image-test-{os.getpid()}"
    podman(
        "run", "--detach", "--name", name, "--network=host", *DAEMONSET_LIKE, "--tmpfs=/tmp:size=16m",
        "--volume", f"{manifests.path}:/manifests:ro", image.name,
        "--http", f"tcp:80:interface={address}", "--https", f"tcp:443:interface={address}",
        "--admin", f"tcp:{admin}:interface=127.0.0.1", "--manifests", "/manifests",
    )  # fmt: skip
    try:
        wait_ready(admin, name)
        yield address, backend, name
    finally:
        log = podman("logs", name, check=False)
        print(log.stdout[-4000:], log.stderr[-4000:])
        podman("rm", "--force", "--time", "0", name, check=False)
        backend.stop()


def wait_ready(admin_port: int, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        state = podman("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
        assert state == "running", f"the container is {state}: {podman('logs', name, check=False).stderr[-4000:]}"
        time.sleep(0.2)
    raise TimeoutError(f"the container was not ready within {timeout}s")


def curl(url: str, address: str, port: int) -> str:
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "-k", "--resolve", f"image.test:{port}:{address}", url],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_uid_10001_serves_80_and_443_through_the_file_capability(served: tuple[str, EchoBackend, str]) -> None:
    address, backend, name = served
    assert backend.name in curl("http://image.test/", address, 80)
    assert backend.name in curl("https://image.test/", address, 443)
    status = podman("exec", name, "cat", "/proc/1/status").stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split() == ["10001"] * 4, fields["Uid"]
    assert int(fields["CapEff"], 16) == 1 << CAP_NET_BIND_SERVICE, fields["CapEff"]
    assert int(fields["CapAmb"], 16) == 0, fields["CapAmb"]  # no ambient capability: the file's own did it
    assert fields["NoNewPrivs"].strip() == "1"


def test_the_daemonset_runs_the_image_make_image_builds() -> None:
    """k8s/base names an image a user can build (README "Install on a cluster"), the one `make image` tags."""
    daemonset = yaml.safe_load((ROOT / "k8s" / "base" / "daemonset.yaml").read_text())
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == printed([str(ROOT / "testenv" / "image.sh"), "--print"])["IMAGE"]
    assert container["imagePullPolicy"] == "IfNotPresent"  # a localhost/ name is never pulled
