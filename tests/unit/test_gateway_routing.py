"""
Tests for L{ingress.routing.gateway}: HTTPRoutes on our Gateways compiled into the routing table.

Each case restates a fact of the Gateway API specification (sigs.k8s.io/gateway-api v1.7.0,
apis/v1/httproute_types.go and gateway_types.go) or a case of its conformance suite
(conformance/tests/*.go, named after the test's ShortName); the request side is asked the way
the proxy asks it (L{serve}).
"""

from __future__ import annotations

import pathlib
from typing import Any, Optional

import pytest
import yaml

from ingress.model import ObjectRef
from ingress.model.parse import state_from_objects
from ingress.routing import RoutingTable, build
from ingress.routing.build_options import BuildOptions
from ingress.routing.gateway.listeners import covers, intersect_hostnames
from ingress.routing.gateway.regex import RegexPaths
from ingress.routing.policies.limits import Deadlines, Limits
from ingress.routing.policies.matching import query_params
from ingress.routing.policies.pathreplace import PathReplace
from ingress.routing.policies.redirect import GatewayRedirect
from ingress.routing.report import Built
from ingress.routing.route import Route
from ingress.routing.table import HostRoutes
from tests.unit.objects import PEM_SHAPED, T0, T1, T2, endpoints, ingress, ingress_class, path, rule, service

GW = "gateway.networking.k8s.io/v1"
PORTS = {80: "http", 443: "https"}


def gateway_class(name: str = "twingress", controller: str = "twingress.io/gateway-controller") -> dict[str, Any]:
    return {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": name}, "spec": {"controllerName": controller}}


def listener(name: str = "http", port: int = 80, protocol: str = "HTTP", hostname: Optional[str] = None, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "port": port, "protocol": protocol, **extra}
    if hostname is not None:
        found["hostname"] = hostname
    return found


def gateway(name: str = "gw", *listeners: dict[str, Any], namespace: str = "default", class_name: str = "twingress", generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {"gatewayClassName": class_name, "listeners": list(listeners) or [listener()]},
    }


def http_route(name: str, *rules: dict[str, Any], hostnames: tuple[str, ...] = (), parents: tuple[dict[str, Any], ...] = ({"name": "gw"},),
               namespace: str = "default", created: str = T0, generation: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentRefs": list(parents), "rules": list(rules)}
    if hostnames:
        spec["hostnames"] = list(hostnames)
    return {
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created, "generation": generation},
        "spec": spec,
    }


def backend(name: str, port: int = 80, weight: Optional[int] = None, **extra: Any) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "port": port, **extra}
    if weight is not None:
        ref["weight"] = weight
    return ref


def to(*backends: dict[str, Any], matches: Optional[list[dict[str, Any]]] = None, filters: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    found: dict[str, Any] = {"backendRefs": list(backends)}
    if matches is not None:
        found["matches"] = matches
    if filters is not None:
        found["filters"] = filters
    return found


def prefix(value: str, **extra: Any) -> dict[str, Any]:
    return {"path": {"type": "PathPrefix", "value": value}, **extra}


def exact(value: str, **extra: Any) -> dict[str, Any]:
    return {"path": {"type": "Exact", "value": value}, **extra}


def headers(**values: str) -> list[dict[str, str]]:
    return [{"name": name.replace("_", "-"), "value": value} for name, value in values.items()]


def services(*names: str, namespace: str = "default") -> list[dict[str, Any]]:
    """A Service with a ready endpoint for each name (port 80 → the pod's 8080)."""
    objects: list[dict[str, Any]] = []
    for number, name in enumerate(names, start=1):
        objects += [service(name, ns=namespace), endpoints(name, f"10.0.0.{number}", ns=namespace)]
    return objects


def gateway_table(*objects: dict[str, Any], ports: dict[int, str] = PORTS) -> Built:
    return build(state_from_objects([gateway_class(), *objects]), BuildOptions(reserved_ports=ports))


def serve(table: RoutingTable, host: str, target: str, *, method: bytes = b"GET", fields: Optional[dict[str, str]] = None,
          scheme: bytes = b"http", draw: Optional[int] = None) -> str:
    """What the proxy does with a request: the upstream's Service ("default/svc:80"), a status ("404", "500"), or a redirect."""
    path = target.partition("?")[0]
    route: Optional[Route] = table.match(host, path)
    if route is None:
        return "404"
    if route.choices:
        lower = {k.lower().encode(): v.encode() for k, v in (fields or {}).items()}
        route = route.choose(scheme, method, lower.get, target.encode())
        if route is None:
            return "404"
    policies = route.policies
    if policies is not None and policies.deny is not None:
        return str(policies.deny.status)
    if policies is not None and policies.redirect is not None:
        return f"{policies.redirect.code} {policies.redirect.location_for(scheme, host, target.encode(), path).decode()}"
    if policies is not None and policies.backends is not None:
        picked = policies.backends.pick(draw if draw is not None else 0)
        if picked is None:
            return str(policies.backends.unusable_status)
        route = picked
    return route.upstream.key


def problems_of(table: Built, kind: str = "HTTPRoute") -> set[tuple[str, str]]:
    return {(p.ref.name, p.reason) for p in table.report.problems if p.ref.kind == kind}


def parent_conditions(table: Built, name: str, namespace: str = "default", kind: str = "HTTPRoute") -> list[dict[str, tuple[str, str]]]:
    assert table.report.gateway_status is not None
    return [{c.type: (c.status, c.reason) for c in found} for _, found in table.report.gateway_status.routes.get(ObjectRef(kind, namespace, name), ())]


# -- attachment and hostnames


def test_a_route_on_a_gateway_of_ours_is_served() -> None:
    """HTTPRouteSimpleSameNamespace: a route in the Gateway's namespace gets its backend."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1"))), *services("v1"))
    assert serve(table.table, "anything.example", "/") == "default/v1:80"
    assert parent_conditions(table, "r") == [{"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}]


def test_another_controllers_gateway_is_not_ours() -> None:
    table = build(state_from_objects([gateway_class(controller="example.com/other"), gateway(), http_route("r", to(backend("v1"))), *services("v1")]), BuildOptions(reserved_ports=PORTS))
    assert serve(table.table, "a.example", "/") == "404"
    assert table.report.gateway_status is None


@pytest.mark.parametrize(
    "listener_host, route_hosts, expected",
    [
        ("", (), ("",)),
        ("", ("first.com", "sub.first.com"), ("first.com", "sub.first.com")),
        ("very.specific.com", (), ("very.specific.com",)),
        ("very.specific.com", ("very.specific.com",), ("very.specific.com",)),
        ("very.specific.com", ("*.specific.com",), ("very.specific.com",)),
        ("*.wildcard.io", ("foo.wildcard.io", "bar.wildcard.io", "foo.bar.wildcard.io"), ("foo.wildcard.io", "bar.wildcard.io", "foo.bar.wildcard.io")),
        ("*.example.com", ("test.example.com", "test.example.net"), ("test.example.com",)),
        ("*.example.com", ("*.foo.example.com",), ("*.foo.example.com",)),
        ("*.example.com", ("*.com",), ("*.example.com",)),
        ("*.example.com", ("example.com",), ()),
        ("very.specific.com", ("non.matching.com", "*.nonmatchingwildcard.io"), ()),
    ],
)
def test_hostname_intersection(listener_host: str, route_hosts: tuple[str, ...], expected: tuple[str, ...]) -> None:
    """HTTPRouteHostnameIntersection and the Hostnames field of HTTPRouteSpec and Listener."""
    assert intersect_hostnames(listener_host, route_hosts) == expected


def test_a_wildcard_covers_any_number_of_labels_but_not_its_suffix() -> None:
    """Listener.Hostname: "*.example.com" matches test.example.com and foo.test.example.com, not example.com."""
    assert covers("*.example.com", "test.example.com") and covers("*.example.com", "foo.test.example.com")
    assert not covers("*.example.com", "example.com") and not covers("*.example.com", "xexample.com")


def test_listener_hostname_matching() -> None:
    """HTTPRouteListenerHostnameMatching: four listeners, routes pinned by sectionName; exact beats wildcard."""
    table = gateway_table(
        gateway("gw", listener("l1", hostname="bar.com"), listener("l2", hostname="foo.bar.com"), listener("l3", hostname="*.bar.com"), listener("l4", hostname="*.foo.com")),
        http_route("v1", to(backend("v1")), parents=({"name": "gw", "sectionName": "l1"},)),
        http_route("v2", to(backend("v2")), parents=({"name": "gw", "sectionName": "l2"},)),
        http_route("v3", to(backend("v3")), parents=({"name": "gw", "sectionName": "l3"}, {"name": "gw", "sectionName": "l4"})),
        *services("v1", "v2", "v3"),
    )
    assert serve(table.table, "bar.com", "/") == "default/v1:80"
    assert serve(table.table, "foo.bar.com", "/") == "default/v2:80"
    assert serve(table.table, "baz.bar.com", "/") == "default/v3:80"
    assert serve(table.table, "multiple.prefixes.bar.com", "/") == "default/v3:80"
    assert serve(table.table, "multiple.prefixes.foo.com", "/") == "default/v3:80"
    assert serve(table.table, "foo.com", "/") == "404"
    assert serve(table.table, "no.matching.host", "/") == "404"


def test_a_route_whose_hostnames_intersect_no_listener_is_not_accepted() -> None:
    """HTTPRouteHostnameIntersection: Accepted=False NoMatchingListenerHostname, not counted in attachedRoutes."""
    table = gateway_table(gateway("gw", listener(hostname="very.specific.com")), http_route("r", to(backend("v1")), hostnames=("non.matching.com",)), *services("v1"))
    assert parent_conditions(table, "r")[0]["Accepted"] == ("False", "NoMatchingListenerHostname")
    assert serve(table.table, "non.matching.com", "/") == "404"
    assert table.report.gateway_status is not None
    assert table.report.gateway_status.gateways[ObjectRef("Gateway", "default", "gw")].listeners[0].attached_routes == 0


@pytest.mark.parametrize(
    "parent, route_namespace, reason",
    [
        ({"name": "gw", "sectionName": "http1"}, "default", "NoMatchingParent"),  # HTTPRouteInvalidParentRefNotMatchingSectionName
        ({"name": "gw", "namespace": "default"}, "web", "NotAllowedByListeners"),  # HTTPRouteInvalidCrossNamespaceParentRef
    ],
)
def test_parent_refs_that_do_not_attach(parent: dict[str, Any], route_namespace: str, reason: str) -> None:
    table = gateway_table(gateway(), http_route("r", to(backend("v1")), parents=(parent,), namespace=route_namespace), *services("v1", namespace=route_namespace))
    assert parent_conditions(table, "r", route_namespace)[0]["Accepted"] == ("False", reason)
    assert serve(table.table, "a.example", "/") == "404"


def test_allowed_routes_from_all_and_from_a_selector() -> None:
    """HTTPRouteCrossNamespace: a listener that allows a labelled namespace (or every namespace) admits its routes."""
    selector = {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}}}}
    table = gateway_table(
        gateway("gw", listener("sel", hostname="sel.example", allowedRoutes=selector), listener("all", hostname="all.example", allowedRoutes={"namespaces": {"from": "All"}})),
        http_route("r", to(backend("v1")), namespace="web", parents=({"name": "gw", "namespace": "default"},)),
        http_route("r", to(backend("v1")), namespace="other", parents=({"name": "gw", "namespace": "default"},)),
        *services("v1", namespace="web"), *services("v1", namespace="other"),
    )
    assert serve(table.table, "sel.example", "/") == "web/v1:80"
    assert serve(table.table, "all.example", "/") == "other/v1:80"  # same age: "other/r" before "web/r" alphabetically
    assert parent_conditions(table, "r", "other")[0]["Accepted"] == ("True", "Accepted")


def test_unsupported_protocol_and_route_kinds() -> None:
    """GatewayListenerUnsupportedProtocol and GatewayInvalidRouteKind."""
    table = gateway_table(gateway("gw", listener("bad", protocol="INVALID"), listener("http", allowedRoutes={"kinds": [{"kind": "InvalidRoute"}, {"kind": "HTTPRoute"}]})))
    assert table.report.gateway_status is not None
    status = table.report.gateway_status.gateways[ObjectRef("Gateway", "default", "gw")]
    bad, http = ({c.type: (c.status, c.reason) for c in s.conditions} for s in status.listeners)
    assert bad["Accepted"] == ("False", "UnsupportedProtocol") and status.listeners[0].supported_kinds == ()
    assert http["ResolvedRefs"] == ("False", "InvalidRouteKinds") and status.listeners[1].supported_kinds == ("HTTPRoute",)
    assert {c.type: (c.status, c.reason) for c in status.conditions}["Accepted"] == ("True", "ListenersNotValid")


# -- matching and precedence


def test_exact_path_matching() -> None:
    """HTTPRouteExactPathMatching: Exact /one and /two; /, /one/example, /two/ and /Two are 404."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1"), matches=[exact("/one")]), to(backend("v2"), matches=[exact("/two")])), *services("v1", "v2"))
    assert serve(table.table, "h", "/one") == "default/v1:80" and serve(table.table, "h", "/two") == "default/v2:80"
    assert [serve(table.table, "h", p) for p in ("/", "/one/example", "/two/", "/Two")] == ["404"] * 4


def test_prefix_matching_is_element_wise() -> None:
    """HTTPRouteMatching: prefix /v2 matches /v2, /v2/ and /v2/example; /v2example and /foo/v2/example fall to /."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1"), matches=[prefix("/")]), to(backend("v2"), matches=[prefix("/v2")])), *services("v1", "v2"))
    assert [serve(table.table, "h", p) for p in ("/v2", "/v2/", "/v2/example")] == ["default/v2:80"] * 3
    assert [serve(table.table, "h", p) for p in ("/v2example", "/foo/v2/example")] == ["default/v1:80"] * 2


def test_path_match_order() -> None:
    """HTTPRoutePathMatchOrder: Exact beats every prefix, a longer prefix beats a shorter one."""
    table = gateway_table(
        gateway(),
        http_route("r",
                   to(backend("v1"), matches=[prefix("/match/")]),
                   to(backend("v2"), matches=[prefix("/match/prefix/one")]),
                   to(backend("v3"), matches=[exact("/match/exact/one")]),
                   to(backend("v4"), matches=[prefix("/match/prefix")])),
        *services("v1", "v2", "v3", "v4"),
    )
    assert serve(table.table, "h", "/match/exact/one") == "default/v3:80"
    assert serve(table.table, "h", "/match/prefix/one/any") == "default/v2:80"
    assert serve(table.table, "h", "/match/prefix/any") == "default/v4:80"
    assert serve(table.table, "h", "/match/any") == "default/v1:80"


def test_header_matching_ands_and_more_headers_win() -> None:
    """HTTPRouteHeaderMatching: a match's headers are ANDed, names case-insensitively; the match with more headers wins."""
    table = gateway_table(
        gateway(),
        http_route("r",
                   to(backend("v1"), matches=[{"headers": headers(version="one")}]),
                   to(backend("v2"), matches=[{"headers": headers(version="two")}]),
                   to(backend("v3"), matches=[{"headers": headers(version="two", color="orange")}])),
        *services("v1", "v2", "v3"),
    )
    assert serve(table.table, "h", "/", fields={"Version": "one"}) == "default/v1:80"
    assert serve(table.table, "h", "/", fields={"version": "two"}) == "default/v2:80"
    assert serve(table.table, "h", "/", fields={"version": "two", "COLOR": "orange"}) == "default/v3:80"
    assert serve(table.table, "h", "/", fields={"version": "three"}) == "404"
    assert serve(table.table, "h", "/", fields={"version": "One"}) == "404"  # values are exact


def test_matching_across_routes() -> None:
    """HTTPRouteMatchingAcrossRoutes: a header match of a younger route beats a bare prefix of an older one."""
    table = gateway_table(
        gateway(),
        http_route("route1", to(backend("v1"), matches=[prefix("/")]), created=T0),
        http_route("route2", to(backend("v2"), matches=[{"headers": headers(version="two")}]), created=T1),
        *services("v1", "v2"),
    )
    assert serve(table.table, "h", "/", fields={"version": "two"}) == "default/v2:80"
    assert serve(table.table, "h", "/") == "default/v1:80"


def test_ties_go_to_the_oldest_route_then_namespace_name_then_rule_order() -> None:
    """HTTPRouteRule precedence: oldest creationTimestamp, then "{namespace}/{name}", then the first rule."""
    table = gateway_table(
        gateway("gw", listener(allowedRoutes={"namespaces": {"from": "All"}})),
        http_route("b", to(backend("v2")), to(backend("v3")), created=T1),
        http_route("a", to(backend("v1")), created=T1, namespace="x", parents=({"name": "gw", "namespace": "default"},)),
        http_route("old", to(backend("v4"), matches=[prefix("/old")]), created=T0),
        *services("v2", "v3", "v4"), *services("v1", namespace="x"),
    )
    assert serve(table.table, "h", "/") == "default/v2:80"  # default/b before x/a alphabetically, its first rule
    assert serve(table.table, "h", "/old/x") == "default/v4:80"


def test_rule_order_with_a_missing_backend_is_500_not_the_next_rule() -> None:
    """HTTPRouteRuleOrder: the first matching rule serves, even when its backend does not exist (500)."""
    table = gateway_table(gateway(), http_route("r", to(backend("missing")), to(backend("v1"))), *services("v1"))
    assert serve(table.table, "h", "/") == "500"
    assert parent_conditions(table, "r")[0]["ResolvedRefs"] == ("False", "BackendNotFound")


def test_method_and_query_matches() -> None:
    """Extended HTTPRouteMethodMatching and HTTPRouteQueryParamMatching: a method beats a bare path; query values are exact."""
    table = gateway_table(
        gateway(),
        http_route("r",
                   to(backend("v1")),
                   to(backend("v2"), matches=[{"method": "POST"}]),
                   to(backend("v3"), matches=[{"queryParams": [{"name": "animal", "value": "whale"}]}])),
        *services("v1", "v2", "v3"),
    )
    assert serve(table.table, "h", "/", method=b"POST") == "default/v2:80"
    assert serve(table.table, "h", "/?animal=whale") == "default/v3:80"
    assert serve(table.table, "h", "/?animal=dolphin") == "default/v1:80"
    assert query_params(b"/p?a=1&a=2&b=%20x") == {b"a": b"1", b"b": b" x"}


# -- RegularExpression paths (precedence implementation-specific: ingress/routing/gateway/regex.py)


def regex(value: str, **extra: Any) -> dict[str, Any]:
    return {"path": {"type": "RegularExpression", "value": value}, **extra}


def test_a_regular_expression_matches_the_whole_path_case_sensitively() -> None:
    """apis/v1/httproute_types.go PathMatchRegularExpression: "matches the given regular expression with case sensitivity"; twingress: re.fullmatch."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1"), matches=[regex(r"/v[0-9]+/items")])), *services("v1"))
    assert serve(table.table, "h", "/v2/items") == "default/v1:80"
    assert serve(table.table, "h", "/v12/items?x=1") == "default/v1:80"  # the query is not part of the path
    assert [serve(table.table, "h", p) for p in ("/v2/items/x", "/x/v2/items", "/V2/items", "/vx/items")] == ["404"] * 4


def test_exact_then_regular_expressions_longest_first_then_prefixes() -> None:
    """HTTPRouteRule.Matches: "the precedence of RegularExpression path matches are implementation-specific"; ours is Exact, regex, PathPrefix."""
    table = gateway_table(
        gateway(),
        http_route("r",
                   to(backend("v1"), matches=[prefix("/")]),
                   to(backend("v2"), matches=[prefix("/api/v2/deep")]),
                   to(backend("v3"), matches=[regex("/api/.*")]),
                   to(backend("v4"), matches=[regex("/api/v[0-9]+/.*")]),
                   to(backend("v5"), matches=[exact("/api/v2/status")])),
        *services("v1", "v2", "v3", "v4", "v5"),
    )
    assert serve(table.table, "h", "/api/v2/status") == "default/v5:80"  # Exact first
    assert serve(table.table, "h", "/api/v2/deep/x") == "default/v4:80"  # any pattern before the longest prefix
    assert serve(table.table, "h", "/api/v2/users") == "default/v4:80"  # the longer pattern first
    assert serve(table.table, "h", "/api/users") == "default/v3:80"
    assert serve(table.table, "h", "/other") == "default/v1:80"
    assert isinstance(table.table.match("h", "/other"), Route)


def test_regular_expression_candidates_keep_the_other_precedence_rules() -> None:
    """Among patterns of one length: a method, then more headers, then the oldest route; a condition that fails falls to the next kind."""
    table = gateway_table(
        gateway(),
        http_route("old", to(backend("v1"), matches=[regex("/r/.*")]), created=T0),
        http_route("young", to(backend("v2"), matches=[regex("/r/.*", method="POST"), regex("/q/.*", headers=headers(x="1"))]),
                   to(backend("v3"), matches=[regex("/r/.*", headers=headers(x="1"))]), created=T1),
        http_route("prefixes", to(backend("v4"), matches=[prefix("/q"), exact("/e", headers=headers(x="2"))]), created=T0),
        *services("v1", "v2", "v3", "v4"),
    )
    assert serve(table.table, "h", "/r/a", method=b"POST") == "default/v2:80"  # a method beats headers and age
    assert serve(table.table, "h", "/r/a", fields={"x": "1"}) == "default/v3:80"  # a header beats age
    assert serve(table.table, "h", "/r/a") == "default/v1:80"  # then the oldest route
    assert serve(table.table, "h", "/q/a", fields={"X": "1"}) == "default/v2:80"
    assert serve(table.table, "h", "/q/a") == "default/v4:80"  # the pattern's header is missing: the prefix serves
    assert serve(table.table, "h", "/e", fields={"x": "2"}) == "default/v4:80" and serve(table.table, "h", "/e") == "404"


def test_an_invalid_regular_expression_is_reported_and_only_that_match_is_not_served() -> None:
    """An invalid pattern (Python's re dialect) is an UnsupportedValue problem; the route's other matches are served."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1"), matches=[regex("/a/(unclosed"), regex(r"/b/\p{L}+"), prefix("/c")])), *services("v1"))
    assert problems_of(table) == {("r", "UnsupportedValue")}
    assert sum("RegularExpression" in p.message for p in table.report.problems) == 2
    assert serve(table.table, "h", "/c/x") == "default/v1:80" and serve(table.table, "h", "/a/(unclosed") == "404"
    assert parent_conditions(table, "r")[0]["Accepted"] == ("True", "Accepted")


def test_hosts_without_regular_expressions_keep_the_plain_lookup() -> None:
    """Regex paths cost nothing where there are none: only a host with a pattern gets the joining lookup."""
    table = gateway_table(
        gateway(),
        http_route("plain", to(backend("v1"), matches=[prefix("/")]), hostnames=("plain.example",)),
        http_route("patterns", to(backend("v1"), matches=[regex("/x.*")]), hostnames=("regex.example",)),
        *services("v1"),
    )
    assert type(table.table.host_routes("plain.example")) is HostRoutes
    assert type(table.table.host_routes("regex.example")) is RegexPaths
    assert table.to_json()["hosts"]["regex.example"]["regex"][0]["pattern"] == "/x.*"


# -- timeouts (HTTPRouteTimeouts)


def timed(rule: dict[str, Any], **values: str) -> dict[str, Any]:
    return {**rule, "timeouts": {name.replace("backend_request", "backendRequest"): value for name, value in values.items()}}


def chosen(table: RoutingTable, host: str, path: str) -> Route:
    """The route a plain GET over HTTP is served by, before a weighted pick (what the proxy reads the limits of)."""
    route = table.match(host, path)
    route = route.choose(b"http", b"GET", {}.get, path.encode()) if route is not None and route.choices else route
    assert route is not None
    return route


def test_timeouts_become_the_route_s_deadlines() -> None:
    """
    apis/v1/httproute_types.go HTTPRouteTimeouts: request bounds the whole request, backendRequest one
    request to a backend, both Gateway API durations; "0s" SHOULD disable a timeout completely.
    """
    table = gateway_table(
        gateway(),
        http_route("r",
                   timed(to(backend("v1"), matches=[prefix("/both")]), request="10s", backend_request="500ms"),
                   timed(to(backend("v1"), matches=[prefix("/request")]), request="1h"),
                   timed(to(backend("v1"), matches=[prefix("/backend")]), request="0s", backend_request="2s"),
                   timed(to(backend("v1"), matches=[prefix("/off")]), request="0s", backend_request="0s"),
                   to(backend("v1"), matches=[prefix("/none")])),
        *services("v1"),
    )

    def limits(path: str) -> Optional[Limits]:
        route = chosen(table.table, "h", path)
        assert serve(table.table, "h", path) == "default/v1:80"
        return route.policies.limits if route.policies is not None else None

    assert limits("/both") == Limits(deadlines=Deadlines(request=10.0, backend=0.5))
    assert limits("/request") == Limits(deadlines=Deadlines(request=3600.0))
    assert limits("/backend") == Limits(deadlines=Deadlines(backend=2.0))
    assert limits("/off") is None and limits("/none") is None  # no policy at all: the proxy's plain path
    assert Deadlines(request=10.0, backend=0.5).longest == 10.0 and Deadlines(backend=2.0).longest == 2.0
    shown = table.to_json()["anyHost"]["prefix"]["/both"]["choices"][0]["policies"]["limits"]
    assert shown["deadlines"] == {"request": 10.0, "backendRequest": 0.5}


def test_timeouts_of_a_weighted_rule_apply_to_each_backend() -> None:
    """The deadlines are the rule's, whichever backendRef a request is sent to (the proxy reads them before the pick)."""
    rule = timed(to(backend("v1", weight=1), backend("v2", weight=1), matches=[prefix("/")]), request="3s")
    table = gateway_table(gateway(), http_route("r", rule), *services("v1", "v2"))
    route = chosen(table.table, "h", "/")
    assert route.policies is not None and route.policies.backends is not None
    assert route.policies.limits is not None and route.policies.limits.deadlines == Deadlines(request=3.0)
    assert {serve(table.table, "h", "/", draw=d) for d in (0, 1)} == {"default/v1:80", "default/v2:80"}


def test_a_route_on_an_https_listener_only_is_not_served_over_http() -> None:
    """A route serves only the listeners it attaches to: HTTPS-only on the TLS listener, 404 on plain HTTP."""
    tls = [{"name": "cert"}]
    table = gateway_table(
        gateway("gw", listener("https", port=443, protocol="HTTPS", hostname="secure.example", tls={"certificateRefs": tls})),
        http_route("r", to(backend("v1"))),
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "cert", "namespace": "default"},
         "stringData": PEM_SHAPED},
        *services("v1"),
    )
    assert serve(table.table, "secure.example", "/", scheme=b"https") == "default/v1:80"
    assert serve(table.table, "secure.example", "/", scheme=b"http") == "404"
    assert table.table.certificates.secret_for("secure.example") == ("default", "cert")


def test_an_https_listener_without_its_secret_is_not_programmed() -> None:
    """GatewayInvalidTLSConfiguration and GatewaySecretMissingReferenceGrant: ResolvedRefs=False with the reason."""
    table = gateway_table(
        gateway("gw",
                listener("missing", port=443, protocol="HTTPS", hostname="a.example", tls={"certificateRefs": [{"name": "nope"}]}),
                listener("other-ns", port=443, protocol="HTTPS", hostname="b.example", tls={"certificateRefs": [{"name": "c", "namespace": "certs"}]})),
    )
    assert table.report.gateway_status is not None
    missing, other = (
        {c.type: (c.status, c.reason) for c in s.conditions} for s in table.report.gateway_status.gateways[ObjectRef("Gateway", "default", "gw")].listeners
    )
    assert missing["ResolvedRefs"] == ("False", "InvalidCertificateRef") and missing["Programmed"][0] == "False"
    assert other["ResolvedRefs"] == ("False", "RefNotPermitted")


# -- backends


def test_weights_split_the_requests() -> None:
    """HTTPRouteWeight: 70/30/0; a weight-0 backend gets nothing."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1", weight=70), backend("v2", weight=30), backend("v3", weight=0))), *services("v1", "v2", "v3"))
    served = [serve(table.table, "h", "/", draw=draw) for draw in range(100)]
    assert served.count("default/v1:80") == 70 and served.count("default/v2:80") == 30


def test_an_invalid_backend_keeps_its_share_as_500() -> None:
    """HTTPRouteRule.BackendRefs: two equal backends, one invalid: half the requests get 500."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1"), backend("nope", kind="Other", group="example.com"))), *services("v1"))
    served = [serve(table.table, "h", "/", draw=draw) for draw in range(2)]
    assert sorted(served) == ["500", "default/v1:80"]
    assert parent_conditions(table, "r")[0]["ResolvedRefs"] == ("False", "InvalidKind")


def test_no_backend_refs_is_500() -> None:
    """HTTPRouteNoBackendRefs: a rule without backendRefs answers 500; the other rule forwards."""
    table = gateway_table(gateway(), http_route("r", {"matches": [prefix("/none")]}, to(backend("v1"))), *services("v1"))
    assert serve(table.table, "h", "/none") == "500" and serve(table.table, "h", "/") == "default/v1:80"


def test_cross_namespace_backends_need_a_reference_grant() -> None:
    """HTTPRouteInvalidCrossNamespaceBackendRef, HTTPRouteReferenceGrant, HTTPRoutePartiallyInvalidViaInvalidReferenceGrant."""
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant", "metadata": {"name": "g", "namespace": "app"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "default"}], "to": [{"group": "", "kind": "Service", "name": "v1"}]},
    }
    rules = (to(backend("v1", namespace="app"), matches=[prefix("/v1")]), to(backend("v2", namespace="app"), matches=[prefix("/v2")]))
    objects = [gateway(), http_route("r", *rules), *services("v1", "v2", namespace="app")]
    without = gateway_table(*objects)
    assert serve(without.table, "h", "/v1") == "500" and parent_conditions(without, "r")[0]["ResolvedRefs"] == ("False", "RefNotPermitted")
    granted = gateway_table(*objects, grant)
    assert serve(granted.table, "h", "/v1") == "app/v1:80" and serve(granted.table, "h", "/v2") == "500"


# -- filters


def test_request_header_modifier_sets_adds_and_removes() -> None:
    """HTTPRouteRequestHeaderModifier: set replaces, add appends, remove drops, names case-insensitively."""
    modifier = {"set": [{"name": "X-Header-Set", "value": "set-overwrites-values"}], "add": [{"name": "X-Header-Add", "value": "header-add"}], "remove": ["X-Header-Remove"]}
    table = gateway_table(gateway(), http_route("r", to(backend("v1"), filters=[{"type": "RequestHeaderModifier", "requestHeaderModifier": modifier}])), *services("v1"))
    slot = table.table.match("h", "/")
    route = slot.choose(b"http", b"GET", {}.get, b"/") if slot is not None else None  # attached to the HTTP listener only
    assert route is not None and route.policies is not None and route.policies.request_headers is not None
    changes = route.policies.request_headers
    block = b"x-header-set: client\r\nx-header-add: original-val-add\r\nx-header-remove: gone\r\nother: kept\r\n"
    assert changes.drop.sub(b"", block) + changes.lines == (
        b"x-header-add: original-val-add\r\nother: kept\r\nX-Header-Set: set-overwrites-values\r\nX-Header-Add: header-add\r\n"
    )


def test_redirect_hostname_and_status() -> None:
    """HTTPRouteRedirectHostAndStatus: hostname redirect is 302 by default; statusCode 301 is honoured; the path is kept."""
    table = gateway_table(
        gateway(),
        http_route("r",
                   to(matches=[prefix("/hostname-redirect")], filters=[{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org"}}]),
                   to(matches=[prefix("/host-and-status")], filters=[{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org", "statusCode": 301}}])),
    )
    assert serve(table.table, "h", "/hostname-redirect/x?q=1") == "302 http://example.org/hostname-redirect/x?q=1"
    assert serve(table.table, "h", "/host-and-status") == "301 http://example.org/host-and-status"


@pytest.mark.parametrize(
    "redirect, scheme, expected",
    [
        (GatewayRedirect(302, scheme="https"), b"http", b"https://h/p?q"),  # a scheme: its well-known port, left out
        (GatewayRedirect(302, port=8443), b"http", b"http://h:8443/p?q"),
        (GatewayRedirect(302, http_port=8080), b"http", b"http://h:8080/p?q"),  # no scheme, no port: the listener's port
        (GatewayRedirect(302, scheme="http", http_port=8080), b"https", b"http://h/p?q"),
        (GatewayRedirect(302, path=PathReplace("ReplaceFullPath", "/new")), b"http", b"http://h/new?q"),  # HTTPRoutePathRedirect
        (GatewayRedirect(302, path=PathReplace("ReplacePrefixMatch", "/v2", "/p")), b"http", b"http://h/v2?q"),
    ],
)
def test_redirect_ports(redirect: GatewayRedirect, scheme: bytes, expected: bytes) -> None:
    """HTTPRequestRedirectFilter.Port: the spec's defaults, and no well-known port in the Location."""
    assert redirect.location_for(scheme, "h", b"/p?q", "/p") == expected


@pytest.mark.parametrize(
    "path, matched, value, expected",
    [
        ("/foo/bar", "/foo", "/xyz", "/xyz/bar"), ("/foo/bar", "/foo", "/xyz/", "/xyz/bar"), ("/foo/bar", "/foo/", "/xyz", "/xyz/bar"),
        ("/foo", "/foo", "/xyz", "/xyz"), ("/foo/", "/foo", "/xyz", "/xyz/"), ("/foo/bar", "/foo", "", "/bar"),
        ("/foo/", "/foo", "", "/"), ("/foo", "/foo", "", "/"), ("/foo/", "/foo", "/", "/"), ("/foo", "/foo", "/", "/"),
    ],
)
def test_replace_prefix_match(path: str, matched: str, value: str, expected: str) -> None:
    """HTTPPathModifier's table of ReplacePrefixMatch results."""
    assert PathReplace("ReplacePrefixMatch", value, matched).path_for(path) == expected


def test_an_unsupported_filter_closes_its_rule() -> None:
    """A rule is never served without what it asks for: an unsupported filter answers 500, reported."""
    table = gateway_table(gateway(), http_route("r", to(backend("v1"), filters=[{"type": "ExtensionRef", "extensionRef": {"group": "x", "kind": "Auth", "name": "a"}}])), *services("v1"))
    assert serve(table.table, "h", "/") == "500"
    assert ("r", "UnsupportedFilter") in problems_of(table)


# -- living with Ingresses


def test_a_host_an_ingress_serves_stays_the_ingress_s() -> None:
    table = gateway_table(
        gateway(),
        http_route("r", to(backend("v1")), hostnames=("shared.example", "gateway.example")),
        ingress_class("twingress"),
        ingress("ing", rule("shared.example", path("/", "ingress-svc"))),
        *services("v1", "ingress-svc"),
    )
    assert serve(table.table, "shared.example", "/") == "default/ingress-svc:80"
    assert serve(table.table, "gateway.example", "/") == "default/v1:80"
    assert ("r", "HostServedByIngress") in problems_of(table)


def test_a_class_of_ours_is_accepted_before_any_gateway_names_it() -> None:
    """GatewayClass status: ours is Accepted at its generation with no Gateway or route in the snapshot; another controller's is not judged."""
    ours, theirs = gateway_class("ours"), gateway_class("theirs", controller="example.com/other")
    ours["metadata"]["generation"] = 4
    table = build(state_from_objects([ours, theirs]))
    assert table.report.gateway_status is not None
    assert [(c.type, c.status, c.observed_generation) for c in table.report.gateway_status.classes["ours"]] == [("Accepted", "True", 4)]
    assert "theirs" not in table.report.gateway_status.classes


def test_ingress_only_tables_are_unchanged() -> None:
    """Nothing of the Gateway API in the state: the table is what it was (no status, no deep wildcards)."""
    table = build(state_from_objects([ingress_class("twingress"), ingress("ing", rule("*.example.com", path("/", "svc"))), *services("svc")]))
    assert table.report.gateway_status is None and table.table.deep_wildcards == {}
    assert table.table.match("a.b.example.com", "/") is None  # Ingress wildcards cover one label
    assert T2  # the fixtures' timestamps are ordered


def test_the_gateway_example_means_what_its_comments_say() -> None:
    """examples/gateway (make run-gateway): its Gateway's listener is twingress's --http port 8080."""
    directory = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gateway"
    objects = [obj for name in ("services.yaml", "gateway.yaml", "routes.yaml") for obj in yaml.safe_load_all((directory / name).read_text())]
    table = build(state_from_objects(objects), BuildOptions(reserved_ports={8080: "http"}))
    assert table.report.problems == ()
    assert serve(table.table, "store.example.com", "/", draw=0) == "store/store-v1:80"
    assert serve(table.table, "store.example.com", "/", draw=95) == "store/store-v2:80"
    assert serve(table.table, "store.example.com", "/", fields={"env": "canary"}) == "store/store-v2:80"
    assert serve(table.table, "www.example.com", "/") == "site/site:80"
    assert serve(table.table, "example.com", "/about") == "301 http://www.example.com:8080/about"
    shop = table.table.match("store.example.com", "/shop/cart")
    chosen = shop.choose(b"http", b"GET", {}.get, b"/shop/cart") if shop is not None else None
    assert chosen is not None and chosen.policies is not None and chosen.policies.rewrite is not None
    assert chosen.policies.rewrite.target_for("/shop/cart", b"") == b"/cart"


# -- GRPCRoute


def grpc_route(name: str, *rules: dict[str, Any], hostnames: tuple[str, ...] = ()) -> dict[str, Any]:
    found = http_route(name, *rules, hostnames=hostnames)
    found["kind"] = "GRPCRoute"
    return found


def method(service: str = "", name: str = "", **extra: Any) -> dict[str, Any]:
    return {"method": {k: v for k, v in (("service", service), ("method", name)) if v}, **extra}


def test_grpc_routes_need_http2_on_the_listener() -> None:
    """GRPCRoute on an HTTP listener means h2c with prior knowledge: without --http2-cleartext it is not allowed there."""
    objects = (gateway(), grpc_route("rpc", to(backend("v1"))), *services("v1"))
    without = gateway_table(*objects)
    assert parent_conditions(without, "rpc", kind="GRPCRoute")[0]["Accepted"] == ("False", "NotAllowedByListeners")
    assert serve(without.table, "h", "/test.Echo/Unary") == "404"
    with_h2c = build(state_from_objects([gateway_class(), *objects]), BuildOptions(reserved_ports=PORTS, cleartext_http2=True))
    assert parent_conditions(with_h2c, "rpc", kind="GRPCRoute")[0]["Accepted"] == ("True", "Accepted")
    slot = with_h2c.table.match("h", "/test.Echo/Unary")
    route = slot.choose(b"http", b"POST", {}.get, b"/test.Echo/Unary") if slot is not None else None
    assert route is not None and route.policies is not None and route.policies.backend_http2  # h2c to the endpoints


def test_grpc_exact_method_matching() -> None:
    """GRPCExactMethodMatching and GRPCRouteHeaderMatching: service and method, a service alone, more headers first."""
    table = build(state_from_objects([
        gateway_class(), gateway(),
        grpc_route("rpc",
                   to(backend("v1"), matches=[method("gateway_api_conformance.echo_basic.grpcecho.GrpcEcho", "Echo")]),
                   to(backend("v2"), matches=[method("gateway_api_conformance.echo_basic.grpcecho.GrpcEcho", "EchoTwo")]),
                   to(backend("v3"), matches=[method("other.Service")]),
                   to(backend("v2"), matches=[method("other.Service", headers=headers(version="two"))])),
        *services("v1", "v2", "v3"),
    ]), BuildOptions(reserved_ports=PORTS, cleartext_http2=True))
    service = "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"
    assert serve(table.table, "h", f"{service}/Echo", method=b"POST") == "default/v1:80"
    assert serve(table.table, "h", f"{service}/EchoTwo", method=b"POST") == "default/v2:80"
    assert serve(table.table, "h", f"{service}/EchoThree", method=b"POST") == "404"  # gRPC clients read 404 as UNIMPLEMENTED
    assert serve(table.table, "h", "/other.Service/Any", method=b"POST") == "default/v3:80"
    assert serve(table.table, "h", "/other.Service/Any", method=b"POST", fields={"version": "two"}) == "default/v2:80"


def test_grpc_unusable_backends_answer_503_and_unsupported_matches_are_reported() -> None:
    """GRPCRoute's BackendRefs: UNAVAILABLE (HTTP 503 to gRPC clients); a method without a service is not served."""
    table = build(state_from_objects([
        gateway_class(), gateway(),
        grpc_route("rpc", to(backend("missing"), matches=[method("a.B")]), to(backend("v1"), matches=[method(name="Only")])),
        *services("v1"),
    ]), BuildOptions(reserved_ports=PORTS, cleartext_http2=True))
    assert serve(table.table, "h", "/a.B/C", method=b"POST") == "503"
    assert ("rpc", "UnsupportedValue") in problems_of(table, "GRPCRoute")
    assert serve(table.table, "h", "/x.Y/Only", method=b"POST") == "404"


# -- TLSRoute, TCPRoute, UDPRoute


def l4_route(kind: str, name: str, *backends: dict[str, Any], hostnames: tuple[str, ...] = (), section: str = "") -> dict[str, Any]:
    parent = {"name": "gw", **({"sectionName": section} if section else {})}
    spec: dict[str, Any] = {"parentRefs": [parent], "rules": [{"backendRefs": list(backends)}]}
    if hostnames:
        spec["hostnames"] = list(hostnames)
    return {"apiVersion": GW, "kind": kind, "metadata": {"name": name, "namespace": "default", "creationTimestamp": T0}, "spec": spec}


def passthrough_listener(hostname: Optional[str] = "*.example.com", mode: str = "Passthrough") -> dict[str, Any]:
    return listener("tls", port=443, protocol="TLS", hostname=hostname, tls={"mode": mode})


def listener_conditions(table: Built, index: int = 0) -> dict[str, tuple[str, str]]:
    assert table.report.gateway_status is not None
    found = table.report.gateway_status.gateways[ObjectRef("Gateway", "default", "gw")].listeners[index]
    return {c.type: (c.status, c.reason) for c in found.conditions}


def test_tls_routes_pass_tls_through_by_sni() -> None:
    """TLSRouteSimpleSameNamespace and TLSRouteInvalidNoMatchingListenerHostname: a Passthrough listener, SNI names."""
    table = gateway_table(
        gateway("gw", passthrough_listener()),
        l4_route("TLSRoute", "tls", backend("tcp-backend", 8443), hostnames=("abc.example.com",)),
        l4_route("TLSRoute", "elsewhere", backend("tcp-backend", 8443), hostnames=("abc.other.com",)),
        service("tcp-backend", ("tls", 8443)), endpoints("tcp-backend", "10.0.0.9", ports=(("tls", 8443),)),
    )
    assert table.table.passthrough_for("abc.example.com") is not None
    assert table.table.passthrough_for("abc.example.com").key == "default/tcp-backend:8443"  # type: ignore[union-attr]
    assert parent_conditions(table, "tls", kind="TLSRoute")[0] == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    assert parent_conditions(table, "elsewhere", kind="TLSRoute")[0]["Accepted"] == ("False", "NoMatchingListenerHostname")
    assert table.table.passthrough_for("abc.other.com") is None


@pytest.mark.parametrize(("listener_host", "route_hosts", "wildcard_backend"), [
    ("abc.example.com", ("abc.example.com", "*.example.com"), None),
    ("*.example.com", ("abc.example.com", "*.com"), "default/v2:443"),
    ("*.com", ("abc.example.com", "*.example.com"), "default/v2:443"),
    (None, ("abc.example.com", "*.com"), "default/v2:443"),
], ids=["exact-listener", "more-specific-listener", "less-specific-listener", "no-listener-hostname"])
def test_tls_route_hostnames_intersect_with_the_listener_s(listener_host: Optional[str], route_hosts: tuple[str, str], wildcard_backend: Optional[str]) -> None:
    """
    TLSRouteHostnameIntersection: the exact host reaches backend 1, "other.example.com" reaches the
    wildcard route's backend 2 (a Gateway wildcard covers any number of labels: "*.com" covers it),
    a name outside the intersection reaches neither.
    """
    table = gateway_table(
        gateway("gw", passthrough_listener(listener_host)),
        l4_route("TLSRoute", "exact", backend("v1", 443), hostnames=route_hosts[:1]),
        l4_route("TLSRoute", "wild", backend("v2", 443), hostnames=route_hosts[1:]),
        service("v1", ("tls", 443)), endpoints("v1", "10.0.0.1", ports=(("tls", 443),)),
        service("v2", ("tls", 443)), endpoints("v2", "10.0.0.2", ports=(("tls", 443),)),
    )
    found = table.table.passthrough_for("abc.example.com")
    assert found is not None and found.key == "default/v1:443"
    other = table.table.passthrough_for("other.example.com")
    assert (other.key if other is not None else None) == wildcard_backend
    assert table.table.passthrough_for("non.matching.org") is None


def test_tls_routes_attach_to_tls_listeners_only() -> None:
    """TLSRouteInvalidNoMatchingListener."""
    on_http = gateway_table(gateway(), l4_route("TLSRoute", "tls", backend("v1"), hostnames=("a.example.com",)), *services("v1"))
    assert parent_conditions(on_http, "tls", kind="TLSRoute")[0]["Accepted"] == ("False", "NotAllowedByListeners")


def test_a_tls_listener_that_terminates_relays_the_bytes_inside_to_tcp_routes() -> None:
    """
    TLSRouteTerminateSimpleSameNamespace and TLSRouteListenerTerminateSupportedKinds: a TLS listener
    with tls.mode Terminate supports TLSRoutes; their hosts' TLS is terminated with the listener's
    certificate and the stream goes to the backend; a wildcard covers any number of labels; beside it
    a Passthrough listener on the same port (TLSRouteMixedTerminationSameNamespace) keeps its hosts.
    """
    terminate = listener("terminate", port=443, protocol="TLS", hostname="*.example.com", tls={"mode": "Terminate", "certificateRefs": [{"name": "cert"}]})
    table = gateway_table(
        gateway("gw", terminate, listener("pass", port=443, protocol="TLS", hostname="abc.other.com", tls={"mode": "Passthrough"})),
        l4_route("TLSRoute", "term", backend("v1", 3000), hostnames=("*.example.com",), section="terminate"),
        l4_route("TLSRoute", "pass", backend("v2", 8443), hostnames=("abc.other.com",), section="pass"),
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "cert", "namespace": "default"},
         "stringData": PEM_SHAPED},
        service("v1", ("tcp", 3000)), endpoints("v1", "10.0.0.1", ports=(("tcp", 3000),)),
        service("v2", ("tls", 8443)), endpoints("v2", "10.0.0.2", ports=(("tls", 8443),)),
    )
    assert listener_conditions(table, 0) == {
        "Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed"), "ResolvedRefs": ("True", "ResolvedRefs"), "Conflicted": ("False", "NoConflicts"),
    }
    assert table.report.gateway_status is not None
    assert table.report.gateway_status.gateways[ObjectRef("Gateway", "default", "gw")].listeners[0].supported_kinds == ("TLSRoute",)
    found = table.table.terminated_for("a.b.example.com")
    assert found is not None and found.key == "default/v1:3000"
    assert table.table.passthrough_for("a.b.example.com") is None and table.table.terminated_for("abc.other.com") is None
    assert table.table.certificates.secret_for("abc.example.com") == ("default", "cert")
    passed = table.table.passthrough_for("abc.other.com")
    assert passed is not None and passed.key == "default/v2:8443"


def test_a_tls_listener_that_terminates_needs_a_certificate() -> None:
    table = gateway_table(gateway("gw", passthrough_listener(mode="Terminate")))
    assert listener_conditions(table)["ResolvedRefs"] == ("False", "InvalidCertificateRef")
    assert listener_conditions(table)["Programmed"] == ("False", "Invalid")


def test_an_ingress_passthrough_host_stays_the_ingress_s() -> None:
    table = gateway_table(
        gateway("gw", passthrough_listener()),
        l4_route("TLSRoute", "tls", backend("v1"), hostnames=("abc.example.com",)),
        ingress_class("twingress"),
        ingress("pass", rule("abc.example.com", path("/", "v2")), annotations={"nginx.ingress.kubernetes.io/ssl-passthrough": "true"}),
        *services("v1", "v2"),
    )
    assert table.table.passthrough_for("abc.example.com").key == "default/v2:80"  # type: ignore[union-attr]
    assert ("tls", "HostServedByIngress") in problems_of(table, "TLSRoute")


def test_tcp_and_udp_routes_are_stream_listeners() -> None:
    """TCPRoute and UDPRoute: a stream listener on the Gateway listener's port, to the route's backend."""
    table = gateway_table(
        gateway("gw", listener("tcp", port=9000, protocol="TCP"), listener("udp", port=9001, protocol="UDP"), listener("busy", port=80, protocol="TCP")),
        l4_route("TCPRoute", "db", backend("v1", 5432), section="tcp"),
        l4_route("UDPRoute", "dns", backend("v2", 53), section="udp"),
        service("v1", ("pg", 5432)), endpoints("v1", "10.0.0.1", ports=(("pg", 5432),)),
        service("v2", ("dns", 53)), endpoints("v2", "10.0.0.2", ports=(("dns", 53),)),
    )
    assert table.table.streams[("TCP", 9000)].upstream.key == "default/v1:5432"
    assert table.table.streams[("UDP", 9001)].upstream.key == "default/v2:53/UDP"
    assert table.table.streams[("TCP", 9000)].source == ObjectRef("TCPRoute", "default", "db")
    assert listener_conditions(table, 2)["Accepted"] == ("False", "PortUnavailable")  # twingress's own HTTP port


def test_a_stream_ingress_keeps_its_port_and_a_missing_backend_opens_nothing() -> None:
    stream_ingress = {
        "apiVersion": "twingress.io/v1alpha1", "kind": "StreamIngress", "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"protocol": "TCP", "listen": 9000, "upstream": {"service": "v2", "port": 80}},
    }
    table = gateway_table(
        gateway("gw", listener("tcp", port=9000, protocol="TCP"), listener("other", port=9002, protocol="TCP")),
        l4_route("TCPRoute", "db", backend("v1"), section="tcp"),
        l4_route("TCPRoute", "nowhere", backend("missing"), section="other"),
        stream_ingress, *services("v1", "v2"),
    )
    assert table.table.streams[("TCP", 9000)].source.kind == "StreamIngress"
    assert ("db", "PortConflict") in problems_of(table, "TCPRoute")
    assert ("TCP", 9002) not in table.table.streams
    assert parent_conditions(table, "nowhere", kind="TCPRoute")[0]["ResolvedRefs"] == ("False", "BackendNotFound")


@pytest.mark.parametrize("name", ["certificate", ""], ids=["GatewaySecretReferenceGrantSpecific", "GatewaySecretReferenceGrantAllInNamespace"])
def test_a_reference_grant_lets_a_listener_use_another_namespace_s_secret(name: str) -> None:
    """A grant to the Secret by name, or to every Secret of its namespace: ResolvedRefs and Programmed."""
    to = {"group": "", "kind": "Secret", **({"name": name} if name else {})}
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant", "metadata": {"name": "g", "namespace": "certs"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "default"}], "to": [to]},
    }
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "certificate", "namespace": "certs"},
              "stringData": PEM_SHAPED}
    refs = {"certificateRefs": [{"name": "certificate", "namespace": "certs"}]}
    table = gateway_table(gateway("gw", listener("https", port=443, protocol="HTTPS", hostname="a.example", tls=refs)), grant, secret)
    found = listener_conditions(table)
    assert found["ResolvedRefs"] == ("True", "ResolvedRefs") and found["Programmed"] == ("True", "Programmed")
    assert table.table.certificates.secret_for("a.example") == ("certs", "certificate")


def test_listeners_added_and_removed() -> None:
    """GatewayModifyListeners: a route naming a listener that does not exist attaches once it is added, and leaves with it."""
    route = http_route("r", to(backend("v1")), parents=({"name": "gw", "sectionName": "two"},))
    before = gateway_table(gateway("gw", listener("one", hostname="one.example")), route, *services("v1"))
    assert parent_conditions(before, "r")[0]["Accepted"] == ("False", "NoMatchingParent")
    added = gateway_table(gateway("gw", listener("one", hostname="one.example"), listener("two", hostname="two.example")), route, *services("v1"))
    assert parent_conditions(added, "r")[0]["Accepted"] == ("True", "Accepted")
    assert serve(added.table, "two.example", "/") == "default/v1:80" and serve(added.table, "one.example", "/") == "404"
    assert added.report.gateway_status is not None
    assert [s.attached_routes for s in added.report.gateway_status.gateways[ObjectRef("Gateway", "default", "gw")].listeners] == [0, 1]
