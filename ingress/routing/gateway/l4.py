# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
TLSRoute, TCPRoute and UDPRoute: the Gateway API's routes of bytes, compiled into what twingress
already serves for Ingresses and StreamIngresses.

A TLSRoute on a TLS listener (tls.mode Passthrough) passes the TLS of its hostnames through by
SNI, as C{ssl-passthrough} does: entries of C{RoutingTable.passthrough}; on a TLS listener that
terminates (tls.mode Terminate) the TLS of its hostnames is terminated with the listener's
certificate and the bytes inside go to the backend as a TCP stream (C{RoutingTable.tls_terminated}).
A TCPRoute or UDPRoute on a TCP or UDP listener is a stream listener on the listener's port, as
a StreamIngress is: entries of C{RoutingTable.streams}.  The oldest route wins a host or a port;
an Ingress's passthrough host and a StreamIngress's port stay theirs (reported on the route).
A route's backendRefs share its connections (UDP: sessions) by weight (L{weighted_upstream}),
only its first rule is used, and a route without a usable backend serves nothing: a connection
its TLS names reaches no backend (it is answered as any unknown name is), a stream port is not
opened (the connection is refused), as the spec asks ("reject the connection").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional, TypeVar

from ingress.model import IngressBackend, ObjectRef, Problem, ServiceBackendPort
from ingress.model.gateway import L4Route
from ingress.routing.gateway.listeners import ServedListener
from ingress.routing.gateway.rules import RuleContext, usable_backend
from ingress.routing.streams import DEFAULT_STREAM_IDLE_TIMEOUT, StreamRoute
from ingress.routing.upstream import Upstream

TAKEN = "Conflict"
WEIGHT_SLOTS = 100
"""Endpoints in a weighted upstream's list: weights are honoured to a hundredth."""
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass
class L4Entries:
    """What the Gateway API's L4 routes add to a table: hosts passed through, stream listeners, problems."""

    passthrough: dict[str, Upstream] = field(default_factory=dict)
    passed_by: dict[str, ObjectRef] = field(default_factory=dict)  # the TLSRoute of each passed-through host
    terminated: dict[str, Upstream] = field(default_factory=dict)  # hosts whose TLS is terminated, to a TCP backend
    terminated_by: dict[str, ObjectRef] = field(default_factory=dict)
    streams: dict[tuple[str, int], StreamRoute] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def add_l4_route(route: L4Route, attached: Iterable[tuple[ServedListener, tuple[str, ...]]], context: RuleContext, found: L4Entries) -> None:
    """The passthrough hosts and stream listeners of one route where it attached (routes come oldest first)."""
    upstream = _upstream(route, context)
    if upstream is None:
        return
    for served, hosts in attached:
        if served.listener.protocol == "TLS" and served.listener.tls_mode == "Terminate":
            for host in hosts:
                _claim(found.terminated, host, upstream, route, f'TLS host "{host}"', found.problems)
                found.terminated_by.setdefault(host, route.ref)
        elif served.listener.protocol == "TLS":
            for host in hosts:
                _claim(found.passthrough, host, upstream, route, f'TLS host "{host}"', found.problems)
                found.passed_by.setdefault(host, route.ref)
        else:
            protocol, port = served.listener.protocol, served.listener.port
            stream = StreamRoute(protocol, port, f"{route.meta.namespace}/{route.meta.name}", route.ref, upstream, idle_timeout=DEFAULT_STREAM_IDLE_TIMEOUT)
            _claim(found.streams, (protocol, port), stream, route, f"{protocol} port {port}", found.problems)


def _claim(into: dict[_K, _V], key: _K, value: _V, route: L4Route, what: str, problems: list[Problem]) -> None:
    """The first (oldest) route takes a host or port; a later one is reported."""
    if key in into:
        problems.append(Problem(route.ref, TAKEN, f"{what} is already served by an older route: this one is not served there"))
    else:
        into[key] = value


def _upstream(route: L4Route, context: RuleContext) -> Optional[Upstream]:
    """
    The route's backends: one backendRef's Service, or several by weight (L{weighted}); None when
    none is usable.  A backendRef that cannot be used gets no share (ResolvedRefs says why).
    """
    weighted = [ref for ref in route.backend_refs if ref.weight > 0]
    if not weighted:
        context.problems.append(Problem(route.ref, "NoBackend", "no backendRef with a weight: the route serves nothing"))
        return None
    if route.extra_rules:
        context.problems.append(Problem(route.ref, "UnsupportedValue", "only the first rule is used"))
    protocol = "UDP" if route.kind == "UDPRoute" else "TCP"
    shares: list[tuple[Upstream, int]] = []
    for ref in weighted:
        if not usable_backend(route, ref, context):
            continue
        assert ref.port is not None
        upstream, issue = context.backends.upstream(ref.namespace, IngressBackend(ref.name, ServiceBackendPort(number=ref.port)), protocol)
        if issue is not None:
            context.problems.append(Problem(route.ref, *issue))
        if upstream is not None:
            shares.append((upstream, ref.weight))
    if not shares:
        return None
    if len(shares) == 1:
        return shares[0][0]
    return weighted_upstream(f"{route.meta.namespace}/{route.meta.name}:weighted", shares, route, context.problems)


def weighted_upstream(key: str, shares: list[tuple[Upstream, int]], route: L4Route, problems: list[Problem]) -> Upstream:
    """
    Several Services as one upstream whose endpoints, taken in turn (the stream balancer's round
    robin), give each Service its weight's share of the connections or sessions: a list of
    L{WEIGHT_SLOTS} endpoints where each Service has slots in proportion to its weight, spread
    evenly (smooth weighted round robin), each Service's slots going to its endpoints in turn.
    An ExternalName Service cannot share a list of pod addresses: it is reported and gets none.
    """
    usable = []
    for upstream, weight in shares:
        if upstream.external_name:
            problems.append(Problem(route.ref, "UnsupportedValue", f"ExternalName backend {upstream.key} cannot be weighted against others: it gets no share"))
        elif upstream.endpoints:
            usable.append((upstream.endpoints, weight))
    if not usable:
        return Upstream(key, ())
    total = sum(weight for _, weight in usable)
    current = [0] * len(usable)
    turns = [0] * len(usable)
    slots = []
    for _ in range(WEIGHT_SLOTS):
        for index, (_, weight) in enumerate(usable):
            current[index] += weight
        best = max(range(len(usable)), key=lambda i: current[i])
        current[best] -= total
        endpoints = usable[best][0]
        slots.append(endpoints[turns[best] % len(endpoints)])
        turns[best] += 1
    return Upstream(key, tuple(slots))
