# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
Which Gateways are ours, which of their listeners twingress serves, and which routes attach to them.

A Gateway is ours when its GatewayClass names twingress's controller.  Every
Gateway of ours shares twingress's own listeners: an HTTP listener on the
C{--http} port is served by the HTTP listener, an HTTPS listener (Terminate) on
the C{--https} port by the TLS listener with its certificate chosen by SNI.  An
HTTP or HTTPS listener on another port gets a listener of its own on that port
(C{own_port}), opened on C{--gateway-interface} as stream ports are; a TLS
(passthrough) listener is served on the C{--https} port only.  A listener of
another protocol, or on a port twingress holds for something else, is reported
(Accepted=False) and not served.

All our Gateways share one address, so their listeners share its ports: on a
port that listeners of different kinds want (HTTP, TLS-based, TCP; UDP is a port
space of its own) the first one (oldest Gateway, then listener order) keeps it
and the others are C{Conflicted} (ProtocolConflict), as the spec asks of
listeners that are not distinct.

An HTTPRoute attaches, through each of its parentRefs, to the listeners the
reference selects (sectionName, port) whose C{allowedRoutes} admit its namespace
and kind and whose hostname intersects the route's (Gateway API "Hostnames" and
"AllowedRoutes").  Each refusal has the spec's reason, for the route's status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Optional, Union

from ingress.model import ClusterState, Condition, ObjectRef, TLSSecret
from ingress.model.gateway import (
    FROM_ALL,
    FROM_SAME,
    FROM_SELECTOR,
    GATEWAY_GROUP,
    Gateway,
    HTTPRoute,
    L4Route,
    Listener,
    ParentRef,
    RouteKind,
)

HTTP_ROUTE_KIND = RouteKind(GATEWAY_GROUP, "HTTPRoute")
GRPC_ROUTE_KIND = RouteKind(GATEWAY_GROUP, "GRPCRoute")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
SCHEMES = {"HTTP": b"http", "HTTPS": b"https", "TLS": b"tls", "TCP": b"tcp", "UDP": b"udp"}
L4_KINDS = {"TLS": RouteKind(GATEWAY_GROUP, "TLSRoute"), "TCP": RouteKind(GATEWAY_GROUP, "TCPRoute"), "UDP": RouteKind(GATEWAY_GROUP, "UDPRoute")}
AnyRoute = Union[HTTPRoute, L4Route]
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
PEM_BEGIN, PEM_PRIVATE_KEY = b"-----BEGIN ", b"PRIVATE KEY-----"


def condition(kind: str, ok: bool, reason: str, message: str = "", generation: int = 0) -> Condition:
    """A status condition (True when C{ok}) at the object's C{generation}."""
    return Condition(kind, "True" if ok else "False", reason, message, generation)


@dataclass(frozen=True, slots=True)
class ServedListener:
    """A listener of one of our Gateways and what became of it; C{secret}: its certificate, resolved."""

    gateway: Gateway
    listener: Listener
    scheme: bytes  # b"http" or b"https"; b"" when it is not served
    supported_kinds: tuple[RouteKind, ...]
    conditions: tuple[Condition, ...]
    secret: Optional[tuple[str, str]] = None
    own_port: bool = False  # served on a listener of its own on its port, not on --http/--https

    @property
    def served(self) -> bool:
        return bool(self.scheme)


@dataclass
class Attachments:
    """Where each route attached (listener, hosts) and what its parentRefs' status says."""

    hosts: dict[ObjectRef, list[tuple[ServedListener, tuple[str, ...]]]] = field(default_factory=dict)
    parents: dict[ObjectRef, list[tuple[ParentRef, Condition]]] = field(default_factory=dict)
    attached: dict[tuple[ObjectRef, str], int] = field(default_factory=dict)  # (Gateway, listener) → routes


def our_gateways(state: ClusterState, controller_name: str) -> list[Gateway]:
    """The Gateways of a GatewayClass that names C{controller_name}, oldest first."""
    classes = {c.meta.name for c in state.gateway_classes if c.controller_name == controller_name}
    return sorted((g for g in state.gateways if g.gateway_class_name in classes), key=lambda g: g.meta.age_key())


def serve_listeners(state: ClusterState, gateways: Iterable[Gateway], ports: Mapping[int, str], cleartext_http2: bool = False) -> list[ServedListener]:
    """
    Every listener of C{gateways}, judged: served (on which of our listeners) or why not.  GRPCRoutes
    attach to HTTPS listeners, and to HTTP ones when HTTP/2 with prior knowledge is served there
    (C{--h2c true}): GRPCRoute asks for h2c on an HTTP listener.
    """
    judged = [_judge(state, gateway, listener, ports, cleartext_http2) for gateway in gateways for listener in gateway.listeners]
    return _without_conflicts(judged)


def _port_kind(served: ServedListener) -> tuple[str, str]:
    """(transport, what answers there): listeners of one transport and port must agree on the second."""
    protocol = served.listener.protocol
    if protocol == "UDP":
        return "UDP", "UDP"
    return "TCP", {"HTTPS": "TLS"}.get(protocol, protocol)


def _without_conflicts(judged: list[ServedListener]) -> list[ServedListener]:
    """Every listener with its Conflicted condition: on a port, the first served listener's kind holds it."""
    holders: dict[tuple[str, int], tuple[str, ServedListener]] = {}
    settled = []
    for served in judged:
        generation = served.gateway.meta.generation
        transport, kind = _port_kind(served)
        holder = holders.setdefault((transport, served.listener.port), (kind, served)) if served.served else None
        if holder is None or holder[0] == kind:
            settled.append(replace(served, conditions=(*served.conditions, condition("Conflicted", False, "NoConflicts", "", generation))))
            continue
        other = holder[1]
        message = (
            f"port {served.listener.port} is held by listener {other.listener.name} ({other.listener.protocol}) "
            f"of Gateway {other.gateway.meta.namespace}/{other.gateway.meta.name}"
        )
        refs = [c for c in served.conditions if c.type == "ResolvedRefs"]
        settled.append(replace(served, scheme=b"", secret=None, conditions=(
            condition("Accepted", False, "PortUnavailable", message, generation),
            condition("Programmed", False, "Invalid", message, generation),
            *refs,
            condition("Conflicted", True, "ProtocolConflict", message, generation),
        )))
    return settled


def _judge(state: ClusterState, gateway: Gateway, listener: Listener, ports: Mapping[int, str], cleartext_http2: bool) -> ServedListener:
    generation = gateway.meta.generation
    kinds, bad_kinds = _kinds(listener, listener.protocol == "HTTPS" or cleartext_http2)
    http_port = next((p for p, name in ports.items() if name == "http"), None)
    https_port = next((p for p, name in ports.items() if name == "https"), None)
    refs = condition("ResolvedRefs", True, "ResolvedRefs", "", generation)
    if bad_kinds:
        refs = condition("ResolvedRefs", False, "InvalidRouteKinds", f"unsupported route kinds: {', '.join(k.kind for k in bad_kinds)}", generation)

    def refused(reason: str, message: str, resolved: Condition = refs) -> ServedListener:
        return ServedListener(
            gateway, listener, b"", kinds if listener.protocol in SCHEMES else (),
            (condition("Accepted", False, reason, message, generation), condition("Programmed", False, "Invalid", message, generation), resolved),
        )

    if listener.protocol not in SCHEMES:
        return refused("UnsupportedProtocol", f"protocol {listener.protocol} is not served by twingress (HTTP, HTTPS, TLS, TCP and UDP are)")
    if listener.protocol in ("TCP", "UDP"):
        if listener.protocol == "TCP" and listener.port in ports:
            return refused("PortUnavailable", f"TCP port {listener.port} is twingress's own {ports[listener.port]} listener")
        return ServedListener(
            gateway, listener, SCHEMES[listener.protocol], kinds,
            (condition("Accepted", True, "Accepted", "", generation), condition("Programmed", True, "Programmed", "", generation), refs),
        )
    wanted = http_port if listener.protocol == "HTTP" else https_port
    own_port = listener.port not in ports
    if not own_port and wanted != listener.port:
        return refused("PortUnavailable", f"port {listener.port} is twingress's own {ports[listener.port]} listener, which does not serve {listener.protocol}")
    secret = None
    if listener.protocol == "HTTPS" and listener.tls_mode != "Terminate":
        return refused("UnsupportedValue", "an HTTPS listener terminates TLS (tls.mode Terminate)")
    if listener.tls_mode == "Terminate":  # HTTPS, or TLS terminated here for TLSRoutes' TCP backends
        secret, problem = _certificate(state, gateway, listener)
        if problem is not None:
            reason, message = problem
            resolved = condition("ResolvedRefs", False, reason, message, generation)
            return ServedListener(
                gateway, listener, b"", kinds,
                (condition("Accepted", True, "Accepted", "", generation), condition("Programmed", False, "Invalid", message, generation), resolved),
            )
    return ServedListener(
        gateway, listener, SCHEMES[listener.protocol], kinds,
        (condition("Accepted", True, "Accepted", "", generation), condition("Programmed", True, "Programmed", "", generation), refs),
        secret, own_port,
    )


def _kinds(listener: Listener, http2: bool) -> tuple[tuple[RouteKind, ...], tuple[RouteKind, ...]]:
    """The route kinds a listener supports (of those it allows), and those it names but cannot support."""
    if listener.protocol in L4_KINDS:
        supported: tuple[RouteKind, ...] = (L4_KINDS[listener.protocol],)
    else:
        supported = (HTTP_ROUTE_KIND, GRPC_ROUTE_KIND) if http2 else (HTTP_ROUTE_KIND,)
    if not listener.allowed_kinds:
        return supported, ()
    good = tuple(k for k in listener.allowed_kinds if k in supported)
    return good, tuple(k for k in listener.allowed_kinds if k not in supported)


def _certificate(state: ClusterState, gateway: Gateway, listener: Listener) -> tuple[Optional[tuple[str, str]], Optional[tuple[str, str]]]:
    """The listener's certificate Secret, or (reason, message) for its ResolvedRefs condition."""
    if not listener.certificate_refs:
        return None, ("InvalidCertificateRef", "an HTTPS listener needs a certificateRef")
    ref = listener.certificate_refs[0]
    if ref.group or ref.kind != "Secret":
        return None, ("InvalidCertificateRef", f"certificateRef {ref.group or 'core'}/{ref.kind} is not a Secret")
    if ref.namespace != gateway.meta.namespace and not any(
        grant.meta.namespace == ref.namespace and grant.allows(GATEWAY_GROUP, "Gateway", gateway.meta.namespace, "", "Secret", ref.name)
        for grant in state.reference_grants
    ):
        return None, ("RefNotPermitted", f"no ReferenceGrant in namespace {ref.namespace} allows this Gateway to use Secret {ref.name}")
    secret = state.secrets.get((ref.namespace, ref.name))
    if secret is None:
        return None, ("InvalidCertificateRef", f"Secret {ref.namespace}/{ref.name} is not a kubernetes.io/tls Secret with a certificate and key")
    if not holds_pem(secret):
        return None, ("InvalidCertificateRef", f"Secret {ref.namespace}/{ref.name} does not hold a PEM certificate (tls.crt) and a PEM private key (tls.key)")
    return (ref.namespace, ref.name), None


def holds_pem(secret: TLSSecret) -> bool:
    """
    Whether a TLS Secret's certificate and key are PEM blocks of those kinds: a malformed one is an
    InvalidCertificateRef (conformance tests/gateway-invalid-tls-configuration.go, "Malformed
    secret").  Whether they parse, match and cover the hosts is the TLS layer's to judge.
    """
    key = secret.key_pem
    return PEM_CERTIFICATE in secret.cert_pem and PEM_BEGIN in key and PEM_PRIVATE_KEY in key


def attach(state: ClusterState, routes: Iterable[AnyRoute], listeners: list[ServedListener]) -> Attachments:
    """Every route's attachments to C{listeners}, and the Accepted condition of each of its parentRefs that names a Gateway of ours."""
    by_gateway: dict[tuple[str, str], list[ServedListener]] = {}
    for served in listeners:
        by_gateway.setdefault((served.gateway.meta.namespace, served.gateway.meta.name), []).append(served)
    found = Attachments()
    for route in routes:
        for parent in route.parent_refs:
            if parent.group != GATEWAY_GROUP or parent.kind != "Gateway":
                continue
            candidates = by_gateway.get((parent.namespace, parent.name))
            if candidates is None:
                continue  # not a Gateway of ours: another controller's business
            accepted = _attach_one(state, route, parent, candidates, found)
            found.parents.setdefault(route.ref, []).append((parent, accepted))
    return found


def _attach_one(state: ClusterState, route: AnyRoute, parent: ParentRef, candidates: list[ServedListener], found: Attachments) -> Condition:
    generation = route.meta.generation
    selected = [
        s for s in candidates
        if (not parent.section_name or s.listener.name == parent.section_name) and (parent.port is None or s.listener.port == parent.port)
    ]
    if not selected:
        return condition("Accepted", False, "NoMatchingParent", "no listener of the Gateway matches the parentRef's sectionName and port", generation)
    kind = RouteKind(GATEWAY_GROUP, route.kind)
    allowed = [s for s in selected if kind in s.supported_kinds and _admits(state, s, route.meta.namespace)]
    if not allowed:
        why = f"no selected listener allows {route.kind}s from this namespace"
        if kind == GRPC_ROUTE_KIND and any(s.listener.protocol == "HTTP" for s in selected):
            why += " (GRPCRoutes need HTTP/2: HTTPS listeners, or HTTP ones with --h2c true)"
        return condition("Accepted", False, "NotAllowedByListeners", why, generation)
    attached = False
    for served in allowed:
        hosts = intersect_hostnames(served.listener.hostname, route.hostnames)
        if not hosts:
            continue
        attached = True
        key = (served.gateway.ref, served.listener.name)
        found.attached[key] = found.attached.get(key, 0) + 1
        if served.served:
            found.hosts.setdefault(route.ref, []).append((served, hosts))
    if not attached:
        return condition("Accepted", False, "NoMatchingListenerHostname", "no hostname of the route intersects a selected listener's", generation)
    return condition("Accepted", True, "Accepted", "", generation)


def _admits(state: ClusterState, served: ServedListener, namespace: str) -> bool:
    """Whether the listener's allowedRoutes.namespaces admits a route of C{namespace}."""
    listener = served.listener
    if listener.allowed_from == FROM_ALL:
        return True
    if listener.allowed_from == FROM_SAME:
        return namespace == served.gateway.meta.namespace
    if listener.allowed_from == FROM_SELECTOR and listener.allowed_selector is not None:
        known = state.namespaces.get(("", namespace))
        labels = dict(known.meta.labels) if known is not None else {}
        labels.setdefault(NAMESPACE_NAME_LABEL, namespace)  # the API server sets it on every namespace
        return listener.allowed_selector.matches(labels)
    return False


def intersect_hostnames(listener: str, route: tuple[str, ...]) -> tuple[str, ...]:
    """
    The hosts a route serves on a listener: its hostnames that the listener's admits, or the
    listener's where a route wildcard covers it; "" is any host.  Empty when nothing intersects.
    """
    if not route:
        return (listener,)
    if not listener:
        return route
    hosts: dict[str, None] = {}
    for name in route:
        if name == listener or (listener.startswith("*.") and covers(listener, name)):
            hosts[name] = None
        elif name.startswith("*.") and covers(name, listener):
            hosts[listener] = None
    return tuple(hosts)


def covers(wildcard: str, name: str) -> bool:
    """Whether "*.suffix" covers C{name} (a host, or a narrower wildcard): any number of labels before the suffix."""
    return name.endswith(wildcard[1:]) and len(name) > len(wildcard) - 1
