# -*- test-case-name: tests.proxy.test_admin -*-
"""
The admin listener: / (what follows), /healthz, /readyz, /metrics and /debug/routes; and the
--metrics listener, /metrics alone.

Loopback-only by default (C{--admin tcp:10254:interface=127.0.0.1}): the
route dump shows every host and endpoint, which is not for the internet.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from twisted.internet.defer import Deferred
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from ingress.observe.exposition import exposition
from ingress.observe.merge import merge
from ingress.observe.metrics import Metrics
from ingress.process.live import LiveTable

ReadinessCheck = Callable[[], tuple[bool, dict[str, object]]]

ENDPOINTS = (
    ("/healthz", "200 while the process runs (liveness)"),
    ("/readyz", "200 once the first routing table is live and the sources have synced, 503 while draining (readiness); JSON detail"),
    ("/metrics", "Prometheus metrics (twingress_* and process_*; with --workers, summed over the workers)"),
    ("/debug/routes", "the live routing table, listeners and problems, as JSON"),
)


class _Leaf(Resource):
    isLeaf = True

    def __init__(self, render: Callable[[Request], bytes | int]) -> None:
        super().__init__()
        self._render = render

    def render_GET(self, request: Request) -> bytes | int:
        return self._render(request)


class Admin:
    """
    Builds the admin Site.  Readiness is the conjunction of every registered
    check (the first table is live, the sources have synced, not draining),
    each contributing detail to the /readyz body.
    """

    def __init__(self, live: LiveTable, metrics: Metrics) -> None:
        self.live = live
        self.metrics = metrics
        self.checks: list[ReadinessCheck] = [self._table_check]
        self.route_sections: dict[str, Callable[[], object]] = {}  # extra /debug/routes keys, e.g. listener state
        # Corrections of the table's own view by the parts that act on it: the table says what
        # was asked, these say what happened (a port that did not bind, a certificate refused).
        self.route_views: list[Callable[[dict[str, Any]], None]] = []
        # With worker processes: every worker's metric families, to add to ours on each scrape.
        self.worker_metrics: Optional[Callable[[], Deferred[list[list[Metric]]]]] = None

    def _table_check(self) -> tuple[bool, dict[str, object]]:
        return self.live.ready, {"table": "live" if self.live.ready else "not built yet", "generation": self.live.table.generation}

    def add_check(self, check: ReadinessCheck) -> None:
        self.checks.append(check)

    def readiness(self) -> tuple[bool, dict[str, object]]:
        ready = True
        detail: dict[str, object] = {}
        for check in self.checks:
            ok, info = check()
            ready = ready and ok
            detail.update(info)
        return ready, detail

    def _index(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        lines = [f"{path:<15} {what}" for path, what in ENDPOINTS]
        return ("twingress admin\n\n" + "\n".join(lines) + "\n").encode()

    def _healthz(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"text/plain")
        return b"ok\n"

    def _readyz(self, request: Request) -> bytes:
        ready, detail = self.readiness()
        request.setResponseCode(200 if ready else 503)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps({"ready": ready, **detail}).encode() + b"\n"

    def _metrics(self, request: Request) -> bytes | int:
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        if self.worker_metrics is None:
            return exposition(self.metrics.registry.collect())

        def write(sources: list[list[Metric]]) -> None:
            request.write(exposition(merge([self.metrics.registry.collect(), *sources])))
            request.finish()

        self.worker_metrics().addCallback(write)
        return NOT_DONE_YET

    def _routes(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        dump = self.live.table.to_json()
        for key, section in self.route_sections.items():
            dump[key] = section()
        for view in self.route_views:
            view(dump)
        return json.dumps(dump, indent=2).encode() + b"\n"

    def site(self) -> Site:
        root = Resource()
        root.putChild(b"", _Leaf(self._index))
        root.putChild(b"healthz", _Leaf(self._healthz))
        root.putChild(b"readyz", _Leaf(self._readyz))
        root.putChild(b"metrics", _Leaf(self._metrics))
        debug = Resource()
        debug.putChild(b"routes", _Leaf(self._routes))
        root.putChild(b"debug", debug)
        return _AdminSite(root, requestFactory=_AdminRequest)


    def metrics_site(self) -> Site:
        """
        C{--metrics}: a listener for a scraper, C{/metrics} alone (the admin's exposition, workers'
        families summed) and 404 for every other path, so that a port reachable from the node's
        network tells it no host, backend or certificate name (/debug/routes stays on --admin).
        """
        root = Resource()
        root.putChild(b"metrics", _Leaf(self._metrics_only))
        return _AdminSite(root, requestFactory=_AdminRequest)

    def _metrics_only(self, request: Request) -> bytes | int:
        if request.path != b"/metrics":  # /metrics/anything: a leaf would answer it
            request.setResponseCode(404)
            return b"not found: this listener serves /metrics only\n"
        return self._metrics(request)


class _AdminRequest(Request):
    """An admin answer without C{Server: TwistedWeb/<version>}: the port need not advertise what runs it."""

    def write(self, data: bytes) -> None:
        if not self.startedWriting:  # the head goes out with the first write (finish() writes b"" when nothing was)
            self.responseHeaders.removeHeader(b"server")
        super().write(data)


class _AdminSite(Site):
    """The admin site: probes and scrapes every few seconds are not worth a log line each."""

    noisy = False

    def log(self, request: object) -> None:
        pass
