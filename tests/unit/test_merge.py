"""Tests for L{ingress.observe.merge}: one /metrics from the primary's and every worker's families."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ingress.observe.merge import Merged, merge


def _process(requests: float, open_connections: float, expiry: float, latencies: list[float]) -> list:
    registry = CollectorRegistry()
    Counter("twingress_http_requests", "requests", ["route"], registry=registry).labels("a/b").inc(requests)
    Gauge("twingress_open_connections", "open", ["listener"], registry=registry).labels("http").set(open_connections)
    Gauge("twingress_tls_certificate_not_after_seconds", "expiry", ["secret"], registry=registry).labels("s").set(expiry)
    histogram = Histogram("twingress_upstream_response_seconds", "latency", buckets=(0.1, 1.0), registry=registry)
    for latency in latencies:
        histogram.observe(latency)
    return list(registry.collect())


def _samples(families: list) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples if not s.name.endswith("_created")}


def test_counters_histograms_and_open_counts_add_up_other_gauges_do_not() -> None:
    merged = _samples(merge([_process(3, 2, 100, [0.05]), _process(4, 5, 100, [0.5, 2.0]), _process(0, 0, 90, [])]))
    assert merged[("twingress_http_requests_total", (("route", "a/b"),))] == 7
    assert merged[("twingress_open_connections", (("listener", "http"),))] == 7
    assert merged[("twingress_tls_certificate_not_after_seconds", (("secret", "s"),))] == 100  # one fact seen thrice
    assert merged[("twingress_upstream_response_seconds_bucket", (("le", "0.1"),))] == 1
    assert merged[("twingress_upstream_response_seconds_bucket", (("le", "1.0"),))] == 2
    assert merged[("twingress_upstream_response_seconds_bucket", (("le", "+Inf"),))] == 3
    assert merged[("twingress_upstream_response_seconds_count", ())] == 3


def test_the_merged_families_render_as_one_exposition() -> None:
    text = generate_latest(Merged(merge([_process(1, 0, 1, []), _process(2, 0, 1, [])]))).decode()
    assert text.count("# TYPE twingress_http_requests_total counter") == 1
    assert 'twingress_http_requests_total{route="a/b"} 3.0' in text
