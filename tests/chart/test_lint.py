"""
C{helm lint --strict} of charts/twingress with each of its ci/*-values.yaml (the DaemonSet on the
node's network, the Deployment behind a Service, metrics with a ServiceMonitor, an ingress-nginx
user's values file), as chart repositories lint a chart: a warning fails, and so does a values
file that values.schema.json refuses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chart import helm

CI_VALUES = sorted((helm.CHART / "ci").glob("*-values.yaml"))


def test_every_kind_of_install_has_a_ci_values_file() -> None:
    """The four shapes the chart is for each have a lint values file."""
    assert {path.name for path in CI_VALUES} >= {
        "daemonset-hostnetwork-values.yaml",
        "deployment-service-values.yaml",
        "metrics-servicemonitor-values.yaml",
        "ingress-nginx-migration-values.yaml",
    }


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda path: path.name)
def test_lint_strict(values: Path) -> None:
    """helm lint --strict passes with the values file."""
    done = helm.run("lint", "--strict", str(helm.CHART), "--values", str(values))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_lint_strict_refuses_a_value_of_the_wrong_type() -> None:
    """The schema is part of lint: a string where a boolean belongs fails it, naming the key."""
    done = helm.run("lint", "--strict", str(helm.CHART), "--set-string", "controller.hostNetwork=yes")
    assert done.returncode != 0
    assert "hostNetwork" in done.stdout + done.stderr
