# -*- test-case-name: tests.proxy.test_admin -*-
"""
The two per-request metrics, kept in plain dicts and exposed by a collector.

C{prometheus_client}'s Counter and Histogram take a lock and (for a
histogram) walk the buckets in Python on every observation, several
microseconds per request on the proxy's hot path.  Here a request costs a
dict increment and a C{bisect}; the families are built only when /metrics is
scraped.  Both are only touched on the reactor thread.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS: Final[tuple[float, ...]] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RequestMetrics(Collector):
    """C{twingress_http_requests_total{route,status,protocol}} and C{twingress_upstream_response_seconds{route}}."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int, str], int] = {}
        self._latency: dict[str, list[float]] = {}  # per route: bucket counts (+Inf last), then the sum

    def request_done(self, route: str, status: int, protocol: str = "http/1.1") -> None:
        key = (route, status, protocol)
        self.requests[key] = self.requests.get(key, 0) + 1

    def upstream_answered(self, route: str, seconds: float) -> None:
        counts = self._latency.get(route)
        if counts is None:
            counts = self._latency[route] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        counts[-1] += seconds

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily(
            "twingress_http_requests",
            "HTTP requests answered, by route, status code and protocol (http/1.1, h2)",
            labels=["route", "status", "protocol"],
        )
        for (route, status, protocol), count in sorted(self.requests.items()):
            requests.add_metric([route, str(status), protocol], count)
        yield requests
        latency = HistogramMetricFamily(
            "twingress_upstream_response_seconds",
            "Time from sending a request upstream to its response head, by route",
            labels=["route"],
        )
        for route, counts in sorted(self._latency.items()):
            cumulative, buckets = 0.0, []
            for bound, in_bucket in zip(LATENCY_BUCKETS + (float("inf"),), counts, strict=False):  # counts ends with the sum
                cumulative += in_bucket
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            latency.add_metric([route], buckets, sum_value=counts[-1])
        yield latency
