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
Which hosts use which Service is indexed once per full build (L{ServiceUses}),
and which slices each Service has follows the snapshots (L{SliceIndex}).

The result must equal a full build of the same state; tests/unit/test_incremental.py
checks it on random sequences of changes.  What depends on endpoints beyond the
endpoint sets goes through a full build: an ingress-nginx C{default-backend}
(used only while it has endpoints, or while the route's own Service has none) and
stream routes (their status condition counts the endpoints).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Optional, TypeVar

from ingress.model import ClusterState, EndpointSlice, IngressBackend, ServiceBackendPort
from ingress.routing.annotations.errorpages import NO_ENDPOINTS
from ingress.routing.backends import Backends
from ingress.routing.ingress_index import ServiceKey
from ingress.routing.report import Built
from ingress.routing.route import Route
from ingress.routing.table import HostRoutes, RoutingTable
from ingress.routing.upstream import Upstream

_K = TypeVar("_K")
_V = TypeVar("_V")
FIELDS = tuple(f.name for f in fields(ClusterState) if f.name != "changes")  # the snapshot's values
_OTHER_FIELDS = tuple(name for name in FIELDS if name != "endpoint_slices")
_EVERYWHERE = "*"  # a use outside the hosts (the host-less rules, the default route, passthrough): rebuilt every time


@dataclass(frozen=True, slots=True)
class ServiceUses:
    """Where a table uses each Service: the hosts and wildcards whose routes go to it, and whether anything else does."""

    hosts: Mapping[ServiceKey, frozenset[str]]
    wildcards: Mapping[ServiceKey, frozenset[str]]
    shaped_by_endpoints: bool  # a default-backend, a stream, Gateway address tables: endpoint changes need a full build
    deep_wildcards: Mapping[ServiceKey, frozenset[str]] = field(default_factory=dict)  # Gateway API wildcard suffixes

    @classmethod
    def of(cls, built: Built) -> ServiceUses:
        """Where C{built}'s table uses each Service; its report's NO_ENDPOINTS problems are shaped by endpoints too."""
        table = built.table
        hosts: dict[ServiceKey, set[str]] = {}
        wildcards: dict[ServiceKey, set[str]] = {}
        deep: dict[ServiceKey, set[str]] = {}
        # streams, and Gateway address tables (their routes are copies this update does not reach): a full build
        shaped = bool(table.streams or table.addresses) or any(problem.reason == NO_ENDPOINTS for problem in built.report.problems)
        for index, by_host in ((hosts, table.hosts), (wildcards, table.wildcards), (deep, table.deep_wildcards)):
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
        for upstream in (*table.passthrough.values(), *table.deep_passthrough.values(), *table.tls_terminated.values()):
            hosts.setdefault(_service_of(upstream.key) or ("", ""), set()).add(_EVERYWHERE)
        freeze = lambda index: {key: frozenset(names) for key, names in index.items()}  # noqa: E731
        return cls(freeze(hosts), freeze(wildcards), shaped, freeze(deep))

    def beyond_hosts(self, services: Iterable[ServiceKey]) -> Optional[ServiceKey]:
        """One of C{services} that a route outside the hosts uses (the default route, host-less rules, passthrough), or None."""
        return next((service for service in services if _EVERYWHERE in self.hosts.get(service, ())), None)

    def following(self, before: RoutingTable, after: Built, names: Optional[Collection[str]] = None) -> Optional[ServiceUses]:
        """
        The uses of C{after}, made from C{before} (whose uses these are) by changing some hosts and
        wildcards (an Ingress-only update): their entries found again, the others kept.  C{names}:
        the only hosts that may differ, as Ingresses name them ("*.suffix" for a wildcard), when
        known (else every host is compared).  None when more than hosts changed: then they are
        found again from the whole table when needed.
        """
        problems, table = after.report.problems, after.table
        if not all(getattr(table, name) is getattr(before, name) for name in ("any_host", "default_route", "passthrough", "deep_passthrough", "tls_terminated", "streams", "deep_wildcards")):
            return None
        shaped = self.shaped_by_endpoints or any(problem.reason == NO_ENDPOINTS for problem in problems)
        found: list[Mapping[ServiceKey, frozenset[str]]] = []
        exact = None if names is None else {name for name in names if not name.startswith("*.")}
        suffixes = None if names is None else {name[2:] for name in names if name.startswith("*.")}
        for uses, old, new, candidates in ((self.hosts, before.hosts, table.hosts, exact), (self.wildcards, before.wildcards, table.wildcards, suffixes)):
            if new is old:
                found.append(uses)
                continue
            maybe = old.keys() | new.keys() if candidates is None else candidates
            changed = [host for host in maybe if old.get(host) is not new.get(host)]
            touched: dict[ServiceKey, set[str]] = {}
            for host in changed:  # every changed host leaves its Services first...
                for route in _routes_of(old[host]) if host in old else ():
                    for service in _services_of(route):
                        touched.setdefault(service, set(uses.get(service, ()))).discard(host)
            for host in changed:  # ...then joins the Services of its new routes
                for route in _routes_of(new[host]) if host in new else ():
                    shaped = shaped or _has_error_pages(route)
                    for service in _services_of(route):
                        touched.setdefault(service, set(uses.get(service, ()))).add(host)
            result = dict(uses)
            for service, names in touched.items():
                if names:
                    result[service] = frozenset(names)
                else:
                    result.pop(service, None)
            found.append(result)
        return ServiceUses(found[0], found[1], shaped, self.deep_wildcards)


def with_new_endpoints(
    previous: RoutingTable,
    old: ClusterState,
    new: ClusterState,
    generation: int,
    uses: ServiceUses,
    slices: Optional[SliceIndex] = None,
    written: Optional[Mapping[tuple[str, str], object]] = None,
) -> Optional[RoutingTable]:
    """
    C{previous} (built from C{old}, used as C{uses} says) with C{new}'s endpoints, or None when that
    needs a full build.  C{slices} (of C{old}) is moved on to C{new} when given; C{written}: the
    slices written since C{old}, when the source says (L{SliceIndex.follow}).
    """
    if not _only_slices_differ(old, new):
        return None
    index = slices if slices is not None else SliceIndex(old)
    changed = index.follow(new, written)
    if not changed:
        return replace(previous, generation=generation)
    if uses.shaped_by_endpoints:
        return None
    swap = _UpstreamSwap(Backends(new, {service: index.by_service.get(service, []) for service in changed}), changed)
    hosts = {host for service in changed for host in uses.hosts.get(service, ())}
    everywhere = _EVERYWHERE in hosts
    default_route = previous.default_route
    return replace(
        previous,
        generation=generation,
        hosts=_rebuilt(previous.hosts, hosts, swap),
        wildcards=_rebuilt(previous.wildcards, {host for service in changed for host in uses.wildcards.get(service, ())}, swap),
        deep_wildcards=_rebuilt(previous.deep_wildcards, {host for service in changed for host in uses.deep_wildcards.get(service, ())}, swap),
        any_host=_host(previous.any_host, swap) if everywhere and previous.any_host is not None else previous.any_host,
        default_route=_route(default_route, swap) if everywhere and default_route is not None else default_route,
        passthrough=_mapped(previous.passthrough, swap) if everywhere else previous.passthrough,
        deep_passthrough=_mapped(previous.deep_passthrough, swap) if everywhere else previous.deep_passthrough,
        tls_terminated=_mapped(previous.tls_terminated, swap) if everywhere else previous.tls_terminated,
    )


def _only_slices_differ(old: ClusterState, new: ClusterState) -> bool:
    return all(same_objects(getattr(old, name), getattr(new, name)) for name in _OTHER_FIELDS)


def same_objects(old: object, new: object) -> bool:
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


class SliceIndex:
    """
    A snapshot's EndpointSlices by Service, moved on from snapshot to snapshot by the slices that
    changed: an endpoint update at 10k Services then costs what changed, not a look at every slice.
    """

    def __init__(self, state: ClusterState) -> None:
        self.slices = state.endpoint_slices
        self.by_service: dict[ServiceKey, list[EndpointSlice]] = {}
        self.by_key: dict[tuple[str, str], EndpointSlice] = {}  # by (namespace, name): what a source's written keys name
        for endpoint_slice in state.endpoint_slices:
            self.by_service.setdefault(_slice_service(endpoint_slice), []).append(endpoint_slice)
            self.by_key[(endpoint_slice.meta.namespace, endpoint_slice.meta.name)] = endpoint_slice

    def follow(self, new: ClusterState, written: Optional[Mapping[tuple[str, str], object]] = None) -> frozenset[ServiceKey]:
        """
        Move on to C{new}; returns the Services whose slices changed (object for object).
        C{written}: the slices the source wrote since this index's snapshot, by key (None: gone),
        when it says so (L{ingress.model.SnapshotChanges}); else both snapshots are compared.
        """
        if written is None:
            removed, added = _moved(self.slices, new.endpoint_slices)
        else:
            removed = [gone for key in written if (gone := self.by_key.get(key)) is not None]
            added = [value for value in written.values() if isinstance(value, EndpointSlice)]
        for endpoint_slice in removed:
            found = self.by_service.get(_slice_service(endpoint_slice), [])
            found[:] = [s for s in found if s is not endpoint_slice]
            key = (endpoint_slice.meta.namespace, endpoint_slice.meta.name)
            if self.by_key.get(key) is endpoint_slice:
                del self.by_key[key]
        for endpoint_slice in added:
            self.by_service.setdefault(_slice_service(endpoint_slice), []).append(endpoint_slice)
            self.by_key[(endpoint_slice.meta.namespace, endpoint_slice.meta.name)] = endpoint_slice
        self.slices = new.endpoint_slices
        return frozenset(_slice_service(s) for s in (*removed, *added))

    def slices_of(self, service: ServiceKey) -> Sequence[EndpointSlice]:
        return self.by_service.get(service, ())


def _slice_service(endpoint_slice: EndpointSlice) -> ServiceKey:
    return (endpoint_slice.meta.namespace, endpoint_slice.service_name)


def _moved(old: Sequence[EndpointSlice], new: Sequence[EndpointSlice]) -> tuple[list[EndpointSlice], list[EndpointSlice]]:
    """
    The slices only in C{old} and only in C{new}, object for object.  An informer's store keeps a
    changed object in its place, so two snapshots of one length are compared place by place (a
    slice that moved place counts as removed and added: a harmless update); otherwise by identity
    (both snapshots hold theirs, so no two of these objects share an id).
    """
    if len(old) == len(new):
        places = [i for i, same in enumerate(map(operator.is_, old, new)) if not same]
        return [old[i] for i in places], [new[i] for i in places]
    before, after = dict(zip(map(id, old), old, strict=True)), dict(zip(map(id, new), new, strict=True))  # no Python-level loop over every slice
    return [before[key] for key in before.keys() - after.keys()], [after[key] for key in after.keys() - before.keys()]


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
    """The Services a route sends requests to: its own, its canary's, a Gateway rule's weighted backends' and mirrors', its choices'."""
    service = _service_of(route.upstream.key)
    if service is not None:
        yield service
    policies = route.policies
    if policies is not None and policies.canary is not None:
        yield from _services_of(policies.canary.route)
    if policies is not None and policies.backends is not None:
        for backend in policies.backends.routes:
            if backend is not None:
                yield from _services_of(backend)
    if policies is not None and policies.mirror is not None:
        yield from (service for target in policies.mirror.targets if (service := _service_of(target.upstream.key)) is not None)
    for _, choice in route.choices:
        yield from _services_of(choice)


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
    """The route with every upstream it may send to resolved again (its own, a canary's, weighted backends', mirrors', choices')."""
    policies = route.policies
    if policies is not None and policies.canary is not None:
        canary = _route(policies.canary.route, swap)
        if canary is not policies.canary.route:
            policies = replace(policies, canary=replace(policies.canary, route=canary))
    if policies is not None and policies.backends is not None:
        backends = tuple(_route(backend, swap) if backend is not None else None for backend in policies.backends.routes)
        if any(a is not b for a, b in zip(backends, policies.backends.routes, strict=True)):
            policies = replace(policies, backends=replace(policies.backends, routes=backends))
    if policies is not None and policies.mirror is not None:
        targets = tuple(replace(target, upstream=swap(target.upstream)) for target in policies.mirror.targets)
        if any(a.upstream is not b.upstream for a, b in zip(targets, policies.mirror.targets, strict=True)):
            policies = replace(policies, mirror=replace(policies.mirror, targets=targets))
    choices = tuple((match, _route(choice, swap)) for match, choice in route.choices)
    if any(a[1] is not b[1] for a, b in zip(choices, route.choices, strict=True)):
        route = replace(route, choices=choices)
    upstream = swap(route.upstream)
    if upstream is route.upstream and policies is route.policies:
        return route
    return replace(route, upstream=upstream, policies=policies)
