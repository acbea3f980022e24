"""
Tests for RequestMirror compiled into the route policy L{ingress.routing.policies.mirror.Mirror}
(sigs.k8s.io/gateway-api v1.7.0, apis/v1/httproute_types.go HTTPRequestMirrorFilter: backendRef,
percent, fraction; "If the referent cannot be found, this BackendRef is invalid and must be dropped
from the Gateway ... the ResolvedRefs condition on the Route status is set to status False").
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ingress.model.parse import state_from_objects
from ingress.routing import RoutingTable, build
from ingress.routing.build_options import BuildOptions
from ingress.routing.incremental import IncrementalBuild
from ingress.routing.policies.mirror import Mirror
from ingress.routing.route import Route
from tests.unit.objects import PEM_SHAPED, Store, endpoints
from tests.unit.test_gateway_routing import PORTS, backend, gateway, gateway_class, gateway_table, grpc_route, http_route, parent_conditions, problems_of, services, to


def mirrored(*mirrors: dict[str, Any]) -> dict[str, Any]:
    return to(backend("v1"), filters=[{"type": "RequestMirror", "requestMirror": mirror} for mirror in mirrors])


def chosen(table: RoutingTable, host: str = "a.example", path: str = "/", scheme: bytes = b"http") -> Optional[Route]:
    """The route a request gets, as the proxy picks it (a slot with conditions chooses among its candidates)."""
    route = table.match(host, path)
    if route is not None and route.choices:
        route = route.choose(scheme, b"GET", {}.get, path.encode())
    return route


def mirror_of(table: RoutingTable, host: str = "a.example") -> Mirror:
    route = chosen(table, host)
    assert route is not None and route.policies is not None and route.policies.mirror is not None
    return route.policies.mirror


def test_a_mirror_copies_to_its_backend_and_the_rule_is_served() -> None:
    table = gateway_table(gateway("gw"), http_route("r", mirrored({"backendRef": backend("v2")})), *services("v1", "v2"))
    route = chosen(table.table)
    assert route is not None and route.upstream.key == "default/v1:80"
    (target,) = mirror_of(table.table).targets
    assert (target.upstream.key, target.upstream.endpoints, target.percent) == ("default/v2:80", (("10.0.0.2", 8080),), 100.0)
    assert parent_conditions(table, "r")[0]["ResolvedRefs"] == ("True", "ResolvedRefs")


def test_percent_and_fraction_give_the_share() -> None:
    """percent is an integer share; fraction numerator/denominator (denominator 100 when not given)."""
    table = gateway_table(
        gateway("gw"),
        http_route("r", mirrored({"backendRef": backend("v2"), "percent": 25}, {"backendRef": backend("v3"), "fraction": {"numerator": 1, "denominator": 8}},
                                 {"backendRef": backend("v2"), "fraction": {"numerator": 30}})),
        *services("v1", "v2", "v3"),
    )
    assert [t.percent for t in mirror_of(table.table).targets] == [25.0, 12.5, 30.0]


def test_a_share_of_zero_copies_nothing() -> None:
    table = gateway_table(gateway("gw"), http_route("r", mirrored({"backendRef": backend("v2"), "percent": 0})), *services("v1", "v2"))
    route = chosen(table.table)
    assert route is not None and route.policies is None


@pytest.mark.parametrize("mirror", [{"backendRef": backend("v2"), "percent": 101}, {"backendRef": backend("v2"), "fraction": {"numerator": 3, "denominator": 2}}])
def test_an_invalid_share_is_refused_with_the_route(mirror: dict[str, Any]) -> None:
    """The CRD's validation refuses these; a manifest that has one is skipped whole, reported."""
    state = state_from_objects([gateway_class(), gateway("gw"), http_route("r", mirrored(mirror))])
    assert not state.http_routes
    assert any("requestMirror" in problem.message for problem in state.problems)


def test_a_mirror_that_cannot_be_used_is_dropped_and_reported() -> None:
    """A missing Service, another namespace without a ReferenceGrant: the rule is served without that mirror."""
    table = gateway_table(
        gateway("gw"),
        http_route("r", mirrored({"backendRef": backend("missing")}, {"backendRef": backend("v2", namespace="elsewhere")}, {"backendRef": backend("v2")})),
        *services("v1", "v2"), *services("v2", namespace="elsewhere"),
    )
    assert [t.upstream.key for t in mirror_of(table.table).targets] == ["default/v2:80"]
    assert parent_conditions(table, "r")[0]["ResolvedRefs"] == ("False", "BackendNotFound")
    assert ("r", "BackendNotFound") in problems_of(table) and ("r", "RefNotPermitted") in problems_of(table)


def test_a_mirror_on_a_grpc_route_is_refused() -> None:
    """Copies of HTTP/2 exchanges are not made: the rule answers 503 (UNAVAILABLE to gRPC clients), reported."""
    listener = {"name": "https", "port": 443, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "cert"}]}}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "cert", "namespace": "default"},
              "stringData": PEM_SHAPED}
    table = gateway_table(gateway("gw", listener), grpc_route("g", mirrored({"backendRef": backend("v2")})), secret, *services("v1", "v2"))
    route = chosen(table.table, path="/svc/Method", scheme=b"https")
    assert route is not None and route.policies is not None and route.policies.deny is not None and route.policies.deny.status == 503
    assert ("g", "UnsupportedFilter") in problems_of(table, "GRPCRoute")


def test_an_endpoint_change_of_the_mirror_reaches_it_without_a_build() -> None:
    """The EndpointSlice-only path resolves mirrors' upstreams again, as backends' (and equals the full build)."""
    store = Store()
    for obj in (gateway_class(), gateway("gw"), http_route("r", mirrored({"backendRef": backend("v2")})), *services("v1", "v2")):
        store.put(obj)
    full = lambda state, generation: build(state, BuildOptions(reserved_ports=PORTS), generation=generation)  # noqa: E731
    incremental = IncrementalBuild(full)
    incremental(store.state(), 1)
    store.put(endpoints("v2", "10.0.0.9"))
    after = incremental(store.state(), 2)
    assert incremental.endpoint_updates == 1
    assert after == full(store.state(), 2)
    assert mirror_of(after.table).targets[0].upstream.endpoints == (("10.0.0.9", 8080),)
