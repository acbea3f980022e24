"""
docs/observability.md against /metrics: every metric family twingress registers is in its tables
once, with its type, and every family the tables name exists.

What a running twingress exposes is the source: C{twistd -n ingress} on the bundled quickstart with
two worker processes (the C{twingress_worker*} families exist only then) and C{--nginx-metrics
true}, read from its admin listener after two requests.  The families that need a cluster or the
Lease (the controllers', ingress-nginx's C{leader_election_status}) are taken from the same classes
the process registers them with.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from ingress.controllers.metrics import ControllerMetrics
from ingress.observe.nginx_metrics import NginxMetrics, controller_identity
from tests.docs_tables import DOCS, families, spans, table_rows
from tests.support import ROOT, Twingress, http_status

QUICKSTART = ROOT / "examples" / "quickstart"


def _documented() -> list[tuple[str, str]]:
    """(metric, type) of every row of docs/observability.md's metric tables."""
    rows = table_rows(DOCS / "observability.md", "| metric | type |")
    found = []
    for row in rows:
        (name,) = spans(row[0])
        found.append((name, row[1]))
    return found


def _cluster_only() -> dict[str, str]:
    """The families registered only with a cluster source or the Lease, from the classes that register them."""
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    nginx = NginxMetrics(controller_identity())
    nginx.reloads, nginx.leader = 1, True
    nginx.certificates = lambda: [("default", "a.test", "a-tls", 0.0)]  # (namespace, host, Secret, not after)
    sampled = CollectorRegistry()
    sampled.register(nginx)
    return {**families(generate_latest(registry).decode()), **families(generate_latest(sampled).decode(), sampled_only=True)}


def _exposed(tmp_path: Path) -> dict[str, str]:
    proxy = Twingress(QUICKSTART, "--workers", "2", "--nginx-metrics", "true", log_path=tmp_path / "twingress.log")
    try:
        for host in ("echo.example.com", "unknown.example.org"):  # the quickstart's echo pods are not running: 502s
            assert http_status(proxy.http_port, host) >= 400
        status, body = proxy.admin("/metrics")
    finally:
        proxy.stop()
    assert status == 200
    return families(body.decode())


def test_every_metric_is_documented_once_with_its_type(tmp_path: Path) -> None:
    documented = _documented()
    assert sorted(name for name, count in Counter(name for name, _ in documented).items() if count > 1) == []
    registered = {**_exposed(tmp_path), **_cluster_only()}
    assert registered.keys() >= {"twingress_http_requests_total", "twingress_workers", "nginx_ingress_controller_requests"}
    names = dict(documented)
    assert sorted(set(registered) - set(names)) == [], "registered, not in docs/observability.md"
    assert sorted(set(names) - set(registered)) == [], "in docs/observability.md, not registered"
    assert {name: names[name] for name in registered} == registered
