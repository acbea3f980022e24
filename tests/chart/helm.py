"""
charts/twingress rendered as its users render it: with the Helm that testenv/helm.sh builds
(Helm 4, helm.sh/helm/v4), as a subprocess, offline. A missing Helm skips the chart tests, or
fails them under TWINGRESS_REQUIRE_KUBE=1 (CI), through L{tests.support.unavailable}.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import ROOT, unavailable

CHART = ROOT / "charts" / "twingress"
HELM_SCRIPT = ROOT / "testenv" / "helm.sh"
KEYS = CHART / "keys.yaml"


def helm() -> Path:
    """The helm binary testenv/helm.sh built (skip, or fail under TWINGRESS_REQUIRE_KUBE=1, without it)."""
    done = subprocess.run([str(HELM_SCRIPT), "--print-path"], capture_output=True, text=True, check=True)
    path = Path(done.stdout.strip().splitlines()[-1]) / "helm"
    if not path.exists():
        unavailable(f"{path} does not exist: build it with testenv/helm.sh (make testenv)")
    return path


@dataclass(frozen=True)
class Run:
    """One helm command's exit status and output."""

    returncode: int
    stdout: str
    stderr: str


def run(*args: str) -> Run:
    """C{helm ARGS...}, its status and output (never raises on a non-zero exit)."""
    done = subprocess.run([str(helm()), *args], capture_output=True, text=True, timeout=120)
    return Run(done.returncode, done.stdout, done.stderr)


def template_args(release: str, namespace: str, values: list[Path], sets: list[str]) -> list[str]:
    """The arguments of C{helm template} with these values files and C{--set}s."""
    args = ["template", release, str(CHART), "--namespace", namespace, "--include-crds"]
    for path in values:
        args += ["--values", str(path)]
    for assignment in sets:
        args += ["--set", assignment]
    return args


def template(
    *, release: str = "twingress", namespace: str = "twingress", values: list[Path] | None = None, sets: list[str] | None = None
) -> list[dict[str, Any]]:
    """The objects C{helm template} renders, as dicts, in its order (the render must succeed)."""
    done = run(*template_args(release, namespace, values or [], sets or []))
    if done.returncode != 0:
        raise AssertionError(f"helm template failed: {done.stderr.strip()}")
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def template_error(*, values: list[Path] | None = None, sets: list[str] | None = None) -> str:
    """The message of a C{helm template} that must fail (AssertionError if it renders)."""
    done = run(*template_args("twingress", "twingress", values or [], sets or []))
    if done.returncode == 0:
        raise AssertionError("helm template rendered, but should have refused")
    return done.stderr


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one rendered object of C{kind} named C{name}."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise KeyError(f"{kind}/{name}: {len(found)} objects")
    return found[0]


def keys() -> dict[str, Any]:
    """charts/twingress/keys.yaml: the table of honoured and refused values the chart checks with."""
    loaded: dict[str, Any] = yaml.safe_load(KEYS.read_text())
    return loaded
