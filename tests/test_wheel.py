"""
The Dockerfile's build stage, read: the commands it runs and their order, checked against the
files they depend on (setup.cfg's version and pins, setup.py's module lists).

The image itself is built from this Dockerfile by a real builder before the tests run (`make
image-archive`), and tests/deploy/test_image.py runs it: that its wheel carries the twistd plugin
and every module, that the request path's modules are the compiled ones, that `twistd ingress`
knows our options.
"""

from __future__ import annotations

import configparser
import re

from tests.support import ROOT

DOCKERFILE = ROOT / "Dockerfile"
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
