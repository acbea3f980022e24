"""
`pip install .` and `pip install -e .` of the tree, each in a fresh virtual environment, give a
working `twistd ingress` (issue 33) and `twingress audit` (issue 65): its --help, and a real start on the quickstart's manifests
answering /healthz. An editable install used to hide twisted/plugins/ (setuptools' import hook
shows packages, and Twisted looks for plugins in each sys.path entry's twisted/plugins/), so
twistd knew no "ingress" unless the Makefile's own .pth was added by hand.

The test runs in the test network namespace, where no package index is reachable: pip reads
only the wheelhouse `make wheelhouse` fills (the dependencies, setuptools and wheel), as
tests/test_wheel.py does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
import venv
from pathlib import Path

import pytest

from tests.support import ROOT, ProcessExited, alive, free_port
from tests.waiting import eventually

# The dependencies' wheels (and setuptools', wheel's), filled by `make wheelhouse`: the test network
# namespace reaches no package index.
WHEELHOUSE = Path(os.environ.get("TWINGRESS_WHEELHOUSE") or Path.home() / ".cache" / "twingress" / "wheelhouse")

# What setup.cfg packages and builds from: the tree as a user clones it, less what pip never reads.
SOURCES = ("ingress", "twisted", "setup.cfg", "setup.py", "pyproject.toml", "README.md", "LICENSE")


def _tree(into: Path) -> Path:
    """A copy of the tree (what the build reads), so an editable install points at it, not at ROOT."""
    into.mkdir()
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "dropin.cache"))
        else:
            shutil.copy2(source, into / name)
    return into


@pytest.mark.parametrize("editable", [False, True], ids=["pip-install", "pip-install-e"])
def test_a_fresh_venv_runs_twistd_ingress(tmp_path: Path, editable: bool) -> None:
    assert (WHEELHOUSE / ".stamp").exists(), f"no wheelhouse at {WHEELHOUSE}: run `make wheelhouse` (make test does)"
    tree = _tree(tmp_path / "twingress")
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir", "--no-index", f"--find-links={WHEELHOUSE}"]
    subprocess.run([*install, *(["-e"] if editable else []), str(tree)], check=True, cwd=tmp_path)

    where = subprocess.run([str(python), "-c", "import ingress; print(ingress.__file__)"], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert where.stdout.startswith(str(tree if editable else environment)), where.stdout
    twistd = str(environment / "bin" / "twistd")
    helped = subprocess.run([twistd, "ingress", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert helped.returncode == 0 and "--manifests" in helped.stdout, helped.stdout + helped.stderr
    # the console script installed with the package (issue 65): the audit of the migration example
    audited = subprocess.run(
        [str(environment / "bin" / "twingress"), "audit", "--manifests", str(ROOT / "examples" / "nginx-migration"), "--format", "json"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert audited.returncode == 0 and '"schemaVersion": 1' in audited.stdout, audited.stdout + audited.stderr

    http, admin = free_port(), free_port()
    command = [twistd, "--pidfile=", "--logfile=-", "-n", "ingress", "--manifests", str(ROOT / "examples" / "quickstart"),
               "--http", f"tcp:{http}:interface=127.0.0.1", "--https", "", "--admin", f"tcp:{admin}:interface=127.0.0.1"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert _healthz(admin, process) == 200
    finally:
        process.terminate()
        output = process.communicate(timeout=20)[0].decode(errors="replace")
    assert f"HTTP on 127.0.0.1:{http}" in output, output


def _healthz(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """The status /healthz answers, once it answers; fails at once if the process exits."""

    def answered() -> int:
        alive(process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return int(response.status)

    status: int = eventually(answered, "/healthz to answer", timeout=timeout, interval=0.1, fatal=(ProcessExited,))
    return status
