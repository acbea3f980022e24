"""
C{--nginx-metrics true}: ingress-nginx's metric names and labels, so its dashboard and alerts keep working.

The spec is ingress-nginx's: docs/user-guide/monitoring.md ("Prometheus and Grafana installation",
the dashboard deploy/grafana/dashboards/nginx.json it installs) and the collectors'
names and labels (internal/ingress/metric/collectors/socket.go, controller.go, nginx_status.go,
process.go).  The dashboard is vendored in tests/data/ingress-nginx/ (SOURCE.md names its commit).
Every expression is evaluated by Prometheus's own PromQL engine (testenv/promql.sh builds it)
over three scrapes (read by Prometheus's scraper parser) of a real twistd with two worker
processes, after real traffic.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.promql import parse
from tests.support import EchoBackend, Manifests, Twingress, free_port, http_status, refusing_address
from tests.waiting import eventually

DASHBOARD = Path(__file__).parent.parent / "data" / "ingress-nginx" / "nginx.json"
# charts/ingress-nginx/values.yaml, controller.metrics.prometheusRule.rules (commit in SOURCE.md):
# each alert's expression without its threshold (with healthy traffic the threshold filters all away).
ALERTS = (
    "count(nginx_ingress_controller_config_last_reload_successful == 0)",  # NGINXConfigFailed: > 0
    'avg(nginx_ingress_controller_ssl_expire_time_seconds{host!="_"}) by (host) - time()',  # NGINXCertificateExpiry: < 604800
    '100 * ( sum( nginx_ingress_controller_requests{status=~"5.+"} ) / sum(nginx_ingress_controller_requests) )',  # NGINXTooMany500s
    '100 * ( sum( nginx_ingress_controller_requests{status=~"4.+"} ) / sum(nginx_ingress_controller_requests) )',  # NGINXTooMany400s
)
# What a Kubernetes pod scrape adds (Prometheus's kubernetes_sd relabelling as the dashboard expects it;
# kubernetes_pod_name is what its certificate panel filters on).
TARGET = {"job": "ingress-nginx", "instance": "10.244.0.9:10254", "namespace": "ingress-nginx", "pod": "twingress-abcde", "kubernetes_pod_name": "twingress-abcde"}
SCRAPE_INTERVAL_MS = 15_000


@pytest.fixture
def echo() -> Iterator[EchoBackend]:
    backend = EchoBackend("pod-m1", "127.0.0.1")
    yield backend
    backend.stop()


def dashboard_queries() -> list[str]:
    """Every target expression of every panel, and each template variable's series selector, with "All" chosen."""
    board = json.loads(DASHBOARD.read_text())
    found: list[str] = []

    def walk(panel: dict) -> None:
        found.extend(target["expr"] for target in panel.get("targets") or [] if target.get("expr"))
        for inner in panel.get("panels") or []:
            walk(inner)

    walk(board)
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if variable.get("type") == "query" and isinstance(query, str):
            selector = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip())
            assert selector, query
            found.append(f"count by ({selector.group(2)}) ({selector.group(1)})")
    # Grafana's "All" for these variables is their allValue ".*" (every variable sets includeAll and allValue).
    return [re.sub(r"\$(\w+)", ".*", expr) for expr in found]


def scrape(process: Twingress, binary: str, at_ms: int) -> list[dict]:
    """
    /metrics as Prometheus stores it (read by its scraper's parser, tests/proxy/promql.py): target
    labels added, clashing exported ones renamed exported_<name> (honor_labels: false).
    """
    status, body = process.admin("/metrics")
    assert status == 200
    samples = []
    for series in parse(binary, body)["series"]:
        name = series["labels"].pop("__name__")
        labels = {("exported_" + k if k in TARGET else k): v for k, v in series["labels"].items()}
        samples.append({"labels": {**labels, **TARGET, "__name__": name}, "t": at_ms, "v": series["v"]})
    return samples


TRAFFIC_REQUESTS = 8
"""How many requests one L{traffic} makes."""


def traffic(http_port: int, https_port: int) -> None:
    """200s over HTTP/1.1 and TLS, a 404 (no host), 502s (a route whose endpoint refuses)."""
    for _ in range(5):
        assert http_status(http_port, "m.test", "/a") == 200
    assert http_status(http_port, "nothing.test", "/") == 404
    assert http_status(http_port, "dead.test", "/") == 502
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", https_port, timeout=10, context=context)
    try:
        connection.request("GET", "/", headers={"Host": "s.test"})
        response = connection.getresponse()
        response.read()
        assert response.status == 200
    finally:
        connection.close()


def evaluate(binary: str, samples: list[dict], queries: list[str], at_ms: int) -> list[dict]:
    payload = json.dumps({"samples": samples, "queries": [{"expr": q, "t": at_ms} for q in queries]})
    result = subprocess.run([binary], input=payload, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    answers: list[dict] = json.loads(result.stdout)
    return answers


def test_official_dashboard_and_alerts_find_series(
    manifests: Manifests, echo: EchoBackend, twingress: Callable[..., Twingress], promql_eval: str
) -> None:
    """
    Every PromQL expression of ingress-nginx's Grafana dashboard (deploy/grafana/dashboards/nginx.json,
    as docs/user-guide/monitoring.md installs it) and of the chart's PrometheusRule examples returns
    series from twingress's /metrics after traffic, with two worker processes (the values are summed
    over them).  C{count(... == 0)} is empty while every reload succeeded, as it is for ingress-nginx:
    its selector without the comparison must find the series.
    """
    ca = CertificateAuthority("metrics-ca")
    manifests.route("web", "m.test", [echo.address], path="/")
    manifests.write("tls.yaml", tls_secret("s-tls", ca.issue(["s.test"])), Manifests.ingress("web-tls", "s.test", "web", tls=[{"hosts": ["s.test"], "secretName": "s-tls"}]))
    manifests.route("dead", "dead.test", [refusing_address()])
    https_port = free_port()
    process = twingress("--nginx-metrics", "true", "--workers", "2", "--https", f"tcp:{https_port}:interface=127.0.0.1")
    now_ms = int(time.time() * 1000)
    samples: list[dict] = []
    for step in range(3):
        traffic(process.http_port, https_port)
        answered = TRAFFIC_REQUESTS * (step + 1)
        eventually(lambda answered=answered: process.metric("twingress_http_requests_total") >= answered, f"{answered} requests counted (both workers)")
        samples += scrape(process, promql_eval, now_ms + step * SCRAPE_INTERVAL_MS)
    at_ms = now_ms + 2 * SCRAPE_INTERVAL_MS
    queries = dashboard_queries() + list(ALERTS)
    assert len(queries) >= 25, queries
    answers = evaluate(promql_eval, samples, queries, at_ms)
    empty = [a for a in answers if a.get("error") or not a["series"]]
    expected_empty = [a for a in empty if "== 0" in a["expr"] and not a.get("error")]
    recheck = evaluate(promql_eval, samples, [a["expr"].replace(" == 0", "") for a in expected_empty], at_ms)
    assert [a for a in empty if a not in expected_empty] == []
    assert all(a["series"] and not a.get("error") for a in recheck), recheck


def test_labels_are_ingress_nginx_s(manifests: Manifests, echo: EchoBackend, twingress: Callable[..., Twingress], promql_eval: str) -> None:
    """
    The request counter's label set is socket.go's requestTags plus host (--metrics-per-host, on by
    default) and the controller's constant labels; the Ingress's namespace, name, Service and path.
    """
    manifests.route("web", "m.test", [echo.address], path="/")
    process = twingress("--nginx-metrics", "true", "--http2-cleartext")
    assert http_status(process.http_port, "m.test", "/a") == 200
    h2 = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "-H", "Host: m.test",
         f"http://127.0.0.1:{process.http_port}/b"],
        capture_output=True, text=True, timeout=20,
    )
    assert h2.stdout == "2 200", h2.stderr  # an HTTP/2 stream is counted the same way
    eventually(lambda: process.metric("nginx_ingress_controller_requests") >= 2, "both requests counted")
    samples = [s for s in scrape(process, promql_eval, 0) if s["labels"]["__name__"] == "nginx_ingress_controller_requests"]
    assert len(samples) == 1
    labels = {k: v for k, v in samples[0]["labels"].items() if k not in TARGET and k != "__name__"}
    assert labels.pop("controller_pod")
    assert labels == {
        "controller_class": "twingress", "controller_namespace": "", "status": "200", "method": "GET", "path": "/",
        "exported_namespace": "default", "ingress": "web", "service": "web", "canary": "", "host": "m.test",
    }
    assert samples[0]["v"] == 2.0


def test_off_by_default(manifests: Manifests, echo: EchoBackend, twingress: Callable[..., Twingress]) -> None:
    """Without the option /metrics has only twingress_* families (the option is opt-in)."""
    manifests.route("web", "m.test", [echo.address])
    process = twingress()
    assert http_status(process.http_port, "m.test", "/") == 200
    _, body = process.admin("/metrics")
    assert b"twingress_http_requests" in body
    assert b"nginx_ingress_controller" not in body
