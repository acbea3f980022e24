# -*- test-case-name: tests.unit.test_routing -*-
"""
The lookups a request makes in a routing table, compiled with the request path.

A table's classes (L{ingress.routing.table}) are frozen dataclasses and stay interpreted in the
compiled build: workers receive tables pickled, and mypyc's state setter cannot restore a frozen
one.  So each request's route was found by five calls into the interpreter from the compiled
request path (C{RoutingTable.match}, C{host_routes}, C{HostRoutes.match}, C{longest_prefix} and its
list comprehension; C{bench/h2_path.py --profile}).  These functions are those lookups, on any
object with the table's fields (L{Table}, L{Paths}): the classes' methods call them, and
L{ingress.proxy.request.routed} calls L{match} directly.  A host's paths that match in their own way
(Gateway API regular expressions: L{ingress.routing.gateway.regex.RegexPaths}) have C{plain}
False, set by C{HostRoutes.__init_subclass__} for any subclass that overrides C{match}, and their
own C{match} is called.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional, Protocol, TypeVar

from ingress.routing.route import Route

_T = TypeVar("_T")


class Paths(Protocol):
    """The paths of one host (L{ingress.routing.table.HostRoutes}): what L{paths_match} reads."""

    @property
    def plain(self) -> bool:
        """True where L{paths_match} is the match; False where the paths' own C{match} is."""

    @property
    def exact(self) -> Mapping[str, Route]: ...

    @property
    def prefixes(self) -> Mapping[str, Route]: ...

    @property
    def regex(self) -> tuple[tuple[re.Pattern[str], Route], ...]: ...

    def match(self, path: str) -> Optional[Route]: ...


class Table(Protocol):
    """What a request's lookup reads of a L{ingress.routing.table.RoutingTable}."""

    @property
    def hosts(self) -> Mapping[str, Paths]: ...

    @property
    def wildcards(self) -> Mapping[str, Paths]: ...

    @property
    def deep_wildcards(self) -> Mapping[str, Paths]: ...

    @property
    def any_host(self) -> Optional[Paths]: ...

    @property
    def default_route(self) -> Optional[Route]: ...


def match(table: Table, host: str, path: str) -> Optional[Route]:
    """
    The route for a request, or None for 404: C{host} normalised (L{ingress.routing.table.normalize_host}),
    C{path} the target's path (no query).  A host that owns rules but none of whose paths match falls to
    the default backend, as in the Ingress specification.
    """
    routes = host_routes(table, host)
    if routes is not None:
        route = paths_match(routes, path) if routes.plain else routes.match(path)
        if route is not None:
            return route
    return table.default_route


def host_routes(table: Table, host: str) -> Optional[Paths]:
    """The rules that own C{host} (already normalised): exact beats wildcard beats host-less."""
    routes = table.hosts.get(host)
    if routes is not None:
        return routes
    dot = host.find(".")
    if dot > 0:
        routes = table.wildcards.get(host[dot + 1 :])
        if routes is not None:
            return routes
        deep = table.deep_wildcards
        if deep:
            routes = longest_suffix(deep, host, "", dot)  # Gateway API wildcards: any number of labels
            if routes is not None:
                return routes
    return table.any_host


def paths_match(paths: Paths, path: str) -> Optional[Route]:
    """Exact first (it is always the longest match), then prefixes from the longest; a regex host: its first pattern that matches."""
    regex = paths.regex
    if regex:
        for pattern, matched in regex:
            if pattern.match(path):
                return matched
        return None
    route = paths.exact.get(path)
    if route is not None:
        return route
    prefixes = paths.prefixes
    return longest_prefix(prefixes, path) if prefixes else None


def longest_prefix(prefixes: Mapping[str, Route], path: str) -> Optional[Route]:
    """The route of the longest prefix of C{path}, element-wise (the table's prefix keys)."""
    elements = [element for element in path.split("/") if element]
    for n in range(len(elements), -1, -1):
        route = prefixes.get("/".join(elements[:n]))
        if route is not None:
            return route
    return None


def longest_suffix(by_suffix: Mapping[str, _T], host: str, prefix: str, dot: Optional[int] = None) -> Optional[_T]:
    """
    The entry for the longest suffix of C{host} after a dot (keys: C{prefix} + suffix): Gateway
    wildcards, any number of labels.  C{dot}: the first dot of C{host}, when the caller found it.
    """
    if dot is None:
        dot = host.find(".")
    while dot > 0:
        found = by_suffix.get(prefix + host[dot + 1 :])
        if found is not None:
            return found
        dot = host.find(".", dot + 1)
    return None
