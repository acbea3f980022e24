"""
C{twingress audit} at the command line, as an operator runs it: the console script the package
installs and C{python -m ingress audit}.  A report is exit status 0 on stdout; a wrong line or a
source it cannot read (a missing directory, a malformed kubeconfig, an apiserver that does not
answer) is one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.audit_schema import validate
from tests.support import ROOT, refusing_address

RUNNERS = {
    "console-script": [str(Path(sys.executable).parent / "twingress"), "audit"],
    "python -m": [sys.executable, "-m", "ingress", "audit"],
}
DEADLINE = 60.0  # seconds to the exit: the imports take a few; a hang never ends
MIGRATION = ["--manifests", "examples/nginx-migration", "--nginx-configmap", "ingress-nginx/ingress-nginx-controller"]


def _run(runner: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(RUNNERS[runner] + list(args), cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE)


def _refused(result: subprocess.CompletedProcess[str], *mentions: str) -> str:
    """Exit status 1, one line on stderr naming C{mentions}, nothing on stdout."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("twingress audit: "), result.stderr
    assert all(mention in lines[0] for mention in mentions), (lines[0], mentions)
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_report_is_printed_with_exit_0(runner: str) -> None:
    result = _run(runner, *MIGRATION, "--format", "json")
    assert (result.returncode, result.stderr) == (0, "")
    report = json.loads(result.stdout)
    assert validate(report) == []
    assert report["summary"]["ingresses"] == {"served": 6, "skipped": 0}
    text = _run(runner, *MIGRATION)
    assert text.returncode == 0 and text.stdout.startswith("twingress audit: class twingress")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_missing_directory_is_one_line(runner: str, tmp_path: Path) -> None:
    _refused(_run(runner, "--manifests", str(tmp_path / "nope")), "is not a directory")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_malformed_kubeconfig_is_one_line(runner: str, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("this: is: not: yaml: [\n")
    _refused(_run(runner, "--kubeconfig", str(path)), f"--kubeconfig {str(path)!r}", "is not YAML")


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_apiserver_that_does_not_answer_is_one_line(runner: str, tmp_path: Path) -> None:
    host, port = refusing_address()
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "clusters": [{"name": "test", "cluster": {"server": f"https://{host}:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "test", "user": {"token": "abc"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    _refused(_run(runner, "--kubeconfig", str(path)), f"{host}:{port}")


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["--format", "yaml", *MIGRATION], ("--format must be one of: text, json, markdown, html",)),
        (["--take-over-ingress-nginx", "yes", *MIGRATION], ("--take-over-ingress-nginx must be true or false",)),
        (["--manifests", "examples", "--kubeconfig", "x"], ("give either --manifests or --kubeconfig, not both",)),
        (["--no-such-option"], ("no-such-option",)),
        (["--nginx-configmap", "just-a-name", *MIGRATION[:2]], ("--nginx-configmap takes NAMESPACE/NAME",)),
    ],
)
def test_a_wrong_line_is_one_line(args: list[str], mentions: tuple[str, ...]) -> None:
    _refused(_run("console-script", *args), *mentions)


def test_twingress_without_audit_says_how_to_use_it() -> None:
    result = subprocess.run([RUNNERS["console-script"][0]], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 1 and result.stderr.splitlines() == ["usage: twingress audit [options] (see twingress audit --help); the proxy is twistd ingress"]
