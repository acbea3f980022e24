"""
The Dockerfile's build, without Docker: its build context, its compiled `pip wheel`, its offline
install into a fresh environment, and its entrypoint finding the twistd plugin there.

This proves what the image depends on and no other test sees, because the development venv
runs twingress from the source tree: that the wheel carries twisted/plugins/ingress_plugin.py
(setup.cfg's packaging) and every module, that the dependencies resolve from the wheels alone,
that the request path's modules are the compiled ones there (setup.py's HOT_MODULES, built by
mypyc as the image's build stage builds them), and that `twistd ingress` then knows our options.

The test runs in the network namespace of the test run, where no package index is reachable:
`pip wheel` and `pip install` read only the wheelhouse `make wheelhouse` fills beforehand
(dependencies, setuptools, wheel) and the wheels built here, as the image's stage 2 reads only
stage 1's.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from tests.support import ROOT

DOCKERFILE = ROOT / "Dockerfile"
WHEELHOUSE = Path(os.environ.get("TWINGRESS_WHEELHOUSE") or Path.home() / ".cache" / "twingress" / "wheelhouse")
OPTIONS = ("--kubeconfig", "--manifests", "--http", "--https", "--admin", "--leader-election-id", "--tcp-services-configmap")


def build_stage_sources() -> list[str]:
    """What the build stage COPYs from the context (the first stage, up to the next FROM)."""
    build_stage = DOCKERFILE.read_text().split("\nFROM ")[1]
    sources: list[str] = []
    for line in build_stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            sources.extend(line.split()[1:-1])
    return sources


def dockerfile_version() -> str:
    match = re.search(r"^ARG VERSION=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert match, "the Dockerfile has no ARG VERSION"
    return match.group(1)


def setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def setup_cfg_version() -> str:
    return setup_cfg()["metadata"]["version"]


def build_stage_commands() -> list[str]:
    """The build stage's RUN commands, each RUN's continuations joined and split at its `&&`s."""
    build_stage = DOCKERFILE.read_text().split("\nFROM ")[1].replace("\\\n", " ")
    runs = [line.removeprefix("RUN ") for line in build_stage.splitlines() if line.startswith("RUN ")]
    return [" ".join(command.split()) for run in runs for command in run.split("&&")]


def build_stage_wheel_commands() -> list[str]:
    """The build stage's `pip wheel`s: the dependencies', then twingress's own."""
    return [command for command in build_stage_commands() if "pip wheel" in command]


def compile_extra_pin(distribution: str) -> str:
    """The requirement setup.cfg's `compile` extra gives C{distribution} (`cython==3.3.1`)."""
    lines = setup_cfg()["options.extras_require"]["compile"].split()
    [pin] = [line for line in lines if re.split(r"[=<>]", line)[0].lower() == distribution]
    return pin


def hot_modules() -> list[str]:
    """The modules setup.py compiles (HOT_MODULES, HTTP2_MODULES) as module names (ingress/proxy/idle.py -> ingress.proxy.idle)."""
    modules = []
    for name in ("HOT_MODULES", "HTTP2_MODULES"):
        match = re.search(rf"^{name} = \[(.*?)\]", (ROOT / "setup.py").read_text(), re.MULTILINE | re.DOTALL)
        assert match, f"setup.py has no {name}"
        modules += [path.removesuffix(".py").replace("/", ".") for path in re.findall(r'"([^"]+\.py)"', match.group(1))]
    return modules


def test_the_image_version_is_the_package_version() -> None:
    assert dockerfile_version() == setup_cfg_version()


def test_the_image_builds_the_compiled_wheel() -> None:
    """What the test below does is what the Dockerfile does: a compiled wheel, built without isolation."""
    dependencies, twingress = build_stage_wheel_commands()
    assert dependencies == "pip wheel --no-cache-dir --wheel-dir /wheels --find-links /h2stack --constraint /h2stack/constraints.txt ."
    assert twingress == "TWINGRESS_COMPILE=1 pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels ."
    assert "setup.py" in build_stage_sources()


def test_the_image_compiles_the_http2_stack_with_the_pinned_cython() -> None:
    """The HTTP/2 stack's layer comes before the source's and installs Cython itself: the version `make compiled` uses."""
    commands = build_stage_commands()
    [install] = [command for command in commands if "h2stack.py" not in command and "cython" in command]
    assert f'"{compile_extra_pin("cython")}"' in install.split(), install
    assert commands.index(install) + 1 == commands.index("python3 h2stack.py wheels /h2stack")
    sources = build_stage_sources()
    assert sources.index("h2stack.py") < sources.index("ingress")


def test_wheel_built_as_the_dockerfile_does_installs_and_runs_twistd_ingress(tmp_path: Path) -> None:
    context = tmp_path / "src"
    context.mkdir()
    for source in build_stage_sources():
        path = ROOT / source
        if path.is_dir():
            shutil.copytree(path, context / source, ignore=shutil.ignore_patterns("__pycache__", "dropin.cache"))
        else:
            shutil.copy2(path, context / source)
    assert (WHEELHOUSE / ".stamp").exists(), f"no wheelhouse at {WHEELHOUSE}: run `make wheelhouse` (make test does)"
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]
    offline = ["--no-index", f"--find-links={WHEELHOUSE}"]
    # As the build stage: the dependencies and the compile extra are installed (this venv has them;
    # the stage installs them from the index) and mypyc builds without an isolated environment.
    compiled = os.environ | {"TWINGRESS_COMPILE": "1"}
    subprocess.run([*pip, "wheel", "-q", "--no-build-isolation", *offline, "--wheel-dir", str(wheels), str(context)], check=True, cwd=context, env=compiled)

    ours = list(wheels.glob(f"twingress-{setup_cfg_version()}-*.whl"))
    assert len(ours) == 1, sorted(p.name for p in wheels.iterdir())
    listing = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(ours[0])], check=True, capture_output=True, text=True).stdout
    assert "twisted/plugins/ingress_plugin.py" in listing
    assert "twisted/plugins/__init__.py" not in listing  # it would shadow Twisted's own plugins package

    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "-q", "--no-index", f"--find-links={wheels}", f"twingress=={setup_cfg_version()}"]
    subprocess.run(install, check=True, cwd=tmp_path)

    where = subprocess.run([str(python), "-c", "import ingress; print(ingress.__file__)"], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert where.stdout.startswith(str(environment)), where.stdout  # the installed copy, not the source tree
    modules = hot_modules()
    assert len(modules) >= 10, modules
    files = subprocess.run(
        [str(python), "-c", f"import importlib; print('\\n'.join(importlib.import_module(m).__file__ for m in {modules!r}))"],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    ).stdout.split()
    assert len(files) == len(modules) and all(f.startswith(str(environment)) and f.endswith(".so") for f in files), files
    helped = subprocess.run([str(environment / "bin" / "twistd"), "ingress", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    missing = [option for option in OPTIONS if option not in helped.stdout]
    assert not missing, helped.stdout
