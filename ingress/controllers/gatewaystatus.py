# -*- test-case-name: tests.kube.test_gateway_api -*-
"""
Gateway API status: what the routing build decided about our GatewayClasses, Gateways and
HTTPRoutes (L{ingress.routing.gateway.status}), written by the Lease holder.

One key per object (its L{ObjectRef}).  A write happens only when what we own differs
from what the object shows, and only once the table has seen the object's current
generation (every condition's observedGeneration is the generation it judged).  What is
not ours stays as it is: condition types we do not set (GatewayPreserveForeignConditions),
and an HTTPRoute's C{status.parents} entries of other controllers (HTTPRoutePreserveForeignStatus);
an HTTPRoute's patch carries its resourceVersion, so that a concurrent writer's entries are
never overwritten (a conflict is retried with the newer object).  C{lastTransitionTime}
moves only when a condition's status changes.

A route that no longer names any Gateway of ours (its parentRefs changed, our Gateway or class went
away) loses our C{status.parents} entries: the spec reads an empty list as "attached to no Gateway",
so an entry left behind would claim an attachment that is gone.  The table that stops judging such
a route queues it, and a resync (on becoming leader too) finds those a previous leader left.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ingress.controllers.leader import micro_time
from ingress.controllers.status import PublishedAddresses
from ingress.controllers.writer import LeaderWriter
from ingress.model import Condition, ObjectRef
from ingress.model.gateway import GATEWAY_GROUP, Gateway, GatewayClass, GRPCRoute, HTTPRoute, L4Route, ParentRef
from ingress.routing.gateway.status import GatewayAPIStatus, GatewayStatus, with_listen_failures
from ingress.routing.report import BuildReport
from ingress.sources.kube.client import MERGE_PATCH
from ingress.sources.kube.reflector import Store

API = f"/apis/{GATEWAY_GROUP}/v1"


def conditions_json(current: Iterable[Condition], desired: Iterable[Condition], now: str) -> list[dict[str, Any]]:
    """Our conditions (their transition time kept while their status holds), and every other type as it was."""
    previous = {c.type: c for c in current}
    ours = []
    for found in desired:
        before = previous.pop(found.type, None)
        since = before.last_transition_time if before is not None and before.status == found.status and before.last_transition_time else now
        ours.append(_condition_json(found, since))
    return ours + [_condition_json(c, c.last_transition_time or now) for c in previous.values()]


def _condition_json(c: Condition, since: str) -> dict[str, Any]:
    return {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message, "observedGeneration": c.observed_generation, "lastTransitionTime": since}


def _same(current: Iterable[Condition], desired: Iterable[Condition]) -> bool:
    """Whether the object already shows every condition we would write (types we do not own do not matter)."""
    have = {(c.type, c.status, c.reason, c.message, c.observed_generation) for c in current}
    return all((c.type, c.status, c.reason, c.message, c.observed_generation) in have for c in desired)


def parent_json(parent: ParentRef) -> dict[str, Any]:
    """A parentRef as status echoes it: group and kind always, namespace too (conformance compares them)."""
    found: dict[str, Any] = {"group": parent.group, "kind": parent.kind, "namespace": parent.namespace, "name": parent.name}
    if parent.section_name:
        found["sectionName"] = parent.section_name
    if parent.port is not None:
        found["port"] = parent.port
    return found


class GatewayStatusSync:
    """The sync function of the Gateway API status controller, one object at a time."""

    def __init__(self, writer: LeaderWriter, stores: Mapping[str, Store], controller_name: str, addresses: PublishedAddresses) -> None:
        """C{stores}: the informer store of each kind (GatewayClass, Gateway, and each route kind)."""
        self.writer = writer
        self.stores = stores
        self.controller_name = controller_name
        self.addresses = addresses
        self._status = GatewayAPIStatus()
        self._judged = False  # no table yet: a route missing from the status says nothing until one comes
        self._lock = threading.Lock()

    def table_changed(self, report: BuildReport, listen_failures: Mapping[tuple[str, int], str] = {}) -> list[ObjectRef]:
        """
        Keep the new build's status (its report's), with the ports that could not be bound (reactor thread); returns the
        objects whose status changed.
        """
        status = with_listen_failures(report.gateway_status or GatewayAPIStatus(), listen_failures)
        with self._lock:
            old, self._status, self._judged = self._status, status, True
        changed = [ObjectRef("GatewayClass", "", name) for name in set(old.classes) | set(status.classes) if old.classes.get(name) != status.classes.get(name)]
        changed += [ref for ref in set(old.gateways) | set(status.gateways) if old.gateways.get(ref) != status.gateways.get(ref)]
        changed += [ref for ref in set(old.routes) | set(status.routes) if old.routes.get(ref) != status.routes.get(ref)]
        return changed

    def keys(self) -> list[ObjectRef]:
        """Every object the current table judged, and every route still showing entries of ours that it did not (a resync)."""
        with self._lock:
            status, judged = self._status, self._judged
        stale = [
            route.ref
            for store in self.stores.values()
            for route in (store.values() if judged else ())
            if isinstance(route, _ROUTES) and route.ref not in status.routes and self._shows_ours(route)
        ]
        return [ObjectRef("GatewayClass", "", name) for name in status.classes] + list(status.gateways) + list(status.routes) + stale

    def __call__(self, ref: ObjectRef) -> None:
        with self._lock:
            status, judged = self._status, self._judged
        store = self.stores.get(ref.kind)
        found = store.get((ref.namespace, ref.name)) if store is not None else None
        if isinstance(found, GatewayClass) and ref.name in status.classes:
            self._class(found, status.classes[ref.name])
        elif isinstance(found, Gateway) and ref in status.gateways:
            self._gateway(found, status.gateways[ref])
        elif isinstance(found, _ROUTES) and (ref in status.routes or judged):
            self._route(found, status.routes.get(ref, ()))  # absent: judged by no Gateway of ours, our entries go

    def _class(self, found: GatewayClass, desired: tuple[Condition, ...]) -> None:
        if not desired or desired[0].observed_generation < found.meta.generation or _same(found.status_conditions, desired):
            return
        body = {"status": {"conditions": conditions_json(found.status_conditions, desired, _now())}}
        self.writer.request("PATCH", f"{API}/gatewayclasses/{found.meta.name}/status", "GatewayClass", "patch-status", body, MERGE_PATCH)

    def _gateway(self, found: Gateway, desired: GatewayStatus) -> None:
        if desired.conditions[0].observed_generation < found.meta.generation:
            return  # the table has not judged this version yet: its own table will come
        addresses = [{"type": _address_type(a), "value": a} for a in desired.addresses or self.addresses.current()]  # its own, else the published
        seen = {listener.name: listener.conditions for listener in found.status_listeners}
        now = _now()
        listeners = [
            {
                "name": listener.name,
                "supportedKinds": [{"group": GATEWAY_GROUP, "kind": kind} for kind in listener.supported_kinds],
                "attachedRoutes": listener.attached_routes,
                "conditions": conditions_json(seen.get(listener.name, ()), listener.conditions, now),
            }
            for listener in desired.listeners
        ]
        if _gateway_shows(found, desired, tuple(a["value"] for a in addresses)):
            return
        body = {"status": {"conditions": conditions_json(found.status_conditions, desired.conditions, now), "listeners": listeners, "addresses": addresses}}
        path = f"{API}/namespaces/{found.meta.namespace}/gateways/{found.meta.name}/status"
        self.writer.request("PATCH", path, "Gateway", "patch-status", body, MERGE_PATCH)

    def _route(self, found: HTTPRoute | GRPCRoute | L4Route, desired: tuple[tuple[ParentRef, tuple[Condition, ...]], ...]) -> None:
        if any(c.observed_generation < found.meta.generation for _, conditions in desired for c in conditions):
            return
        ours = {parent: conditions for parent, controller, conditions in found.status_parents if controller == self.controller_name}
        if len(ours) == len(desired) and all(parent in ours and _same(ours[parent], conditions) for parent, conditions in desired):
            return
        now = _now()
        parents = [
            {"parentRef": parent_json(parent), "controllerName": self.controller_name, "conditions": conditions_json(ours.get(parent, ()), conditions, now)}
            for parent, conditions in desired
        ]
        foreign = [entry for entry in map(json.loads, found.status_parents_raw) if entry.get("controllerName") != self.controller_name]
        body = {"metadata": {"resourceVersion": found.meta.resource_version}, "status": {"parents": foreign + parents}}
        kind = found.ref.kind
        path = f"{API}/namespaces/{found.meta.namespace}/{kind.lower()}s/{found.meta.name}/status"
        self.writer.request("PATCH", path, kind, "patch-status", body, MERGE_PATCH)

    def _shows_ours(self, route: HTTPRoute | GRPCRoute | L4Route) -> bool:
        """Whether the route's status holds a parents entry of our controller."""
        return any(controller == self.controller_name for _, controller, _ in route.status_parents)


_ROUTES = (HTTPRoute, GRPCRoute, L4Route)


def _gateway_shows(found: Gateway, desired: GatewayStatus, addresses: tuple[str, ...]) -> bool:
    """Whether the Gateway already shows our conditions, listeners and addresses."""
    if not _same(found.status_conditions, desired.conditions) or found.status_addresses != addresses:
        return False
    seen = {listener.name: listener for listener in found.status_listeners}
    if set(seen) != {listener.name for listener in desired.listeners}:
        return False
    for listener in desired.listeners:
        shown = seen[listener.name]
        if (shown.attached_routes, shown.supported_kinds) != (listener.attached_routes, listener.supported_kinds) or not _same(shown.conditions, listener.conditions):
            return False
    return True


def _address_type(address: str) -> str:
    return "IPAddress" if address.replace(".", "").isdigit() or ":" in address else "Hostname"


def _now() -> str:
    return micro_time()[:19] + "Z"


__all__ = ["GatewayStatusSync"]
