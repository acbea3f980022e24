# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
A GRPCRoute read as the HTTPRoute it means on the wire: gRPC calls are HTTP/2 POSTs to
C{/package.Service/Method} ("gRPC over HTTP2"), so a method match is a path.

Service and method: the Exact path C{/service/method}; a service alone: the PathPrefix
C{/service} (every method of it).  Both orders agree with GRPCRoute's precedence (a
longer service and method first, then more header matches).  A method without a service and
RegularExpression method matches are reported and not served (the table matches paths by
prefix and whole path only).  Its rules' backends speak HTTP/2 (h2c) to the endpoints, and a
backend that cannot be used answers 503, which gRPC clients read as UNAVAILABLE, as GRPCRoute
asks.
"""

from __future__ import annotations

from ingress.model import Problem
from ingress.model.gateway import PATH_MATCH_EXACT, PATH_MATCH_PREFIX, VALUE_MATCH_EXACT, GRPCRoute, GRPCRouteMatch, HTTPRoute, RouteMatch, RouteRule

GRPC_ROUTE = "GRPCRoute"


def as_http_route(route: GRPCRoute, problems: list[Problem]) -> HTTPRoute:
    """The HTTPRoute a GRPCRoute means; its unsupported matches become C{problems} (a rule left without matches serves nothing)."""
    rules = tuple(
        RouteRule(
            matches=tuple(found for found in (_match(route, m, problems) for m in rule.matches) if found is not None),
            filters=rule.filters,
            backend_refs=rule.backend_refs,
            name=rule.name,
        )
        for rule in route.rules
    )
    return HTTPRoute(route.meta, route.parent_refs, route.hostnames, rules, route.status_parents, route.status_parents_raw, GRPC_ROUTE)


def _match(route: GRPCRoute, match: GRPCRouteMatch, problems: list[Problem]) -> RouteMatch | None:
    method = match.method
    if method is None:
        return RouteMatch(headers=match.headers)
    if method.type != VALUE_MATCH_EXACT or not method.service:
        what = "a RegularExpression method match" if method.type != VALUE_MATCH_EXACT else "a method match without a service"
        problems.append(Problem(route.ref, "UnsupportedValue", f"{what} is not supported: that match is not served"))
        return None
    if method.method:
        return RouteMatch(PATH_MATCH_EXACT, f"/{method.service}/{method.method}", match.headers)
    return RouteMatch(PATH_MATCH_PREFIX, f"/{method.service}", match.headers)
