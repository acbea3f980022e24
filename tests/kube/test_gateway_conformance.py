"""
The upstream Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance, the version
testenv/gateway-conformance/go.mod pins), run as it is against twingress on the test apiserver.

twingress runs as C{twistd -n ingress} with the Gateway listeners' ports on every address of the
test's network namespace, and gives each Gateway an address of its own (10.244.2.1-32, put on lo
for the run: C{--gateway-addresses}), reported in its status; the suite's Deployments
become pods through a real kube-controller-manager, and the stand-in node
(L{tests.kube.standin_node}) runs their echo servers. The profiles and features claimed are
L{conformance_support.PROFILES} and L{conformance_support.FEATURES}: every test of a claimed
feature must pass. The report the suite writes (C{--report-output}) goes to
$TWINGRESS_CONFORMANCE_REPORT when set (C{make gateway-conformance-report} writes
docs/gateway-conformance/), else to the test's temporary directory.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ingress
from tests.kube import conformance_support as suite
from tests.kube.api import Kube
from tests.kube.gateway_support import CONTROLLER, GROUP, VERSION, GatewayAPI
from tests.kube.standin_node import StandInNode
from tests.kube.twingress import wait_until
from tests.support import unavailable

pytestmark = pytest.mark.kube

REPORT_ENV = "TWINGRESS_CONFORMANCE_REPORT"
OUTPUT_TAIL_CHARS = 20000


@pytest.fixture
def suite_bin_dir() -> Path:
    bin_dir = suite.suite_binaries()
    absent = suite.missing(bin_dir)
    if absent:
        message = f"the conformance suite is not built ({', '.join(absent)} missing in {bin_dir}): run make testenv or testenv/gateway-conformance.sh"
        unavailable(message)
    return bin_dir


@pytest.fixture
def node(kube_cluster: Any, suite_bin_dir: Path, tmp_path: Path) -> Iterator[StandInNode]:
    """
    The stand-in node, for the suite's pods. (The session's controller-manager runs the deployment,
    replicaset and endpointslice controllers since the real node came; this run of pytest must not
    start that node, whose scheduler would also place the suite's pods: make test runs the node's
    tests in a run of their own, C{-m node}.)
    """
    binaries = {"echo": suite_bin_dir / "echo-basic", "dns": suite_bin_dir / "dnswhoami"}
    standin = StandInNode(kube_cluster.kubeconfig, tmp_path / "node", binaries).start()
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture
def gateway_pool(kube_cluster: Any) -> Iterator[tuple[str, ...]]:
    """The Gateways' addresses, on lo for the run (they must be the node's to be listened on)."""
    if not kube_cluster.in_netns:
        pytest.fail("the conformance suite runs inside testenv/netns-run (it adds the Gateways' addresses to lo)", pytrace=False)
    suite.add_addresses(suite.GATEWAY_POOL)
    yield suite.GATEWAY_POOL
    suite.remove_addresses(suite.GATEWAY_POOL)


@pytest.fixture
def conformance_class(gateway_api: GatewayAPI) -> Iterator[str]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GatewayClass", "metadata": {"name": suite.GATEWAY_CLASS}, "spec": {"controllerName": CONTROLLER}}
    gateway_api.create("gatewayclasses", body)
    yield suite.GATEWAY_CLASS
    gateway_api.delete_class(suite.GATEWAY_CLASS)


def _wait_namespaces_gone(kube: Kube) -> None:
    """The suite deletes its namespaces at the end; their pods need the node to go (it confirms deletions)."""

    def gone() -> bool:
        return not [n for n in kube.core.list_namespace().items if n.metadata.name.startswith("gateway-conformance")]

    wait_until(gone, timeout=120, what="the suite's namespaces deleted")


def test_gateway_api_conformance(
    kube_cluster: Any, kube: Kube, node: StandInNode, gateway_pool: tuple[str, ...], conformance_class: str, twingress: Any, suite_bin_dir: Path, tmp_path: Path
) -> None:
    """Every test of every claimed profile and feature passes; the report says so."""
    twingress(
        "--http", "tcp:80", "--https", "tcp:443", "--http2-cleartext",
        "--gateway-addresses", ",".join(gateway_pool),
        "--publish-status-address", suite.GATEWAY_ADDRESS,
        "--leader-election-namespace", "default",
        "--leader-election-id", f"gateway-conformance-{uuid.uuid4().hex[:6]}",
        "--generate-ingresses", "false",
    )
    report_path = Path(os.environ.get(REPORT_ENV) or tmp_path / "report.yaml")
    report_path.parent.mkdir(parents=True, exist_ok=True)
    run = suite.run_suite(suite_bin_dir, kube_cluster.kubeconfig, report_path, tmp_path / "suite.log", ingress.__version__)
    output = run.output_path.read_text(errors="replace")
    print(f"conformance suite: exit {run.returncode} after {run.seconds:.0f}s; node problems: {node.problems}", file=sys.stderr)
    _wait_namespaces_gone(kube)
    assert report_path.is_file(), f"no report written (exit {run.returncode}):\n{output[-OUTPUT_TAIL_CHARS:]}"
    report = suite.Report(report_path)
    print(f"conformance report: {report.counts()}", file=sys.stderr)
    assert sorted(report.profiles()) == sorted(suite.PROFILES), report.data
    failed = {name: tests for name, tests in report.failed().items() if tests}
    assert not failed, f"failed: {failed}\n{output[-OUTPUT_TAIL_CHARS:]}"
    assert all(counts["Passed"] > 0 for counts in report.counts().values()), report.counts()
    assert run.returncode == 0, output[-OUTPUT_TAIL_CHARS:]
