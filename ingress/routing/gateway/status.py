# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
The status of the Gateway API objects of ours, as a build judged them: what the Lease holder
writes to GatewayClasses, Gateways and HTTPRoutes, and what /debug/routes shows.  Plain values,
carried on the routing table like the StreamIngress conditions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ingress.model import Condition, ObjectRef
from ingress.model.gateway import ParentRef


@dataclass(frozen=True, slots=True)
class ListenerStatus:
    name: str
    supported_kinds: tuple[str, ...]
    attached_routes: int
    conditions: tuple[Condition, ...]
    port: tuple[str, int] = ("", 0)  # (transport, port) when the listener has a port of its own to bind; else ("", 0)


@dataclass(frozen=True, slots=True)
class GatewayStatus:
    """What the Lease holder writes to a Gateway (and /debug/routes shows)."""

    conditions: tuple[Condition, ...]
    listeners: tuple[ListenerStatus, ...]
    addresses: tuple[str, ...] = ()  # its own address (--gateway-addresses); empty: the published ones


@dataclass(frozen=True, slots=True)
class GatewayAPIStatus:
    """The status of every Gateway API object of ours, as the build judged them."""

    classes: Mapping[str, tuple[Condition, ...]] = field(default_factory=dict)
    gateways: Mapping[ObjectRef, GatewayStatus] = field(default_factory=dict)
    routes: Mapping[ObjectRef, tuple[tuple[ParentRef, tuple[Condition, ...]], ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """For /debug/routes."""

        def conditions(found: tuple[Condition, ...]) -> list[dict[str, str]]:
            return [{"type": c.type, "status": c.status, "reason": c.reason, **({"message": c.message} if c.message else {})} for c in found]

        return {
            "gatewayClasses": {name: conditions(found) for name, found in sorted(self.classes.items())},
            "gateways": {
                f"{ref.namespace}/{ref.name}": {
                    "conditions": conditions(status.conditions),
                    "listeners": [
                        {"name": s.name, "supportedKinds": list(s.supported_kinds), "attachedRoutes": s.attached_routes, "conditions": conditions(s.conditions)}
                        for s in status.listeners
                    ],
                }
                for ref, status in sorted(self.gateways.items())
            },
            "httpRoutes": {
                f"{ref.namespace}/{ref.name}": [
                    {"parentRef": f"{parent.namespace}/{parent.name}" + (f"/{parent.section_name}" if parent.section_name else ""), "conditions": conditions(found)}
                    for parent, found in parents
                ]
                for ref, parents in sorted(self.routes.items())
            },
        }


def with_listen_failures(status: GatewayAPIStatus, failures: Mapping[tuple[str, int], str]) -> GatewayAPIStatus:
    """
    C{status} with the listeners whose port could not be bound (in this process or a worker) not
    Accepted (PortUnavailable, the spec's reason for a port in use) nor Programmed: the build
    judged the objects, only binding tells whether the port is free.
    """
    if not failures:
        return status
    gateways = dict(status.gateways)
    for ref, gateway in status.gateways.items():
        if any(listener.port in failures for listener in gateway.listeners):
            gateways[ref] = replace(gateway, listeners=tuple(_unbound(listener, failures) for listener in gateway.listeners))
    return replace(status, gateways=gateways)


def _unbound(listener: ListenerStatus, failures: Mapping[tuple[str, int], str]) -> ListenerStatus:
    detail = failures.get(listener.port)
    if detail is None:
        return listener
    message = f"port {listener.port[1]} could not be opened: {detail}"
    replaced = {"Accepted": ("PortUnavailable", message), "Programmed": ("Invalid", message)}
    conditions = tuple(
        Condition(c.type, "False", *replaced[c.type], c.observed_generation) if c.type in replaced else c for c in listener.conditions
    )
    return replace(listener, conditions=conditions)


def with_addresses(status: GatewayAPIStatus, addresses: Mapping[ObjectRef, str]) -> GatewayAPIStatus:
    """C{status} with each Gateway's own address, where it has one."""
    if not addresses:
        return status
    gateways = {ref: replace(gateway, addresses=(addresses[ref],)) if ref in addresses else gateway for ref, gateway in status.gateways.items()}
    return replace(status, gateways=gateways)
