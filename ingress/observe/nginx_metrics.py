# -*- test-case-name: tests.proxy.test_nginx_metrics -*-
"""
ingress-nginx's metric names and labels (C{--nginx-metrics true}), so its dashboards and alerts keep working.

ingress-nginx's controller exposes C{nginx_ingress_controller_*} families (source:
docs/user-guide/monitoring.md and the collectors in internal/ingress/metric/collectors/):
per request (socket.go) a counter C{requests} and histograms C{request_duration_seconds},
C{response_duration_seconds}, C{header_duration_seconds}, C{connect_duration_seconds},
C{request_size}, C{response_size} and C{bytes_sent}, labelled C{status, method, path, namespace,
ingress, service, canary} and C{host} (C{--metrics-per-host}, on by default); per controller
(controller.go) C{config_hash}, C{config_last_reload_successful} and its timestamp, C{success},
C{errors}, C{leader_election_status}, C{ssl_expire_time_seconds}; per process (nginx_status.go,
process.go) C{nginx_process_connections{state}} and C{nginx_process_*} resource use.  Every family
carries C{controller_namespace, controller_class, controller_pod}.

This module is a second request recorder beside the access log: it is installed only when the
option is on, so a proxy without it pays nothing.  Like L{ingress.observe.request_metrics} it keeps
plain dicts on the reactor thread and builds families only when scraped.  Families are typed as the
Go client types them (a counter named C{requests}, not C{requests_total}), and sum over worker
processes in L{ingress.observe.merge} like every other counter and histogram.  The families of
counters whose names end in C{_total} (C{nginx_process_requests_total}, C{nginx_process_cpu_seconds_total})
are named without it, as prometheus_client names every counter; the others (C{requests}, C{success},
C{errors}) carry their samples' name and L{ingress.observe.exposition} writes them as client_golang
does.  Like a Go C{CounterVec} without children, the per-request families are left out until a
request was counted.
"""

from __future__ import annotations

import os
import resource
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional, Protocol

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

PREFIX = "nginx_ingress_controller_"
# ingress-nginx's default buckets (pkg/flags/flags.go: --time-buckets, --length-buckets, --size-buckets)
TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LENGTH_BUCKETS = tuple(float(10 * n) for n in range(1, 11))
SIZE_BUCKETS = tuple(float(10**n) for n in range(1, 8))
REQUEST_LABELS = ("status", "method", "path", "namespace", "ingress", "service", "canary", "host")
CONTROLLER_LABELS = ("controller_namespace", "controller_class", "controller_pod")
# histogram name -> buckets, in the order of a record's observations
HISTOGRAMS = (
    ("request_duration_seconds", TIME_BUCKETS, "The request processing time in seconds"),
    ("response_duration_seconds", TIME_BUCKETS, "The time spent on receiving the response from the upstream server"),
    ("header_duration_seconds", TIME_BUCKETS, "The time spent on receiving first header from the upstream server"),
    ("request_size", LENGTH_BUCKETS, "The request length (including request line, header, and request body)"),
    ("response_size", LENGTH_BUCKETS, "The response length (including request line, header, and request body)"),
    ("bytes_sent", SIZE_BUCKETS, "DEPRECATED The number of bytes sent to a client"),
)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def controller_identity(pod: str = "", namespace: str = "", controller_class: str = "") -> tuple[str, str, str]:
    """The constant labels in L{CONTROLLER_LABELS} order: namespace (POD_NAMESPACE), class, pod (POD_NAME, else the host name)."""
    return (
        namespace or os.environ.get("POD_NAMESPACE") or "",
        controller_class or "twingress",
        pod or os.environ.get("POD_NAME") or os.uname().nodename,
    )


def _service(upstream_key: str) -> str:
    """"namespace/service:port" -> "service" (ingress-nginx's service label is the Service's name)."""
    return upstream_key.partition("/")[2].rpartition(":")[0]


def _host(host: bytes) -> str:
    name = host.decode("ascii", "replace").lower()
    if name.startswith("["):
        return name.partition("]")[0] + "]"
    return name.partition(":")[0]


class _Histogram:
    """Bucket counts (+Inf last) and a sum, for one label set."""

    __slots__ = ("counts", "total")

    def __init__(self, size: int) -> None:
        self.counts = [0] * (size + 1)
        self.total = 0.0


class NginxMetrics(Collector):
    """Records each answered request the way ingress-nginx's socket collector does and exposes the families."""

    def __init__(self, identity: tuple[str, str, str], connections: Optional[Callable[[], float]] = None) -> None:
        self.identity = identity
        self._connections = connections  # open client connections now (the "active" state)
        # (namespace, host, secret name, not after) of each certificate served, when this process serves TLS
        self.certificates: Optional[Callable[[], Iterable[tuple[str, str, str, float]]]] = None
        self.requests: dict[tuple[str, ...], int] = {}
        self._histograms: dict[tuple[str, ...], list[_Histogram]] = {}
        self.reloads = 0  # tables built and swapped in
        self.reload_errors = 0
        self.last_reload = 0.0
        self.config_hash = 0.0
        self.leader: Optional[bool] = None

    def record(self, exchange: Any, status: int) -> None:
        """One request answered (the access log's interface: its L{ingress.proxy.request.exchange.Exchange})."""
        mono = time.monotonic()
        head, route = exchange.request, exchange.route
        if route is not None:
            source = route.source
            key: tuple[str, ...] = (str(status), "", route.path, source.namespace, source.name, _service(route.upstream.key), "", "")
        else:
            key = (str(status), "", "", "", "", "", "", "")
        if head is not None:
            length = len(head.method) + len(head.target) + 11 + len(head.block) + (head.framing.content_length or 0)
            key = (key[0], head.method.decode("ascii", "replace"), *key[2:7], _host(head.host))
            duration = mono - exchange.started_at
        else:
            length, duration = 0, 0.0
        self.requests[key] = self.requests.get(key, 0) + 1
        histograms = self._histograms.get(key)
        if histograms is None:
            histograms = self._histograms[key] = [_Histogram(len(buckets)) for _, buckets, _ in HISTOGRAMS]
        sent = exchange.body_sent
        upstream = mono - exchange.sent_at if exchange.sent_at else None
        for histogram, (_, buckets, _), value in zip(
            histograms, HISTOGRAMS, (duration, upstream, upstream, float(length), float(sent), float(sent)), strict=True
        ):
            if value is not None:
                histogram.counts[bisect_left(buckets, value)] += 1
                histogram.total += value

    def table_swapped(self, generation: int) -> None:
        """A new configuration is live: ingress-nginx's reload succeeded."""
        self.reloads += 1
        self.config_hash = float(generation)
        self.last_reload = time.time()

    def collect(self) -> Iterator[Metric]:
        const = dict(zip(CONTROLLER_LABELS, self.identity, strict=True))
        yield from self._request_families(const)
        yield from self._controller_families(const)
        if self.certificates is not None:
            yield self._certificate_family()
        yield from self._process_families(const)

    def _request_families(self, const: dict[str, str]) -> Iterator[Metric]:
        if not self.requests:
            return
        requests = Metric(PREFIX + "requests", "The total number of client requests", "counter")
        for key, count in sorted(self.requests.items()):
            requests.add_sample(PREFIX + "requests", {**const, **dict(zip(REQUEST_LABELS, key, strict=True))}, count)
        yield requests
        for index, (name, buckets, documentation) in enumerate(HISTOGRAMS):
            family = Metric(PREFIX + name, documentation, "histogram")
            for key, histograms in sorted(self._histograms.items()):
                labels = {**const, **dict(zip(REQUEST_LABELS, key, strict=True))}
                histogram = histograms[index]
                cumulative = 0
                for bound, count in zip((*buckets, float("inf")), histogram.counts, strict=True):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    family.add_sample(PREFIX + name + "_bucket", {**labels, "le": le}, cumulative)
                family.add_sample(PREFIX + name + "_sum", labels, histogram.total)
                family.add_sample(PREFIX + name + "_count", labels, cumulative)
            yield family

    def _controller_families(self, const: dict[str, str]) -> Iterator[Metric]:
        if not self.reloads:
            return  # a worker: the configuration is the primary's to report
        for name, kind, documentation, value in (
            ("config_hash", "gauge", "Running configuration hash actually running", self.config_hash),
            ("config_last_reload_successful", "gauge", "Whether the last configuration reload attempt was successful", 1.0),
            ("config_last_reload_successful_timestamp_seconds", "gauge", "Timestamp of the last successful configuration reload.", self.last_reload),
            ("success", "counter", "Cumulative number of Ingress controller reload operations", float(self.reloads)),
            ("errors", "counter", "Cumulative number of Ingress controller errors during reload operations", float(self.reload_errors)),
        ):
            family = Metric(PREFIX + name, documentation, kind)
            family.add_sample(PREFIX + name, const, value)
            yield family
        if self.leader is not None:
            family = Metric(PREFIX + "leader_election_status", "1 while this replica leads, 0 while it follows", "gauge")
            family.add_sample(PREFIX + "leader_election_status", {**const, "name": "twingress"}, 1.0 if self.leader else 0.0)
            yield family

    def _certificate_family(self) -> Metric:
        """C{ssl_expire_time_seconds}: labelled as controller.go labels it (no controller labels)."""
        expiry = Metric(PREFIX + "ssl_expire_time_seconds", "Number of seconds since 1970 to the SSL Certificate expire.", "gauge")
        assert self.certificates is not None
        for namespace, host, secret, not_after in sorted(self.certificates()):
            labels = {"namespace": namespace, "class": self.identity[1], "host": host, "secret_name": secret, "identifier": f"{namespace}/{secret}"}
            expiry.add_sample(PREFIX + "ssl_expire_time_seconds", labels, not_after)
        return expiry

    def _process_families(self, const: dict[str, str]) -> Iterator[Metric]:
        """This process's share of what ingress-nginx reports for its nginx processes (summed over workers)."""
        connections = Metric(PREFIX + "nginx_process_connections", "current number of client connections with state {active, reading, writing, waiting}", "gauge")
        active = self._connections() if self._connections is not None else 0.0
        connections.add_sample(PREFIX + "nginx_process_connections", {**const, "state": "active"}, active)
        yield connections
        total = Metric(PREFIX + "nginx_process_requests", "total number of client requests", "counter")
        total.add_sample(PREFIX + "nginx_process_requests_total", const, float(sum(self.requests.values())))
        yield total
        usage = resource.getrusage(resource.RUSAGE_SELF)
        rss, virtual = _memory()
        for name, kind, documentation, value in (
            ("nginx_process_num_procs", "gauge", "number of processes", 1.0),
            ("nginx_process_cpu_seconds_total", "counter", "Cpu usage in seconds", usage.ru_utime + usage.ru_stime),
            ("nginx_process_resident_memory_bytes", "gauge", "number of bytes of memory in use", rss),
            ("nginx_process_virtual_memory_bytes", "gauge", "number of bytes of memory in use", virtual),
        ):
            family = Metric(PREFIX + name.removesuffix("_total") if kind == "counter" else PREFIX + name, documentation, kind)
            family.add_sample(PREFIX + name, const, value)
            yield family


def _memory() -> tuple[float, float]:
    """Resident and virtual size of this process (Linux /proc; zeros elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            size, resident = statm.read().split()[:2]
    except OSError:
        return 0.0, 0.0
    return float(int(resident) * _PAGE), float(int(size) * _PAGE)


SUMMED_GAUGES = frozenset({
    PREFIX + "nginx_process_connections",
    PREFIX + "nginx_process_num_procs",
    PREFIX + "nginx_process_resident_memory_bytes",
    PREFIX + "nginx_process_virtual_memory_bytes",
})


class RequestRecorder(Protocol):
    """What the proxy calls once per answered request (L{ingress.observe.accesslog.AccessLog}, L{NginxMetrics})."""

    def record(self, exchange: Any, status: int) -> None: ...


class Recorders:
    """Several request recorders behind the one C{record(exchange, status)} the proxy calls."""

    def __init__(self, *recorders: RequestRecorder) -> None:
        self.recorders = recorders

    def record(self, exchange: Any, status: int) -> None:
        for recorder in self.recorders:
            recorder.record(exchange, status)


def recorder(access_log: Optional[RequestRecorder], nginx: Optional[NginxMetrics]) -> Optional[RequestRecorder]:
    """What the proxy's factories call per request: the access log, the nginx metrics, both, or None."""
    if nginx is None:
        return access_log
    if access_log is None:
        return nginx
    return Recorders(access_log, nginx)


def gauge_total(gauge: Any) -> float:
    """The sum of a C{prometheus_client} gauge's samples (open connections over every listener)."""
    return float(sum(sample.value for family in gauge.collect() for sample in family.samples))


def served_certificates(metrics: Any, store: Any) -> Callable[[], list[tuple[str, str, str, float]]]:
    """Each host's certificate (the TLS store's C{served}) with its expiry (C{twingress_tls_certificate_not_after_seconds})."""

    def read() -> list[tuple[str, str, str, float]]:
        expiry = {
            (sample.labels["namespace"], sample.labels["secret"]): sample.value
            for family in metrics.tls_not_after.collect()
            for sample in family.samples
        }
        found = []
        for host, secret in store.served.items():
            namespace, _, name = secret.partition("/")
            if (namespace, name) in expiry:
                found.append((namespace, host, name, expiry[namespace, name]))
        return found

    return read
