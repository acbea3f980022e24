"""
k8s/ rendered as users render it: C{kubectl kustomize DIR}, with the kubectl that testenv/build.sh
builds from the same k8s.io/kubernetes module as the test apiserver (its kustomize is the one
C{kubectl apply -k} runs).

The project once rendered k8s/ with a small renderer of its own; it accepted an overlay that
kubectl refuses ("cycle detected: candidate root ... contains visited root ..."), so the README's
C{kubectl apply -k k8s/overlays/edge/} failed for every user while the tests passed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.kube import cluster


class KustomizeError(RuntimeError):
    """kubectl refused to render the kustomization (its message says why)."""


def kubectl() -> Path:
    """The kubectl binary testenv/build.sh built."""
    path = cluster.bin_dir() / "kubectl"
    if not path.exists():
        raise KustomizeError(f"{path} does not exist: build it with testenv/build.sh (make testenv)")
    return path


def render(directory: Path) -> list[dict]:
    """The objects C{kubectl kustomize DIRECTORY} prints, as dicts, in its order."""
    done = subprocess.run([str(kubectl()), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise KustomizeError(f"kubectl kustomize {directory}: {done.stderr.strip()}")
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def find(objects: list[dict], kind: str, name: str) -> dict:
    """The one rendered object of C{kind} named C{name}."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise KeyError(f"{kind}/{name}: {len(found)} objects")
    return found[0]
