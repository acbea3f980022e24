# -*- test-case-name: tests.unit.test_incremental -*-
"""
EndpointSlice-only changes applied to the previous table, without building its routes again.

Pods scaling and rolling change EndpointSlices far more often than anything else
changes in a cluster.  When a snapshot differs from the previous one in its
EndpointSlices only, every route, certificate and problem stays what it was and
only the endpoints of the Services whose slices changed can differ: their
upstreams are resolved again (as L{Backends} resolves them in a full build) and
the routes that use them replaced, host by host, while everything else (the
other hosts, the certificates, the problems) is shared with the previous table.
Which hosts use which Service is indexed once per full build (L{ServiceUses}).

The result must equal a full build of the same state; tests/unit/test_incremental.py
checks it on random sequences of changes.  What depends on endpoints beyond the
endpoint sets goes through a full build: an ingress-nginx C{default-backend}
(used only while it has endpoints, or while the route's own Service has none) and
stream routes (their status condition counts the endpoints).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Optional, TypeVar

from ingress.model import ClusterState, EndpointSlice, IngressBackend, ServiceBackendPort
from ingress.routing.annotations.errorpages import NO_ENDPOINTS
from ingress.routing.backends import Backends
from ingress.routing.route import Route, Upstream
from ingress.routing.table import HostRoutes, RoutingTable

Build = Callable[[ClusterState, int], RoutingTable]
ServiceKey = tuple[str, str]
_K = TypeVar("_K")
_V = TypeVar("_V")
_OTHER_FIELDS = tuple(f.name for f in fields(ClusterState) if f.name != "endpoint_slices")
_EVERYWHERE = "*"  # a use outside the hosts (the host-less rules, the default route, passthrough): rebuilt every time


class IncrementalBuild:
    """
    A build function that remembers the last state and table: an EndpointSlice-only change is
    applied to that table (L{with_new_endpoints}), anything else is a full build.
    """

    def __init__(self, full: Build) -> None:
        self.full = full
        self._last: Optional[tuple[ClusterState, RoutingTable, Optional[ServiceUses]]] = None
        self.endpoint_updates = 0  # builds that were EndpointSlice-only (for tests and the log)

    def __call__(self, state: ClusterState, generation: int) -> RoutingTable:
        if self._last is not None:
            old, previous, uses = self._last
            if uses is None and _only_slices_differ(old, state):
                uses = ServiceUses.of(previous)
            table = with_new_endpoints(previous, old, state, generation, uses) if uses is not None else None
            if table is not None:
                self.endpoint_updates += 1
                self._last = (state, table, uses)  # the same hosts use the same Services
                return table
        table = self.full(state, generation)
        self._last = (state, table, None)
        return table


@dataclass(frozen=True, slots=True)
class ServiceUses:
    """Where a table uses each Service: the hosts and wildcards whose routes go to it, and whether anything else does."""

    hosts: Mapping[ServiceKey, frozenset[str]]
    wildcards: Mapping[ServiceKey, frozenset[str]]
    shaped_by_endpoints: bool  # a default-backend or a stream: endpoint changes need a full build

    @classmethod
    def of(cls, table: RoutingTable) -> ServiceUses:
        hosts: dict[ServiceKey, set[str]] = {}
        wildcards: dict[ServiceKey, set[str]] = {}
        shaped = bool(table.streams) or any(problem.reason == NO_ENDPOINTS for problem in table.problems)
        for index, by_host in ((hosts, table.hosts), (wildcards, table.wildcards)):
            for host, routes in by_host.items():
                for route in _routes_of(routes):
                    shaped = shaped or _has_error_pages(route)
                    for service in _services_of(route):
                        index.setdefault(service, set()).add(host)
        elsewhere = [table.default_route] if table.default_route is not None else []
        if table.any_host is not None:
            elsewhere.extend(_routes_of(table.any_host))
        for route in elsewhere:
            shaped = shaped or _has_error_pages(route)
            for service in _services_of(route):
                hosts.setdefault(service, set()).add(_EVERYWHERE)
        for upstream in table.passthrough.values():
            hosts.setdefault(_service_of(upstream.key) or ("", ""), set()).add(_EVERYWHERE)
        freeze = lambda index: {key: frozenset(names) for key, names in index.items()}  # noqa: E731
        return cls(freeze(hosts), freeze(wildcards), shaped)


def with_new_endpoints(
    previous: RoutingTable, old: ClusterState, new: ClusterState, generation: int, uses: ServiceUses
) -> Optional[RoutingTable]:
    """C{previous} (built from C{old}, used as C{uses} says) with C{new}'s endpoints, or None when that needs a full build."""
    if not _only_slices_differ(old, new):
        return None
    changed = _changed_services(old.endpoint_slices, new.endpoint_slices)
    if not changed:
        return replace(previous, generation=generation)
    if uses.shaped_by_endpoints:
        return None
    swap = _UpstreamSwap(Backends(new, changed), changed)
    hosts = {host for service in changed for host in uses.hosts.get(service, ())}
    everywhere = _EVERYWHERE in hosts
    default_route = previous.default_route
    return replace(
        previous,
        generation=generation,
        hosts=_rebuilt(previous.hosts, hosts, swap),
        wildcards=_rebuilt(previous.wildcards, {host for service in changed for host in uses.wildcards.get(service, ())}, swap),
        any_host=_host(previous.any_host, swap) if everywhere and previous.any_host is not None else previous.any_host,
        default_route=_route(default_route, swap) if everywhere and default_route is not None else default_route,
        passthrough=_mapped(previous.passthrough, swap) if everywhere else previous.passthrough,
    )


def _only_slices_differ(old: ClusterState, new: ClusterState) -> bool:
    return all(_same_objects(getattr(old, name), getattr(new, name)) for name in _OTHER_FIELDS)


def _same_objects(old: object, new: object) -> bool:
    """
    The same values, object for object (an informer's store hands out the objects it keeps).  Not
    value equality: metadata labels and annotations take no part in it (ObjectMeta), and an edited
    annotation must never look like no change.
    """
    if old is new:
        return True
    if isinstance(old, tuple) and isinstance(new, tuple):
        return len(old) == len(new) and all(map(operator.is_, old, new))
    if isinstance(old, Mapping) and isinstance(new, Mapping):  # keyed by the values' own names: same values, same keys
        return len(old) == len(new) and all(map(operator.is_, old.values(), new.values()))  # another order: a full build
    return False


def _changed_services(old: Iterable[EndpointSlice], new: Iterable[EndpointSlice]) -> frozenset[ServiceKey]:
    """
    The Services of the slices that are in one snapshot and not the other, object for object
    (both snapshots hold theirs, so no two of these objects share an id).
    """
    before, after = {id(s): s for s in old}, {id(s): s for s in new}
    moved = [before[key] for key in before.keys() - after.keys()] + [after[key] for key in after.keys() - before.keys()]
    return frozenset((s.meta.namespace, s.service_name) for s in moved)


def _service_of(key: str) -> Optional[ServiceKey]:
    """The Service of a key of L{Backends} ("namespace/service:port", "/UDP" for UDP); None for other keys ("#service", "#redirect")."""
    if "#" in key or "/" not in key:
        return None
    namespace, _, rest = key.partition("/")
    return namespace, rest.partition(":")[0]


class _UpstreamSwap:
    """Old upstream → the same backend resolved against the new slices (itself when its Service's slices did not change)."""

    def __init__(self, backends: Backends, changed: frozenset[ServiceKey]) -> None:
        self.backends = backends
        self.changed = changed
        self._seen: dict[str, Upstream] = {}

    def __call__(self, upstream: Upstream) -> Upstream:
        found = self._seen.get(upstream.key)
        if found is None:
            found = self._seen[upstream.key] = self._resolved(upstream)
        return found

    def _resolved(self, upstream: Upstream) -> Upstream:
        service = _service_of(upstream.key)
        if service is None or service not in self.changed:
            return upstream
        port, _, protocol = upstream.key.partition(":")[2].partition("/")
        wanted = ServiceBackendPort(number=int(port)) if port.isdigit() else ServiceBackendPort(name=port)
        return self.backends.upstream(service[0], IngressBackend(service[1], wanted), protocol or "TCP")[0]


def _routes_of(routes: HostRoutes) -> Iterable[Route]:
    yield from routes.exact.values()
    yield from routes.prefixes.values()
    yield from (route for _, route in routes.regex)


def _services_of(route: Route) -> Iterable[ServiceKey]:
    """The Services a route (and its canary) sends requests to."""
    service = _service_of(route.upstream.key)
    if service is not None:
        yield service
    if route.policies is not None and route.policies.canary is not None:
        yield from _services_of(route.policies.canary.route)


def _has_error_pages(route: Route) -> bool:
    return route.policies is not None and route.policies.error_pages is not None


def _rebuilt(by_host: Mapping[str, HostRoutes], hosts: set[str], swap: _UpstreamSwap) -> Mapping[str, HostRoutes]:
    """C{by_host} with the routes of C{hosts} resolved again; the same mapping when none of them changes."""
    result: Optional[dict[str, HostRoutes]] = None
    for host in hosts:
        routes = by_host.get(host)
        if routes is None:
            continue
        changed = _host(routes, swap)
        if changed is not routes:
            if result is None:
                result = dict(by_host)
            result[host] = changed
    return by_host if result is None else result


def _mapped(items: Mapping[_K, _V], change: Callable[[_V], _V]) -> Mapping[_K, _V]:
    """C{items} with each value changed, the same mapping when none is."""
    result: Optional[dict[_K, _V]] = None
    for key, value in items.items():
        changed = change(value)
        if changed is not value:
            if result is None:
                result = dict(items)
            result[key] = changed
    return items if result is None else result


def _host(routes: HostRoutes, swap: _UpstreamSwap) -> HostRoutes:
    exact = _mapped(routes.exact, lambda route: _route(route, swap))
    prefixes = _mapped(routes.prefixes, lambda route: _route(route, swap))
    regex = tuple((pattern, _route(route, swap)) for pattern, route in routes.regex)
    if exact is routes.exact and prefixes is routes.prefixes and all(a[1] is b[1] for a, b in zip(regex, routes.regex, strict=True)):
        return routes
    return replace(routes, exact=exact, prefixes=prefixes, regex=regex)


def _route(route: Route, swap: _UpstreamSwap) -> Route:
    policies = route.policies
    if policies is not None and policies.canary is not None:
        canary = _route(policies.canary.route, swap)
        if canary is not policies.canary.route:
            policies = replace(policies, canary=replace(policies.canary, route=canary))
    upstream = swap(route.upstream)
    if upstream is route.upstream and policies is route.policies:
        return route
    return replace(route, upstream=upstream, policies=policies)
