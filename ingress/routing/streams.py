# -*- test-case-name: tests.unit.test_streams -*-
"""
Stream routes: what a raw TCP or UDP listener port forwards to, and who got the port.

A L{StreamRoute} is the stream counterpart of L{ingress.routing.route.Route}:
one per (protocol, port) that won, with the object that asked for it and the
L{Upstream} (ready pod endpoints, or an external host) its traffic goes to.
The listener manager in L{ingress.proxy} opens, moves and closes listeners by
comparing the C{streams} of two tables.

L{build_streams} makes them from a snapshot's StreamIngresses and the
entries of the ingress-nginx tcp/udp-services ConfigMaps named on the command
line.  A port goes to the oldest claim (creationTimestamp, then
namespace/name); the others, and claims on a port of our own HTTP, HTTPS or
admin listener, are refused.  Every StreamIngress gets the conditions its
status should show (L{StreamCondition}: Accepted, ResolvedRefs, Conflict),
which the status controller writes; until then /debug/routes shows them.
Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ingress.model import ClusterState, ConfigMap, IngressBackend, ObjectRef, Problem, StreamIngress
from ingress.model.parse import ParseError, parse_stream_entry
from ingress.routing.upstream import Upstream

TCP, UDP = "TCP", "UDP"
PROXY_V1, PROXY_V2 = "v1", "v2"
DEFAULT_STREAM_IDLE_TIMEOUT = 600.0  # seconds, as nginx's proxy_timeout for streams is often raised to

ACCEPTED, RESOLVED_REFS, CONFLICT = "Accepted", "ResolvedRefs", "Conflict"

Resolve = Callable[[str, IngressBackend, str], tuple[Upstream, Optional[tuple[str, str]]]]
"""(namespace, backend, protocol) -> the Upstream and what is wrong with it: the HTTP build's backend resolution."""


@dataclass(frozen=True, slots=True)
class StreamRoute:
    """
    One stream listener: C{protocol} ("TCP" or "UDP") on C{port}, to C{upstream}.

    C{name} is the metrics label ("namespace/name" of the StreamIngress, or
    "namespace/configmap:port" for an ingress-nginx ConfigMap entry).
    C{proxy_protocol} is None, "v1" or "v2": the PROXY header sent to the
    upstream before the client's bytes (TCP only).  C{serves} is "" for a
    relay of bytes to C{upstream}; "http" or "https" for a Gateway API
    listener on a port of its own, which answers HTTP (over TLS) with the
    routes of C{RoutingTable.gateway_ports[port]} (its C{upstream} is empty).
    Such a listener is a stream port so that it is opened, closed, shared
    with the worker processes and refused a taken port as every stream is.
    """

    protocol: str
    port: int
    name: str
    source: ObjectRef
    upstream: Upstream
    proxy_protocol: Optional[str] = None
    idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT
    serves: str = ""

    @property
    def key(self) -> tuple[str, int]:
        """What identifies a listener: a change of anything else moves traffic, not the socket."""
        return (self.protocol, self.port)


@dataclass(frozen=True, slots=True)
class StreamCondition:
    """A metav1.Condition without its transition time (the status writer keeps that): type, status, reason, message."""

    type: str
    status: str  # "True" or "False"
    reason: str
    message: str
    observed_generation: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.observed_generation,
        }


@dataclass
class StreamBuild:
    """What L{build_streams} makes: the winning routes, each StreamIngress's conditions, and the problems."""

    streams: dict[tuple[str, int], StreamRoute] = field(default_factory=dict)
    conditions: dict[ObjectRef, tuple[StreamCondition, ...]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Claim:
    """A request for one (protocol, port): a StreamIngress, or one entry of a stream ConfigMap."""

    spec: StreamIngress
    source: ObjectRef
    name: str

    @property
    def order(self) -> tuple[tuple[str, str, str], ObjectRef, int]:
        return (self.spec.meta.age_key(), self.source, self.spec.listen)


def build_streams(
    state: ClusterState,
    resolve: Resolve,
    *,
    tcp_services: Optional[tuple[str, str]] = None,
    udp_services: Optional[tuple[str, str]] = None,
    reserved_ports: Mapping[int, str] = {},
) -> StreamBuild:
    """
    The stream routes of C{state}; nothing in it makes this raise.

    C{tcp_services}/C{udp_services} are the (namespace, name) of the
    ingress-nginx ConfigMaps to read; C{reserved_ports} maps the TCP ports of
    our own listeners to their names ("http", "https", "admin").
    """
    result = StreamBuild()
    claims = [_Claim(s, s.ref, f"{s.meta.namespace}/{s.meta.name}") for s in state.stream_ingresses]
    for protocol, named in ((TCP, tcp_services), (UDP, udp_services)):
        if named is not None:
            claims.extend(_config_map_claims(state.config_maps.get(named), named, protocol, result.problems))
    claims.sort(key=lambda c: c.order)
    for claim in claims:
        _add(claim, result, resolve, reserved_ports)
    for problem in state.problems:  # an invalid StreamIngress is not accepted, and says why
        if problem.ref.kind == "StreamIngress":
            result.conditions[problem.ref] = (
                StreamCondition(ACCEPTED, "False", "Invalid", f"{problem.reason}: {problem.message}"),
            )
    return result


def _config_map_claims(
    config_map: Optional[ConfigMap], named: tuple[str, str], protocol: str, problems: list[Problem]
) -> Iterable[_Claim]:
    """One claim per good entry of a stream ConfigMap; bad entries become problems of the ConfigMap."""
    ref = ObjectRef("ConfigMap", *named)
    if config_map is None:
        option = f"--{protocol.lower()}-services-configmap"
        problems.append(Problem(ref, "NotFound", f"{option} names this ConfigMap, which does not exist"))
        return
    problems.extend(Problem(ref, "Invalid", message) for message in config_map.invalid)
    for key, value in config_map.data:
        try:
            spec = parse_stream_entry(config_map, protocol, key, value)
        except ParseError as error:
            problems.append(Problem(ref, error.reason, error.message))
            continue
        yield _Claim(spec, ref, f"{ref.namespace}/{ref.name}:{key}")


def _add(claim: _Claim, result: StreamBuild, resolve: Resolve, reserved_ports: Mapping[int, str]) -> None:
    """Resolve the claim's upstream, then give it the port unless a listener or an older claim has it."""
    spec = claim.spec
    upstream, issue = _upstream(spec, resolve)
    conditions = [_resolved_condition(spec, upstream, issue)]
    if issue is not None:
        result.problems.append(Problem(claim.source, *issue))
    key = (spec.protocol, spec.listen)
    listener = reserved_ports.get(spec.listen) if spec.protocol == TCP else None
    winner = result.streams.get(key)
    if listener is not None:
        reason, message = "ReservedPort", f"TCP port {spec.listen} is twingress's own {listener} listener"
    elif winner is not None:
        reason, message = "PortConflict", f"{spec.protocol} port {spec.listen} is already taken by {_owner(winner)}, which is older"
    else:
        result.streams[key] = StreamRoute(
            protocol=spec.protocol,
            port=spec.listen,
            name=claim.name,
            source=claim.source,
            upstream=upstream,
            proxy_protocol=spec.proxy_protocol,
            idle_timeout=spec.idle_timeout or DEFAULT_STREAM_IDLE_TIMEOUT,
        )
        conditions += [
            StreamCondition(ACCEPTED, "True", "Accepted", f"listening on {spec.protocol} port {spec.listen}"),
            StreamCondition(CONFLICT, "False", "NoConflict", f"{spec.protocol} port {spec.listen} is this object's"),
        ]
        _set_conditions(claim, result, conditions)
        return
    result.problems.append(Problem(claim.source, "Conflict", f"{message} (not listening)"))
    conditions += [
        StreamCondition(ACCEPTED, "False", reason, f"not listening: {message}"),
        StreamCondition(CONFLICT, "True", reason, message),
    ]
    _set_conditions(claim, result, conditions)


def _set_conditions(claim: _Claim, result: StreamBuild, conditions: list[StreamCondition]) -> None:
    """Only StreamIngresses have status; ConfigMap entries are told through problems alone."""
    if claim.source.kind == "StreamIngress":
        generation = claim.spec.meta.generation
        result.conditions[claim.source] = tuple(
            StreamCondition(c.type, c.status, c.reason, c.message, generation)
            for c in sorted(conditions, key=lambda c: c.type)
        )


def _owner(route: StreamRoute) -> str:
    if route.source.kind == "StreamIngress":
        return f"StreamIngress {route.name}"
    return f'ConfigMap {route.source.namespace}/{route.source.name} entry "{route.port}"'


def _upstream(spec: StreamIngress, resolve: Resolve) -> tuple[Upstream, Optional[tuple[str, str]]]:
    """A Service's ready endpoints (resolved as the HTTP build does), or the external host."""
    if spec.external_host:
        port = spec.port.number or 0
        key = f"external/{spec.external_host}:{port}" + ("" if spec.protocol == TCP else f"/{spec.protocol}")
        if _is_ip(spec.external_host):
            return Upstream(key, ((str(ipaddress.ip_address(spec.external_host)), port),)), None
        return Upstream(key, (), external_name=spec.external_host, external_port=port), None
    return resolve(spec.service_namespace, IngressBackend(spec.service, spec.port), spec.protocol)


def _resolved_condition(spec: StreamIngress, upstream: Upstream, issue: Optional[tuple[str, str]]) -> StreamCondition:
    if issue is not None:
        return StreamCondition(RESOLVED_REFS, "False", issue[0], issue[1])
    if upstream.external_name:
        message = f"external host {upstream.external_name}:{upstream.external_port}"
    elif spec.external_host:
        message = f"external address {spec.external_host}:{spec.port}"
    else:
        count = len(upstream.endpoints)
        message = f"Service {spec.service_namespace}/{spec.service} port {spec.port}: {count} ready endpoint{'s' * (count != 1)}"
    return StreamCondition(RESOLVED_REFS, "True", "ResolvedRefs", message)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def stream_key(protocol: str, port: int) -> str:
    """A stream listener as /debug/routes and the log name it: C{TCP/5432}, everywhere the same."""
    return f"{protocol}/{port}"


def streams_json(streams: Mapping[tuple[str, int], StreamRoute], conditions: Mapping[ObjectRef, tuple[StreamCondition, ...]]) -> dict[str, Any]:
    """The stream part of /debug/routes: listeners by "TCP/5432", conditions by "namespace/name"."""
    return {
        "streams": {
            stream_key(protocol, port): {
                "route": route.name,
                "source": str(route.source),
                "upstream": route.upstream.key,
                "endpoints": [f"{h}:{p}" for h, p in route.upstream.targets],
                "proxyProtocol": route.proxy_protocol,
                "idleTimeout": route.idle_timeout,
                **({"serves": route.serves} if route.serves else {}),
            }
            for (protocol, port), route in sorted(streams.items())
        },
        "streamConditions": {
            f"{ref.namespace}/{ref.name}": [c.to_json() for c in found] for ref, found in sorted(conditions.items())
        },
    }
