"""
The build's report travels beside the table, not inside it: the table a worker receives carries no
problem, skipped Ingress, Gateway API status or StreamIngress condition (L{ingress.routing.report}).
"""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.web.test.requesthelper import DummyRequest

from ingress.model import Problem
from ingress.model.parse import state_from_objects
from ingress.observe.admin import Admin
from ingress.observe.metrics import Metrics
from ingress.process.pool import WorkerPool
from ingress.routing import BuildOptions, BuildReport, Built, RoutingTable, build
from ingress.routing.gateway.status import GatewayAPIStatus
from ingress.routing.streams import StreamCondition
from ingress.runtime.live import LiveTable
from tests.unit.objects import ingress, ingress_class, path, rule
from tests.unit.test_gateway_routing import PORTS, backend, gateway, gateway_class, http_route, services, to
from tests.unit.test_streams import service as stream_service
from tests.unit.test_streams import stream

REPORT_FIELDS = {"problems", "class_skipped", "gateway_status", "stream_conditions"}
REPORT_TYPES = (Problem, BuildReport, GatewayAPIStatus, StreamCondition)


def _reporting_build() -> Built:
    """A build whose report has something in each field: a missing Service, an Ingress of another class, a Gateway, a StreamIngress."""
    objects = [
        ingress_class("twingress"),
        ingress("lost", rule("lost.test", path("/", "missing"))),
        ingress("theirs", rule("theirs.test", path("/", "web")), cls="nginx"),
        gateway_class(), gateway("gw"), http_route("r", to(backend("v1"))), *services("v1"),
        stream("pg", 5432, "db"), stream_service("db"),
    ]
    built = build(state_from_objects(objects), BuildOptions(reserved_ports=PORTS))
    report = built.report
    assert report.problems and report.class_skipped and report.gateway_status is not None and report.stream_conditions
    return built


class _Classes(pickle.Unpickler):
    """An unpickler that notes every class the message names."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.named: set[Any] = set()

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name)
        self.named.add(found)
        return found


def test_the_table_has_no_report_field() -> None:
    """RoutingTable holds only what requests are routed by; BuildReport holds the four reports."""
    assert not REPORT_FIELDS & {f.name for f in dataclasses.fields(RoutingTable)}
    assert REPORT_FIELDS == {f.name for f in dataclasses.fields(BuildReport)}


def test_the_message_a_worker_receives_carries_no_report() -> None:
    """The pool's message for a new table (what its channel writes) names none of the report's classes."""
    built = _reporting_build()
    pool = WorkerPool(MemoryReactorClock(), 2, None, {}, Metrics(), lambda *_: None)  # type: ignore[arg-type]
    data = pool._message(built.table)
    unpickler = _Classes(data)
    kind, table = unpickler.load()
    assert kind == "table" and table == built.table
    assert not unpickler.named & set(REPORT_TYPES), unpickler.named & set(REPORT_TYPES)
    assert RoutingTable in unpickler.named  # the check sees the classes a message names


def test_the_report_stays_in_the_primarys_live_table_and_reaches_its_report_listeners() -> None:
    """The controllers hear the table with its report, after the table's listeners; a worker's live table has none."""
    built = _reporting_build()
    heard: list[Any] = []
    live = LiveTable()
    live.subscribe_report(lambda found: heard.append(("report", found)))
    live.subscribe(lambda table: heard.append(("table", table)))
    live.swap(built.table, built.report)
    assert heard == [("table", built.table), ("report", built)]
    assert live.report is built.report
    worker = LiveTable()
    worker.swap(pickle.loads(pickle.dumps(built.table)))  # what a worker does with the table it receives
    assert worker.report == BuildReport()


def test_debug_routes_shows_the_report_beside_the_table() -> None:
    """/debug/routes: the table's sections and the report's (problems, skipped Ingresses, Gateway API, stream conditions)."""
    built = _reporting_build()
    live = LiveTable()
    live.swap(built.table, built.report)
    request = DummyRequest([b"debug", b"routes"])
    shown = json.loads(Admin(live, Metrics())._routes(request))
    assert {"lost.test", "theirs.test"} & set(shown["hosts"]) == {"lost.test"}
    assert any(p["reason"] == "ServiceNotFound" and "lost" in p["object"] for p in shown["problems"])
    assert shown["skippedIngresses"]["count"] == 1 and "gatewayAPI" in shown
    assert "default/pg" in shown["streamConditions"] and "TCP/5432" in shown["streams"]
