"""
Prometheus metrics, all named C{twingress_*} (beside the process's own C{process_*}, L{ingress.observe.process_metrics}).

Labels stay bounded: a route is "namespace/ingress" (never a raw path or
host), a status is the numeric code.  The per-request metrics live in
L{ingress.observe.request_metrics}, built for the hot path.
"""

from __future__ import annotations

from typing import Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, enable_created_metrics

from ingress.observe.collector import CollectorMetrics
from ingress.observe.process_metrics import ProcessMetrics, register_build_info
from ingress.observe.request_metrics import RequestMetrics

NO_ROUTE = "-"


def created_series(wanted: bool) -> None:
    """
    Whether counters and histograms expose a C{_created} series beside their values
    (C{--metrics-created}, off by default).  prometheus_client adds one per label set: a
    timestamp dashboards do not use, which doubled the counters' lines on /metrics.  The
    switch is the library's, for the whole process; it applies when the metrics are collected.
    """
    if wanted:
        enable_created_metrics()
    else:
        disable_created_metrics()


class Metrics:
    """One registry's worth of twingress metrics (tests make their own registry); C{worker}: a worker process's index."""

    def __init__(self, registry: Optional[CollectorRegistry] = None, worker: Optional[int] = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        r.register(ProcessMetrics(worker))  # process_*: the primary's unlabelled, each worker's with worker="N"
        self.build_info = register_build_info(r)
        self.per_request = RequestMetrics()
        r.register(self.per_request)
        self.request_done = self.per_request.request_done
        self.upstream_answered = self.per_request.upstream_answered
        self.collector = CollectorMetrics(r)  # counted once ingress.speedups.heap.FrozenWatch has started
        self.open_connections = Gauge(
            "twingress_open_connections", "Client connections open now, by listener", ["listener"], registry=r
        )
        self.mirror_requests = Counter(
            "twingress_http_mirror_requests",
            "Request copies for RequestMirror backends, by route and outcome (answered, failed, cut: the mirror was too slow, no-endpoint)",
            ["route", "outcome"], registry=r,
        )
        self.upstream_failures = Counter(
            "twingress_upstream_failures", "Upstream connect failures and resets, by reason", ["reason"], registry=r
        )
        self.build_seconds = Histogram(
            "twingress_table_build_seconds",
            "Time to build a routing table from a snapshot",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=r,
        )
        self.table_generation = Gauge("twingress_table_generation", "Generation of the live routing table", registry=r)
        self.table_routes = Gauge("twingress_table_routes", "Routes in the live routing table", registry=r)
        self.problems = Gauge(
            "twingress_object_problems", "Objects (or parts of one) not served as written in the live table, by reason", ["reason"], registry=r
        )
        self.source_errors = Counter(
            "twingress_source_errors", "Errors reading a configuration source, by source", ["source"], registry=r
        )
        self.malformed_requests = Counter(
            "twingress_http_malformed_requests", "Requests refused before routing, by status code", ["status"], registry=r
        )
        self.denied = Counter(
            "twingress_http_denied", "Requests an access guard refused, by reason and route", ["reason", "route"], registry=r
        )
        self.http2_connection_errors = Counter(
            "twingress_http2_connection_errors",
            "HTTP/2 connections ended with GOAWAY for an error, by reason (rapid-reset, continuation-flood, protocol)",
            ["reason"],
            registry=r,
        )
        self.tls_certificate_errors = Counter(
            "twingress_tls_certificate_errors", "TLS Secrets (or hosts of one) skipped, by reason", ["reason"], registry=r
        )
        self.tls_not_after = Gauge(
            "twingress_tls_certificate_not_after_seconds",
            "Expiry (Unix time) of each loaded TLS certificate",
            ["namespace", "secret"],
            registry=r,
        )
        self.certificate_expiry = Gauge(
            "twingress_certificate_expiry_timestamp_seconds",
            "Expiry (Unix time) of each TLS certificate the table serves, by Secret and issuer (an ACME directory, or 'secret')",
            ["namespace", "secret", "issuer"],
            registry=r,
        )
        self.kube_connected = Gauge(
            "twingress_kube_connected", "1 while the informer's list/watch is connected, by kind", ["kind"], registry=r
        )
        self.kube_relists = Counter("twingress_kube_relists", "Full lists (initial, after 410 Gone or errors), by kind", ["kind"], registry=r)
        self.kube_watch_restarts = Counter(
            "twingress_kube_watch_restarts", "Watches that ended and were re-established, by kind", ["kind"], registry=r
        )
        # Stream listeners (TCP and UDP): labelled by route ("namespace/name"), so bounded by the objects.
        self.stream_connections = Counter(
            "twingress_stream_connections", "TCP connections or UDP sessions opened, by route and protocol", ["route", "protocol"], registry=r
        )
        self.stream_active = Gauge(
            "twingress_stream_active", "TCP connections or UDP sessions open now, by route and protocol", ["route", "protocol"], registry=r
        )
        self.stream_bytes = Counter(
            "twingress_stream_bytes",
            "Bytes relayed, by route, protocol and direction (upstream: client to upstream; downstream: back)",
            ["route", "protocol", "direction"],
            registry=r,
        )
        self.stream_upstream_errors = Counter(
            "twingress_stream_upstream_errors", "Stream upstream failures, by route, protocol and reason", ["route", "protocol", "reason"], registry=r
        )
        self.stream_dropped = Counter(
            "twingress_stream_udp_dropped", "UDP datagrams dropped, by route and reason", ["route", "reason"], registry=r
        )
        self.stream_listener_errors = Counter(
            "twingress_stream_listener_errors", "Stream listeners that failed to open, by protocol and port", ["protocol", "port"], registry=r
        )
        self.skipped = Gauge(
            "twingress_ingresses_skipped",
            "Ingresses not served because their class is another's (IngressClass of another controller, unknown class, none), by reason",
            ["reason"],
            registry=r,
        )
        self._problem_reasons: set[str] = set()
        self._skip_reasons: set[str] = set()

    def set_skipped(self, counts: dict[str, int]) -> None:
        """Replace the skipped-Ingress gauge: reasons that went away drop to zero."""
        for reason in self._skip_reasons | set(counts):
            self.skipped.labels(reason).set(counts.get(reason, 0))
        self._skip_reasons |= set(counts)

    def set_problems(self, reasons: list[str]) -> None:
        """Replace the problem gauge: reasons that went away drop to zero."""
        counts: dict[str, int] = {}
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
        for reason in self._problem_reasons | set(counts):
            self.problems.labels(reason).set(counts.get(reason, 0))
        self._problem_reasons |= set(counts)
