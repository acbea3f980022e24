# -*- test-case-name: tests.proxy.test_upstream_connections -*-
"""
How well the upstream keep-alive pools work: connections opened, connections parked now, and
connections closed because their endpoint's idle pool was full.

An operator reads the ratio of connections opened to requests: near 0 is keep-alive working,
near 1 is a connection per request (an endpoint that closes, or more concurrent requests to
one endpoint than C{upstream-keepalive-connections}, the count ingress-nginx and nginx also
keep per worker).  The pools keep plain integers on the paths that open or turn away a
connection, never on the reused connection's path; the families are built only when /metrics
is scraped.  Counters are per process; /metrics with workers sums them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class KeepAlivePool(Protocol):
    """The HTTP/1.1 pool's counts (L{ingress.proxy.request.upstream.UpstreamPool})."""

    opened: int
    pool_full: int

    def idle_count(self) -> int: ...


class MultiplexedPool(Protocol):
    """The HTTP/2 pool's count (L{ingress.proxy.http2.upstream.H2UpstreamPool})."""

    opened: int


class UpstreamConnectionMetrics(Collector):
    """C{twingress_upstream_connections_opened_total}, C{..._idle_connections}, C{..._idle_pool_full_total}."""

    def __init__(self, http1: KeepAlivePool, http2: MultiplexedPool) -> None:
        self.http1 = http1
        self.http2 = http2

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        opened = CounterMetricFamily(
            "twingress_upstream_connections_opened",
            "Connections to endpoints opened, by protocol (http/1.1: one request at a time; h2: multiplexed)",
            labels=["protocol"],
        )
        opened.add_metric(["http/1.1"], self.http1.opened)
        opened.add_metric(["h2"], self.http2.opened)
        yield opened
        yield GaugeMetricFamily(
            "twingress_upstream_idle_connections",
            "HTTP/1.1 connections to endpoints parked in the keep-alive pools now",
            value=self.http1.idle_count(),
        )
        yield CounterMetricFamily(
            "twingress_upstream_idle_pool_full",
            "HTTP/1.1 connections closed after their response because their endpoint's idle pool was full (upstream-keepalive-connections)",
            value=self.http1.pool_full,
        )
