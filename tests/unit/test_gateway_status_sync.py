"""
Tests for L{ingress.controllers.gatewaystatus.GatewayStatusSync}: what the Lease holder writes to a
route's C{status.parents}, from real routing builds, with the writes recorded instead of sent.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ingress.controllers.gatewaystatus import GatewayStatusSync
from ingress.controllers.status import PublishedAddresses
from ingress.model import ObjectRef
from ingress.model.parse import parse_object, state_from_objects
from ingress.routing import Built, build
from ingress.routing.build_options import BuildOptions
from ingress.sources.kube.reflector import Store
from tests.unit.test_gateway_routing import PORTS, backend, gateway, gateway_class, http_route, services, to

CONTROLLER = "twingress.io/gateway-controller"
REF = ObjectRef("HTTPRoute", "default", "r")


class Writes:
    """Stands in for the LeaderWriter: keeps each request's (path, body)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def request(self, method: str, path: str, kind: str, verb: str, body: dict[str, Any], content_type: Optional[str] = None) -> None:
        self.sent.append((path, body))


def entry(gateway_name: str, controller: str = CONTROLLER) -> dict[str, Any]:
    return {
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "default", "name": gateway_name},
        "controllerName": controller,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }


def route_showing(parents: list[dict[str, Any]], *parent_refs: dict[str, Any], generation: int = 2) -> dict[str, Any]:
    """Route r naming C{parent_refs}, whose status shows C{parents} (as an earlier write left it)."""
    found = http_route("r", to(backend("svc")), parents=parent_refs, generation=generation)
    found["metadata"]["resourceVersion"] = "7"
    found["status"] = {"parents": parents}
    return found


def table(*objects: dict[str, Any]) -> Built:
    return build(state_from_objects([gateway_class(), gateway("gw"), *services("svc"), *objects]), BuildOptions(reserved_ports=PORTS))


def sync_for(route: dict[str, Any]) -> tuple[GatewayStatusSync, Writes]:
    store = Store()
    store.put(("default", "r"), parse_object(route))
    writes = Writes()
    return GatewayStatusSync(writes, {"HTTPRoute": store}, CONTROLLER, PublishedAddresses(("192.0.2.1",))), writes  # type: ignore[arg-type]


def test_a_route_that_leaves_our_gateways_loses_our_entries() -> None:
    """Its parentRefs now name a Gateway that is not ours: our entry goes, another controller's stays."""
    theirs = entry("theirs", "example.com/other")
    route = route_showing([entry("gw"), theirs], {"name": "theirs"})
    sync, writes = sync_for(route)
    sync.table_changed(table(http_route("r", to(backend("svc")), parents=({"name": "gw"},))).report)
    assert REF in sync.table_changed(table(route).report)  # the table that stops judging it queues it
    sync(REF)
    ((path, body),) = writes.sent
    assert path.endswith("/namespaces/default/httproutes/r/status")
    assert body == {"metadata": {"resourceVersion": "7"}, "status": {"parents": [json.loads(json.dumps(theirs))]}}


def test_a_resync_finds_entries_a_previous_leader_left() -> None:
    """A route with an entry of ours that no table judges: listed by keys(), and its entry removed."""
    sync, writes = sync_for(route_showing([entry("gw")], {"name": "elsewhere"}))
    assert REF not in sync.keys()  # no table yet: the status says nothing about it
    sync.table_changed(table(route_showing([entry("gw")], {"name": "elsewhere"})).report)
    assert REF in sync.keys()
    sync(REF)
    assert [body["status"] for _, body in writes.sent] == [{"parents": []}]


def test_nothing_is_written_before_the_first_table() -> None:
    """A route event before any table (the leader's first moments): no entry is removed on a status not built yet."""
    sync, writes = sync_for(route_showing([entry("gw")], {"name": "gw"}))
    sync(REF)
    assert writes.sent == []


def test_a_route_of_another_controller_is_left_alone() -> None:
    """A route judged by no Gateway of ours and showing no entry of ours: nothing to write."""
    sync, writes = sync_for(route_showing([entry("theirs", "example.com/other")], {"name": "theirs"}))
    sync.table_changed(table().report)
    assert REF not in sync.keys()
    sync(REF)
    assert writes.sent == []
