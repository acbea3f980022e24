"""
charts/twingress's renders accepted by the real apiserver: C{helm template} with each of the
chart's ci/*-values.yaml (and the defaults, and the take-over preset), applied with
C{kubectl apply --server-side --dry-run=server --validate=strict}, which refuses an unknown or
misspelled field and an invalid value, object by object, without creating anything. (Installing
the chart and serving through it: the install tests.) The ServiceMonitor's CRD is the minimal one
of tests/data/servicemonitor-crd.yaml (the Prometheus Operator's cannot be fetched here).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.chart import helm
from tests.kube import kustomize
from tests.support import ROOT

CASES: list[tuple[str, list[Path], list[str]]] = [
    ("defaults", [], []),
    ("take-over", [], ["controller.twingress.takeOverIngressNginx=true"]),
    ("acme", [], ["controller.twingress.acmeRBAC=true", "controller.extraArgs.acme-directory=https://acme.test/dir", "controller.extraArgs.acme-agree-tos=true"]),
    *[(path.name, [path], []) for path in sorted((helm.CHART / "ci").glob("*-values.yaml"))],
]


def _kubectl(kube_cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(kustomize.kubectl()), "--kubeconfig", str(kube_cluster.kubeconfig), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def chart_namespaces(kube_cluster) -> None:
    """The release's namespace and ingress-nginx's (the take-over's Role goes there), and the ServiceMonitor CRD."""
    for namespace in ["twingress", "ingress-nginx"]:
        done = _kubectl(kube_cluster, "create", "namespace", namespace)
        assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
    done = _kubectl(kube_cluster, "apply", "--server-side", "-f", str(ROOT / "tests" / "data" / "servicemonitor-crd.yaml"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("case", "values", "sets"), CASES, ids=[case for case, _, _ in CASES])
def test_the_apiserver_accepts_every_object(kube_cluster, chart_namespaces, case: str, values: list[Path], sets: list[str]) -> None:
    """Every rendered object passes the apiserver's strict validation (a server-side dry run)."""
    rendered = helm.run(*helm.template_args("twingress", "twingress", values, sets))
    assert rendered.returncode == 0, rendered.stderr
    done = _kubectl(kube_cluster, "apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-", stdin=rendered.stdout)
    assert done.returncode == 0, done.stderr
    kinds = {line.split("/", 1)[0] for line in done.stdout.splitlines()}
    assert {"daemonset.apps", "deployment.apps"} & kinds, done.stdout
