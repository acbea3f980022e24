# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
Gateway API (HTTPRoutes on the Gateways of our GatewayClasses) compiled into the routing table.

L{listeners} decides what attaches where, L{rules} what each rule does; here the
matches of every attached rule become the table's paths, host by host, in the
Gateway API's precedence: an Exact path, then the longest PathPrefix, then a method,
then the most header matches, then the most query parameter matches, then the
oldest route (creation time, then namespace/name), then rule and match order.
RegularExpression paths come after the Exact ones and before the prefixes (L{regex}).

A path's slot holds the candidates whose path matches it (an Exact path's slot also
the prefixes above it, a prefix's slot the shorter prefixes), so the first candidate
whose other conditions hold is the one the spec names; a slot whose first candidate
asks for nothing more holds that route alone, and costs what an Ingress path costs.
Wildcard hostnames cover any number of labels (L{RoutingTable.deep_wildcards}).  A route serves
only the hosts that belong to the listener it attached to (listener isolation, L{isolation}).

A host that an Ingress serves stays the Ingress's: its HTTPRoutes are reported and
not served there (one owner per host keeps both specifications' precedence rules
intact).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Optional

from ingress.model import ClusterState, Condition, ObjectRef, Problem
from ingress.model.gateway import GATEWAY_CONTROLLER_NAME, PATH_MATCH_EXACT, PATH_MATCH_PREFIX, PATH_MATCH_REGEX, VALUE_MATCH_REGEX, HTTPRoute, ParentRef, RouteMatch, ValueMatch
from ingress.routing.backends import Backends
from ingress.routing.gateway.grpc import as_http_route
from ingress.routing.gateway.isolation import Isolation
from ingress.routing.gateway.l4 import L4Entries, add_l4_route
from ingress.routing.gateway.listeners import ServedListener, attach, condition, our_gateways, serve_listeners
from ingress.routing.gateway.regex import RegexPaths
from ingress.routing.gateway.rules import RuleContext, compile_rule
from ingress.routing.gateway.status import GatewayAPIStatus, GatewayStatus, ListenerStatus
from ingress.routing.listener_names import ListenerNames
from ingress.routing.policies.matching import RequestMatch, ValueCondition
from ingress.routing.policies.redirect import GatewayRedirect
from ingress.routing.route import Route
from ingress.routing.streams import TCP, StreamRoute
from ingress.routing.table import HostRoutes
from ingress.routing.upstream import Upstream


@dataclass
class GatewayRoutes:
    """The Gateway API's part of a table: hosts, wildcard suffixes, the any-host paths, certificates, problems, status."""

    hosts: dict[str, HostRoutes] = field(default_factory=dict)
    wildcards: dict[str, HostRoutes] = field(default_factory=dict)
    any_host: Optional[HostRoutes] = None
    certificates: dict[str, tuple[str, str]] = field(default_factory=dict)  # host or "*.suffix" → Secret
    l4: L4Entries = field(default_factory=L4Entries)  # TLSRoute passthrough hosts, TCPRoute and UDPRoute listeners
    problems: list[Problem] = field(default_factory=list)
    status: GatewayAPIStatus = field(default_factory=GatewayAPIStatus)
    own_ports: dict[int, GatewayRoutes] = field(default_factory=dict)  # HTTP(S) listeners on ports of their own: each port's routes
    tls_listeners: bool = False  # a TLS listener (TLSRoutes) is served here: a name no route or certificate serves is refused
    https_names: Optional[ListenerNames] = None  # the HTTPS listeners' hostnames: a request for another's host is misdirected (421)


@dataclass(frozen=True, slots=True)
class _Candidate:
    exact: bool
    path: str
    key: str  # the path's elements joined by "/"
    match: RequestMatch
    order: tuple[object, ...]
    route: Route
    pattern: Optional[re.Pattern[str]] = None  # a RegularExpression path match


def build_gateway_routes(
    state: ClusterState,
    backends: Backends,
    ports: Mapping[int, str],
    controller_name: str = GATEWAY_CONTROLLER_NAME,
    cleartext_http2: bool = False,
    only: Optional[ObjectRef] = None,
) -> GatewayRoutes:
    """
    The Gateway API routes of C{state} for the listeners on C{ports} (port → "http", "https");
    C{only}: of that one Gateway alone (what its own address serves, L{addresses}).
    """
    out = GatewayRoutes()
    if not has_gateway_api(state):
        out.status = GatewayAPIStatus(_class_status(state, controller_name))  # a class of ours is Accepted before any Gateway names it
        return out
    gateways = [g for g in our_gateways(state, controller_name) if only is None or g.ref == only]
    listeners = serve_listeners(state, gateways, ports, cleartext_http2)
    context = RuleContext(state, backends, *_ports(ports))
    grpc = [as_http_route(route, context.problems) for route in state.grpc_routes]
    routes = sorted((*state.http_routes, *grpc), key=lambda r: r.meta.age_key())
    l4_routes = sorted(state.l4_routes, key=lambda r: r.meta.age_key())
    attached = attach(state, [*routes, *l4_routes], listeners)
    isolation = Isolation(listeners)
    candidates: dict[tuple[int, str], list[_Candidate]] = {}  # (own port or 0, host)
    _open_own_ports(listeners, out)
    route_status: dict[ObjectRef, tuple[tuple[ParentRef, tuple[Condition, ...]], ...]] = {}
    for route in routes:
        places = isolation.places(attached.hosts.get(route.ref, []))
        context.unresolved = {}
        parents = attached.parents.get(route.ref)
        if places:
            _add_candidates(route, places, context, candidates)
        elif parents:
            _judge_backends(route, context)
        if parents:
            refs = _resolved_refs(route.meta.generation, context.unresolved)
            route_status[route.ref] = tuple((parent, (accepted, refs)) for parent, accepted in parents)
    for l4_route in l4_routes:
        context.unresolved = {}
        places = attached.hosts.get(l4_route.ref, [])
        by_port: dict[int, list[tuple[ServedListener, tuple[str, ...]]]] = {}
        for served, hosts in places:
            by_port.setdefault(served.listener.port if served.own_port else 0, []).append((served, hosts))
        for port, port_places in by_port.items():
            add_l4_route(l4_route, port_places, context, out.own_ports[port].l4 if port else out.l4)
        parents = attached.parents.get(l4_route.ref)
        if parents:
            refs = _resolved_refs(l4_route.meta.generation, context.unresolved)
            route_status[l4_route.ref] = tuple((parent, (accepted, refs)) for parent, accepted in parents)
    for claim in isolation.claims(list(candidates)):  # listener hostnames a less specific listener's routes must not serve
        inherited = candidates.get((claim.place, claim.fallback), []) if claim.place == 0 and claim.fallback is not None else []
        candidates[(claim.place, claim.host)] = _other_scheme(inherited, claim.scheme)
    for place, names in isolation.https_names().items():
        (out.own_ports[place] if place else out).https_names = names
    for (port, host), found in candidates.items():
        paths = _host_routes(found)
        where = out.own_ports[port] if port else out
        if not host:
            where.any_host = paths
        elif host.startswith("*."):
            where.wildcards[host[2:]] = paths
        else:
            where.hosts[host] = paths
    for served in listeners:
        if served.served and served.listener.protocol == "TLS":
            (out.own_ports[served.listener.port] if served.own_port else out).tls_listeners = True
        if served.secret is not None:
            where = out.own_ports[served.listener.port] if served.own_port else out
            where.certificates.setdefault(served.listener.hostname, served.secret)
    port_problems = [problem for port in out.own_ports.values() for problem in port.l4.problems]
    out.problems = context.problems + out.l4.problems + port_problems + _listener_problems(listeners)
    out.status = GatewayAPIStatus(_class_status(state, controller_name), _gateway_status(listeners, attached.attached), route_status)
    return out


def has_gateway_api(state: ClusterState) -> bool:
    """Whether the snapshot holds Gateway API objects that routing may serve (Gateways or routes of any kind)."""
    return bool(state.gateways or state.http_routes or state.grpc_routes or state.l4_routes)


def _ports(ports: Mapping[int, str]) -> tuple[int, int]:
    http = next((p for p, name in ports.items() if name == "http"), 80)
    https = next((p for p, name in ports.items() if name == "https"), 443)
    return http, https


def _open_own_ports(listeners: list[ServedListener], out: GatewayRoutes) -> None:
    """
    A stream route that opens each port served by listeners of its own (the first listener's Gateway
    names it), and the port's (empty) routes: a listener without routes answers 404, as the spec's
    Programmed listener does.
    """
    for served in listeners:
        port = served.listener.port
        if not served.served or not served.own_port or port in out.own_ports:
            continue
        out.own_ports[port] = GatewayRoutes()
        gateway = served.gateway.meta
        serves = "http" if served.scheme == b"http" else "https"  # HTTPS and TLS listeners: the TLS front, SNI decides
        stream = StreamRoute(TCP, port, f"{gateway.namespace}/{gateway.name}", served.gateway.ref, Upstream(f"gateway:{port}", ()), serves=serves)
        out.l4.streams.setdefault((TCP, port), stream)


def _add_candidates(
    route: HTTPRoute, places: list[tuple[ServedListener, tuple[str, ...]]], context: RuleContext, into: dict[tuple[int, str], list[_Candidate]]
) -> None:
    """
    Every (host, match) of the route's rules, with the schemes of the listeners that serve each host;
    a listener on a port of its own has its own hosts (and one scheme: no condition on it).
    """
    schemes: dict[tuple[int, str], set[bytes]] = {}
    for served, hosts in places:
        port = served.listener.port if served.own_port else 0
        for host in hosts:
            schemes.setdefault((port, host), set()).add(b"" if port else served.scheme)
    compiled = [compile_rule(route, rule, context) for rule in route.rules]
    for place, host_schemes in schemes.items():
        scheme = next(iter(host_schemes)) if len(host_schemes) == 1 else b""
        targets = [_on_own_port(target, place[0]) for target in compiled] if place[0] else compiled
        for rule_index, (rule, target) in enumerate(zip(route.rules, targets, strict=True)):
            for match_index, match in enumerate(rule.matches):
                candidate = _candidate(route, match, target, scheme, (rule_index, match_index), context)
                if candidate is not None:
                    into.setdefault(place, []).append(candidate)


def _other_scheme(candidates: list[_Candidate], scheme: bytes) -> list[_Candidate]:
    """The candidates a request over the other scheme than C{scheme} may reach (those for both schemes narrowed to it)."""
    other = b"https" if scheme == b"http" else b"http"
    return [c if c.match.scheme else replace(c, match=replace(c.match, scheme=other)) for c in candidates if c.match.scheme != scheme]


def _judge_backends(route: HTTPRoute, context: RuleContext) -> None:
    """
    A route served nowhere (its listeners are not served) still has its backendRefs judged: its
    ResolvedRefs says whether they resolve, whatever the listener's state (conformance
    tests/gateway-with-attached-routes.go: BackendNotFound for a parent whose listener lacks its
    certificate).
    """
    for rule in route.rules:
        compile_rule(route, rule, context)


def _on_own_port(target: Route, port: int) -> Route:
    """
    A rule's route as a listener on a port of its own serves it: a redirect without scheme and port
    goes to that listener's port (HTTPRequestRedirectFilter.Port), not to --http's or --https's.
    """
    policies = target.policies
    if policies is None or not isinstance(policies.redirect, GatewayRedirect):
        return target
    return replace(target, policies=replace(policies, redirect=replace(policies.redirect, http_port=port, https_port=port)))


def _candidate(route: HTTPRoute, match: RouteMatch, target: Route, scheme: bytes, position: tuple[int, int], context: RuleContext) -> Optional[_Candidate]:
    if match.path_type not in (PATH_MATCH_EXACT, PATH_MATCH_PREFIX, PATH_MATCH_REGEX):
        context.problems.append(Problem(route.ref, "UnsupportedValue", f"path match type {match.path_type} is not supported: that match is not served"))
        return None
    try:
        pattern = re.compile(match.path) if match.path_type == PATH_MATCH_REGEX else None
    except (re.error, OverflowError) as error:
        context.problems.append(Problem(route.ref, "UnsupportedValue", f"invalid RegularExpression path {match.path!r} ({error}): that match is not served"))
        return None
    try:
        conditions = RequestMatch(
            method=match.method.encode("latin-1"),
            headers=tuple(_condition_of(v, True) for v in _first_of_each(match.headers, lower=True)),
            query=tuple(_condition_of(v, False) for v in _first_of_each(match.query_params, lower=False)),
            scheme=scheme,
        )
    except re.error as error:
        context.problems.append(Problem(route.ref, "UnsupportedValue", f"invalid regular expression in a match ({error}): that match is not served"))
        return None
    exact = match.path_type == PATH_MATCH_EXACT
    order = (
        0 if exact else 1 if pattern is not None else 2,
        -len(match.path),
        0 if match.method else 1,
        -len(conditions.headers),
        -len(conditions.query),
        route.meta.age_key(),
        position,
    )
    key = "/".join(e for e in match.path.split("/") if e)
    return _Candidate(exact, match.path, key, conditions, order, target, pattern)


def _first_of_each(matches: tuple[ValueMatch, ...], *, lower: bool) -> list[ValueMatch]:
    """Only the first match of an equivalent name counts (header names case-insensitively)."""
    seen: set[str] = set()
    kept = []
    for value in matches:
        name = value.name.lower() if lower else value.name
        if name not in seen:
            seen.add(name)
            kept.append(value)
    return kept


def _condition_of(value: ValueMatch, header: bool) -> ValueCondition:
    name = value.name.encode("latin-1")
    if value.type == VALUE_MATCH_REGEX:
        return ValueCondition(name, pattern=re.compile(value.value.encode("utf-8")))
    return ValueCondition(name, value.value.encode("utf-8"))


def _host_routes(candidates: list[_Candidate]) -> HostRoutes:
    """One host's paths: each slot holds its chain of candidates, best first (module docstring)."""
    ordered = sorted(candidates, key=lambda c: c.order)
    prefixes = [c for c in ordered if not c.exact and c.pattern is None]
    patterns = [(c.pattern, c) for c in ordered if c.pattern is not None]
    exact: dict[str, Route] = {}
    for path in dict.fromkeys(c.path for c in ordered if c.exact):
        key = "/".join(e for e in path.split("/") if e)
        below = [] if patterns else [c for c in prefixes if _under(key, c.key)]  # with patterns: joined at lookup
        exact[path] = _slot([c for c in ordered if c.exact and c.path == path] + below, path)
    slots: dict[str, Route] = {}
    for key in dict.fromkeys(c.key for c in prefixes):
        slots[key] = _slot([c for c in prefixes if _under(key, c.key)], "/" + key)
    if patterns:
        return RegexPaths(exact=exact, prefixes=slots, regex=tuple((pattern, _slot([c], c.path)) for pattern, c in patterns))
    return HostRoutes(exact=exact, prefixes=slots)


def _under(key: str, prefix: str) -> bool:
    """Whether a path of elements C{key} is under the prefix of elements C{prefix}."""
    return not prefix or key == prefix or key.startswith(prefix + "/")


def _slot(chain: list[_Candidate], path: str) -> Route:
    """The route of a slot: its best candidate alone when that one asks for nothing more, else the chain as choices."""
    first = chain[0]
    if first.match.unconditional:
        return first.route
    choices: list[tuple[RequestMatch, Route]] = []
    for candidate in chain:
        choices.append((candidate.match, candidate.route))
        if candidate.match.unconditional:
            break  # nothing after it can be reached
    return Route(name=first.route.name, source=first.route.source, upstream=first.route.upstream, path=path, choices=tuple(choices))


def _resolved_refs(generation: int, unresolved: Mapping[str, str]) -> Condition:
    if not unresolved:
        return condition("ResolvedRefs", True, "ResolvedRefs", "", generation)
    reason, message = next(iter(unresolved.items()))
    return condition("ResolvedRefs", False, reason, message, generation)


def _listener_problems(listeners: list[ServedListener]) -> list[Problem]:
    problems = []
    for served in listeners:
        for found in served.conditions:
            if found.status == "False" and found.type != "Conflicted":  # a conflict is told by its Accepted=False
                what = f"listener {served.listener.name}: {found.type} {found.reason}: {found.message}"
                problems.append(Problem(served.gateway.ref, found.reason, what))
    return problems


def _bound_port(served: ServedListener) -> tuple[str, int]:
    """The (transport, port) a served listener binds itself: stream listeners and those on ports of their own."""
    protocol = served.listener.protocol
    if not served.served or not (served.own_port or protocol in ("TCP", "UDP")):
        return ("", 0)
    return ("UDP" if protocol == "UDP" else "TCP", served.listener.port)


def _class_status(state: ClusterState, controller_name: str) -> dict[str, tuple[Condition, ...]]:
    return {
        c.meta.name: (condition("Accepted", True, "Accepted", "", c.meta.generation),)
        for c in state.gateway_classes
        if c.controller_name == controller_name
    }


def _gateway_status(listeners: list[ServedListener], attached: Mapping[tuple[ObjectRef, str], int]) -> dict[ObjectRef, GatewayStatus]:
    by_gateway: dict[ObjectRef, list[ServedListener]] = {}
    for served in listeners:
        by_gateway.setdefault(served.gateway.ref, []).append(served)
    status = {}
    for ref, served_listeners in by_gateway.items():
        gateway = served_listeners[0].gateway
        generation = gateway.meta.generation
        valid = [s for s in served_listeners if s.served]
        if len(valid) == len(served_listeners):
            conditions = (condition("Accepted", True, "Accepted", "", generation), condition("Programmed", True, "Programmed", "", generation))
        elif valid:
            conditions = (condition("Accepted", True, "ListenersNotValid", "some listeners are not served", generation), condition("Programmed", True, "Programmed", "", generation))
        else:
            none = "no listener is served"
            conditions = (condition("Accepted", False, "ListenersNotValid", none, generation), condition("Programmed", False, "Invalid", none, generation))
        status[ref] = GatewayStatus(
            conditions,
            tuple(
                ListenerStatus(s.listener.name, tuple(k.kind for k in s.supported_kinds), attached.get((ref, s.listener.name), 0), s.conditions, _bound_port(s))
                for s in served_listeners
            ),
        )
    return status
