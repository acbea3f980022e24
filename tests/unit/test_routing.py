"""
Tests for L{ingress.routing.build} and the lookups of L{ingress.routing.table}.

States are written as API dicts (through L{ingress.model.parse.state_from_objects}),
the way a manifests directory gives them, so each case reads like a manifest.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Optional

import pytest

from ingress.model import ClusterState, ObjectRef, Problem
from ingress.model.parse import state_from_objects
from ingress.routing import BuildReport, Built, HostRoutes, Route, RoutingTable, build, lookup, normalize_host
from ingress.routing.gateway.regex import RegexPaths
from ingress.routing.paths import prefix_key
from ingress.routing.selection import select_ingresses
from tests.unit.objects import T0, T1, T2, endpoints, ingress, ingress_class, path, problems, rule, service, table, target

# -- hosts


@pytest.mark.parametrize(
    "raw, expected",
    [("example.com", "example.com"), ("Example.COM", "example.com"), ("example.com.", "example.com"),
     ("example.com:8080", "example.com"), ("EXAMPLE.com.:443", "example.com"), ("[::1]:80", "[::1]"),
     ("[::1]", "[::1]"), ("10.0.0.1:80", "10.0.0.1")],
    ids=["plain", "case", "trailing-dot", "port", "case-dot-port", "ipv6-port", "ipv6", "ipv4-port"],
)
def test_normalize_host(raw: str, expected: str) -> None:
    assert normalize_host(raw) == expected


HOSTS_TABLE = table(
    ingress("exact", rule("Foo.Example.com.", path("/", "exact"))),
    ingress("wild", rule("*.example.com", path("/", "wild"))),
    ingress("any", rule(None, path("/", "any"))),
)


@pytest.mark.parametrize(
    "host, expected",
    [
        ("foo.example.com", "default/exact:80"),
        ("FOO.example.com.:8080", "default/exact:80"),
        ("bar.example.com", "default/wild:80"),
        ("Bar.Example.Com:80", "default/wild:80"),
        ("a.b.example.com", "default/any:80"),
        ("example.com", "default/any:80"),
        ("xexample.com", "default/any:80"),
        ("other.org", "default/any:80"),
        ("10.0.0.1:80", "default/any:80"),
        ("", "default/any:80"),
    ],
    ids=["exact", "exact-normalised", "wildcard", "wildcard-normalised", "wildcard-one-label-only",
         "wildcard-not-apex", "wildcard-not-suffix-match", "host-less", "ip-host", "no-host"],
)
def test_host_precedence(host: str, expected: str) -> None:
    assert target(HOSTS_TABLE.table, host) == expected


def test_no_host_less_rules_means_404_for_unknown_hosts() -> None:
    routes = table(ingress("exact", rule("foo.example.com", path("/"))))
    assert (target(routes.table, "foo.example.com"), target(routes.table, "bar.example.com")) == ("default/web:80", None)


# -- paths


@pytest.mark.parametrize(
    "p, expected",
    [("/", ""), ("", ""), ("/foo", "foo"), ("/foo/", "foo"), ("/a/b", "a/b"), ("/a//b/", "a/b"), ("//", "")],
    ids=["root", "empty", "one", "trailing-slash", "two", "empty-elements", "only-slashes"],
)
def test_prefix_key(p: str, expected: str) -> None:
    assert prefix_key(p) == expected


PATHS_TABLE = table(
    ingress(
        "paths",
        rule(
            "a.example",
            path("/", "root"),
            path("/aaa", "aaa"),
            path("/aaa/bbb/", "aaabbb"),
            path("/exact", "exact", kind="Exact"),
            path("/exact", "exactprefix"),
            path("/impl", "impl", kind="ImplementationSpecific"),
            path("/only-exact/", "onlyexact", kind="Exact"),
        ),
    ),
)


@pytest.mark.parametrize(
    "request_path, expected",
    [
        ("/", "root"),
        ("", "root"),
        ("/aaa", "aaa"),
        ("/aaa/", "aaa"),
        ("/aaa/ccc", "aaa"),
        ("/aaaccc", "root"),
        ("/AAA", "root"),
        ("/aaa/bbb", "aaabbb"),
        ("/aaa/bbb/", "aaabbb"),
        ("/aaa/bbb/ccc", "aaabbb"),
        ("/aaa/bbbx", "aaa"),
        ("/aaa//bbb", "aaabbb"),
        ("/exact", "exact"),
        ("/exact/", "exactprefix"),
        ("/exact/x", "exactprefix"),
        ("/EXACT", "root"),
        ("/impl", "impl"),
        ("/impl/x/y", "impl"),
        ("/implx", "root"),
        ("/only-exact/", "onlyexact"),
        ("/only-exact", "root"),
    ],
    ids=["root", "empty-path", "prefix", "prefix-trailing-slash", "prefix-child", "not-element-wise",
         "case-sensitive", "longest", "longest-trailing-slash", "longest-child", "longest-not-element-wise",
         "empty-elements", "exact-beats-prefix", "exact-whole-path-only", "prefix-of-exact-path",
         "exact-case-sensitive", "impl-as-prefix", "impl-child", "impl-element-wise", "exact-with-slash",
         "exact-slash-matters"],
)
def test_path_matching(request_path: str, expected: str) -> None:
    assert target(PATHS_TABLE.table, "a.example", request_path) == f"default/{expected}:80"


@pytest.mark.parametrize(
    "request_path, expected",
    [("/aaa", "default/web:80"), ("/aaa/", "default/web:80"), ("/aaa/bbb", "default/web:80"),
     ("/aaaccc", None), ("/", None)],
    ids=["without-slash", "with-slash", "child", "not-element-wise", "parent"],
)
def test_prefix_trailing_slash_is_ignored(request_path: str, expected: Optional[str]) -> None:
    routes = table(ingress("i", rule("a.example", path("/aaa/"))))
    assert target(routes.table, "a.example", request_path) == expected


def test_route_fields_are_as_written() -> None:
    routes = table(ingress("shop", rule("a.example", path("/Cart/", "cart", kind="ImplementationSpecific")), ns="prod"),
                   service("cart", ns="prod"))
    route = routes.table.match("a.example", "/Cart/x")
    assert route is not None
    assert (route.name, route.source, route.path, route.path_type) == (
        "prod/shop", ObjectRef("Ingress", "prod", "shop"), "/Cart/", "ImplementationSpecific")
    assert set(routes.table.hosts["a.example"].prefixes) == {"Cart"}


@pytest.mark.parametrize(
    "host, request_path, expected",
    [
        ("a.example", "/api/x", "default/api:80"),
        ("a.example", "/other", "default/fallback:80"),
        ("b.a.example", "/other", "default/fallback:80"),
        ("elsewhere", "/other", "default/fallback:80"),
        ("elsewhere", "/", "default/fallback:80"),
    ],
    ids=["matching-path", "host-with-rules-no-match", "wildcard-no-match", "host-less-no-match", "no-rule-at-all"],
)
def test_unmatched_requests_fall_to_the_default_backend(host: str, request_path: str, expected: str) -> None:
    routes = table(
        ingress("a", rule("a.example", path("/api", "api"))),
        ingress("w", rule("*.a.example", path("/api", "api"))),
        ingress("h", rule(None, path("/api", "api"))),
        ingress("d", default=("fallback", 80)),
    )
    assert target(routes.table, host, request_path) == expected


def test_exact_host_without_matching_path_does_not_use_host_less_rules() -> None:
    routes = table(ingress("a", rule("a.example", path("/api", "api"))), ingress("h", rule(None, path("/", "any"))))
    assert target(routes.table, "a.example", "/other") is None
    assert target(routes.table, "b.example", "/other") == "default/any:80"


def test_rule_without_paths_claims_no_host() -> None:
    routes = table(ingress("bare", {"host": "a.example"}), ingress("h", rule(None, path("/", "any"))))
    assert "a.example" not in routes.table.hosts
    assert target(routes.table, "a.example", "/") == "default/any:80"


# -- merging and conflicts


def test_rules_for_one_host_merge_across_ingresses() -> None:
    routes = table(
        ingress("one", rule("a.example", path("/one", "one"))),
        ingress("two", rule("a.example", path("/two", "two"), path("/one", "one-exact", kind="Exact"))),
        ingress("three", rule("A.EXAMPLE.", path("/three", "three"))),
    )
    assert [target(routes.table, "a.example", p) for p in ("/one/x", "/one", "/two", "/three")] == [
        "default/one:80", "default/one-exact:80", "default/two:80", "default/three:80"]
    assert list(routes.table.hosts) == ["a.example"]
    assert not [p for p in routes.report.problems if p.reason == "Conflict"]


CONFLICTS = [
    # (first ingress kwargs, second ingress kwargs, winner name)
    pytest.param(dict(name="old", created=T0), dict(name="new", created=T1), "old", id="older-wins"),
    pytest.param(dict(name="a", created=T1), dict(name="z", created=T0), "z", id="older-wins-over-name"),
    pytest.param(dict(name="b", created=T0), dict(name="a", created=T0), "a", id="same-age-name-decides"),
    pytest.param(dict(name="a", created=T0, ns="z"), dict(name="z", created=T0, ns="a"), "z",
                 id="same-age-namespace-decides"),
    pytest.param(dict(name="a", created=""), dict(name="b", created=T2), "b", id="no-timestamp-is-youngest"),
]


@pytest.mark.parametrize("first, second, winner", CONFLICTS)
@pytest.mark.parametrize(
    "first_path, second_path",
    [
        (path("/foo", "first"), path("/foo", "second")),
        (path("/foo", "first"), path("/foo/", "second")),
        (path("/foo", "first", kind="ImplementationSpecific"), path("/foo", "second")),
        (path("/foo", "first", kind="Exact"), path("/foo", "second", kind="Exact")),
    ],
    ids=["same-prefix", "same-prefix-key", "impl-and-prefix", "same-exact"],
)
@pytest.mark.parametrize("order", ["given", "reversed"])
def test_conflict_resolution(first: dict[str, Any], second: dict[str, Any], winner: str, first_path: dict[str, Any],
                             second_path: dict[str, Any], order: str) -> None:
    objects = [
        _with_rules(ingress(**first), rule("a.example", first_path)),
        _with_rules(ingress(**second), rule("a.example", second_path)),
    ]
    if order == "reversed":
        objects.reverse()
    routes = table(*objects)
    route = routes.table.match("a.example", "/foo")
    assert route is not None and route.name.endswith(f"/{winner}")
    assert route.upstream.key.endswith("/first:80" if winner == first["name"] else "/second:80")
    [conflict] = [p for p in routes.report.problems if p.reason == "Conflict"]
    assert conflict.ref.name != winner
    assert route.name in conflict.message


def _with_rules(obj: dict[str, Any], *rules: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["rules"] = list(rules)
    return obj


@pytest.mark.parametrize(
    "paths",
    [
        (path("/foo", "e", kind="Exact"), path("/foo", "p")),
        (path("/foo", "p"), path("/foo/bar", "q")),
    ],
    ids=["exact-and-prefix-coexist", "different-prefixes"],
)
def test_no_conflict(paths: tuple[dict[str, Any], ...]) -> None:
    routes = table(ingress("a", rule("a.example", paths[0])), ingress("b", rule("a.example", paths[1]), created=T1))
    assert not [p for p in routes.report.problems if p.reason == "Conflict"]


@pytest.mark.parametrize(
    "hosts",
    [("a.example", "a.example"), ("*.example", "*.example"), (None, None)],
    ids=["exact-host", "wildcard-host", "host-less"],
)
def test_conflict_within_one_ingress_first_rule_wins(hosts: tuple[Optional[str], Optional[str]]) -> None:
    routes = table(ingress("i", rule(hosts[0], path("/x", "first")), rule(hosts[1], path("/x/", "second"))))
    host = "b.example" if hosts[0] == "*.example" else "a.example"
    assert target(routes.table, host, "/x") == "default/first:80"
    assert [(p.reason, "same Ingress" in p.message) for p in routes.report.problems if p.reason == "Conflict"] == [
        ("Conflict", True)]


def test_same_path_on_different_host_kinds_does_not_conflict() -> None:
    routes = table(
        ingress("a", rule("a.example", path("/", "exact"))),
        ingress("b", rule("*.example", path("/", "wild"))),
        ingress("c", rule(None, path("/", "any"))),
    )
    assert not [p for p in routes.report.problems if p.reason == "Conflict"]


def test_result_does_not_depend_on_input_order() -> None:
    objects = [
        ingress("a", rule("h.example", path("/", "a"), path("/x", "a", kind="Exact")), created=T1),
        ingress("b", rule("h.example", path("/", "b")), rule("*.example", path("/y", "b")), created=T0),
        ingress("c", rule("*.example", path("/y/", "c")), rule(None, path("/", "c")), created=T1, default=("c", 80)),
        ingress("d", rule(None, path("/", "d")), ns="other", created=T0, default=("d", 80)),
        service("a"), service("b"), endpoints("b", "10.0.0.2", "10.0.0.1"), endpoints("b", "10.0.0.3", name="b-2"),
    ]
    expected = table(*objects)
    for order in itertools.permutations(objects[:4]):
        assert table(*order, *objects[4:]) == expected
    slices = state_from_objects(objects)
    reversed_slices = dataclasses.replace(slices, endpoint_slices=slices.endpoint_slices[::-1])
    assert build(reversed_slices) == expected
    assert expected.table.default_route is not None and expected.table.default_route.name == "other/d"


# -- default backend


@pytest.mark.parametrize(
    "ingresses, expected, losers",
    [
        ([], None, []),
        ([ingress("rules-only", rule(None, path("/x")))], None, []),
        ([ingress("d", default=("one", 80))], "default/one:80", []),
        ([ingress("new", default=("new", 80), created=T1), ingress("old", default=("old", 80), created=T0)],
         "default/old:80", ["default/new"]),
        ([ingress("b", default=("b", 80)), ingress("a", default=("a", 80)), ingress("c", default=("c", 80))],
         "default/a:80", ["default/b", "default/c"]),
        ([ingress("theirs", default=("theirs", 80), cls="nginx"), ingress("ours", default=("ours", 80), created=T2)],
         "default/ours:80", []),
    ],
    ids=["none", "no-default-backend", "one", "oldest-wins", "same-age-name-decides", "other-class-ignored"],
)
def test_default_backend_selection(ingresses: list[dict[str, Any]], expected: Optional[str],
                                   losers: list[str]) -> None:
    routes = table(*ingresses)
    assert (routes.table.default_route.upstream.key if routes.table.default_route else None) == expected
    conflicts = [p for p in routes.report.problems if p.reason == "Conflict"]
    assert [f"{p.ref.namespace}/{p.ref.name}" for p in conflicts] == losers
    assert all("spec.defaultBackend" in p.message for p in conflicts)


def test_default_route_fields() -> None:
    routes = table(ingress("d", default=("web", "http"), ns="prod"), service("web", ns="prod"),
                   endpoints("web", "10.0.0.1", ns="prod"))
    route = routes.table.default_route
    assert route is not None
    assert (route.name, route.source, route.path, route.path_type) == (
        "prod/d", ObjectRef("Ingress", "prod", "d"), "", "")
    assert route.upstream.endpoints == (("10.0.0.1", 8080),)
    assert routes.table.match("any.example", "/whatever") is route


# -- backends


@pytest.mark.parametrize(
    "objects, port, expected",
    [
        ([service(), endpoints("web", "10.0.0.1")], 80, (("10.0.0.1", 8080),)),
        ([service(), endpoints("web", "10.0.0.1")], "http", (("10.0.0.1", 8080),)),
        ([service("web", ("", 80)), endpoints("web", "10.0.0.1", ports=(("", 9000),))], 80, (("10.0.0.1", 9000),)),
        ([service("web", ("http", 80), ("admin", 81)),
          endpoints("web", "10.0.0.1", ports=(("admin", 9001), ("http", 8080)))], "admin", (("10.0.0.1", 9001),)),
        ([service("web", ("http", 80), ("admin", 81)),
          endpoints("web", "10.0.0.1", ports=(("admin", 9001), ("http", 8080)))], 81, (("10.0.0.1", 9001),)),
        ([service(), endpoints("web", "10.0.0.1", ports=(("other", 8080),))], 80, ()),
        ([service(), endpoints("web", "10.0.0.2", "10.0.0.1", not_ready=("10.0.0.3",))], 80,
         (("10.0.0.1", 8080), ("10.0.0.2", 8080))),
        ([service(), endpoints("web", not_ready=("10.0.0.3",))], 80, ()),
        ([service()], 80, ()),
        ([service(), endpoints("web", "10.0.0.2", "10.0.0.1"), endpoints("web", "10.0.0.3", "10.0.0.1", name="w2")],
         80, (("10.0.0.1", 8080), ("10.0.0.2", 8080), ("10.0.0.3", 8080))),
        ([service(), endpoints("web", "10.0.0.1", name="w1"),
          endpoints("web", "10.0.0.2", name="w2", ports=(("http", 8081),))], 80,
         (("10.0.0.1", 8080), ("10.0.0.2", 8081))),
        ([service(), endpoints("web", "10.0.0.1"), endpoints("web", "fd00::1", address_type="IPv6")], 80,
         (("10.0.0.1", 8080), ("fd00::1", 8080))),
        ([service(), endpoints("web", "db.example", address_type="FQDN")], 80, ()),
        ([service(), endpoints("web", "10.0.0.1", ns="other")], 80, ()),
        ([service(), endpoints("api", "10.0.0.1")], 80, ()),
    ],
    ids=["port-by-number", "port-by-name", "unnamed-port", "named-among-many", "number-among-many",
         "slice-port-name-mismatch", "ready-only-sorted", "none-ready", "no-slices", "multiple-slices-deduplicated",
         "per-slice-port-numbers", "ipv4-and-ipv6", "fqdn-ignored", "other-namespace-ignored",
         "other-service-ignored"],
)
def test_endpoints(objects: list[dict[str, Any]], port: Any, expected: tuple[tuple[str, int], ...]) -> None:
    routes = table(ingress("i", rule("a.example", path("/", "web", port))), *objects)
    route = routes.table.match("a.example", "/")
    assert route is not None
    assert (route.upstream.key, route.upstream.endpoints) == (f"default/web:{port}", expected)
    assert routes.report.problems == ()


def test_backend_is_resolved_in_the_ingress_namespace() -> None:
    routes = table(
        ingress("i", rule("a.example", path("/", "web")), ns="prod"),
        service("web", ns="prod"), endpoints("web", "10.0.0.1", ns="prod"),
        service("web", ns="dev"), endpoints("web", "10.0.0.9", ns="dev"),
    )
    assert routes.table.match("a.example", "/").upstream.endpoints == (("10.0.0.1", 8080),)


@pytest.mark.parametrize(
    "port, ports, expected, reason",
    [
        (443, (), ("api.example.com", 443), None),
        ("https", (("https", 8443),), ("api.example.com", 8443), None),
        ("https", (), (), "PortNotFound"),
    ],
    ids=["by-number", "by-name", "missing-name"],
)
def test_external_name(port: Any, ports: tuple[tuple[str, int], ...], expected: tuple[Any, ...],
                       reason: Optional[str]) -> None:
    svc = service("ext", type="ExternalName", externalName="API.example.com")
    svc["spec"]["ports"] = [{"name": n, "port": p} for n, p in ports]
    routes = table(ingress("i", rule("a.example", path("/", "ext", port))), svc, endpoints("ext", "10.0.0.1"))
    upstream = routes.table.match("a.example", "/").upstream
    assert upstream.targets == ((expected,) if expected else ())
    assert upstream.endpoints == ()
    assert [p.reason for p in routes.report.problems] == ([reason] if reason else [])


@pytest.mark.parametrize(
    "objects, port, reason, message",
    [
        ([], 80, "ServiceNotFound", 'Service "default/web" not found'),
        ([service(ns="other")], 80, "ServiceNotFound", 'Service "default/web" not found'),
        ([service()], 81, "PortNotFound", 'Service "default/web" has no port 81'),
        ([service()], "admin", "PortNotFound", 'Service "default/web" has no port admin'),
    ],
    ids=["missing-service", "service-in-other-namespace", "missing-port-number", "missing-port-name"],
)
def test_missing_backend_still_routes(objects: list[dict[str, Any]], port: Any, reason: str, message: str) -> None:
    routes = table(ingress("i", rule("a.example", path("/", "web", port))), *objects,
                   endpoints("web", "10.0.0.1"), ingress("d", default=("fallback", 80)))
    route = routes.table.match("a.example", "/")
    assert route is not None and route.name == "default/i"
    assert (route.upstream.key, route.upstream.targets) == (f"default/web:{port}", ())
    assert [(p.ref, p.reason, p.message) for p in routes.report.problems if p.ref.name == "i"] == [
        (ObjectRef("Ingress", "default", "i"), reason, message)]


def test_resource_backend_is_reported_and_routes_nowhere() -> None:
    obj = ingress("i", rule("a.example", path("/", "web")))
    obj["spec"]["rules"][0]["http"]["paths"][0]["backend"] = {"resource": {"kind": "Bucket", "name": "b"}}
    routes = table(obj)
    assert routes.table.match("a.example", "/").upstream.targets == ()
    assert problems(routes) == [("default/i", "UnsupportedBackend")]


def test_one_upstream_object_per_backend() -> None:
    routes = table(
        ingress("a", rule("a.example", path("/", "web"), path("/x", "web", kind="Exact"))),
        ingress("b", rule("b.example", path("/", "web")), default=("web", 80)),
        ingress("c", rule("c.example", path("/", "web", "http"))),
        service(), endpoints("web", "10.0.0.1"),
    )
    shared = routes.table.match("a.example", "/").upstream
    assert routes.table.match("a.example", "/x").upstream is shared
    assert routes.table.match("b.example", "/").upstream is shared
    assert routes.table.default_route.upstream is shared
    by_name = routes.table.match("c.example", "/").upstream
    assert (by_name.key, by_name.endpoints) == ("default/web:http", shared.endpoints)


def test_one_problem_per_ingress_and_missing_backend() -> None:
    routes = table(ingress("a", rule("a.example", path("/", "gone"), path("/x", "gone"))),
                   ingress("b", rule("b.example", path("/", "gone"))))
    assert problems(routes) == [("default/a", "ServiceNotFound"), ("default/b", "ServiceNotFound")]


# -- IngressClass selection


@pytest.mark.parametrize(
    "classes, spec_class, annotation, ours",
    [
        ([], "twingress", None, True),
        ([ingress_class("twingress")], "twingress", None, True),
        ([ingress_class("edge")], "edge", None, True),
        ([ingress_class("nginx", "k8s.io/ingress-nginx")], "nginx", None, False),
        ([], "nginx", None, False),
        ([ingress_class("twingress", "k8s.io/ingress-nginx")], "twingress", None, False),
        ([], None, None, False),
        ([ingress_class("edge")], None, None, False),
        ([ingress_class("edge", default=True)], None, None, True),
        ([ingress_class("nginx", "k8s.io/ingress-nginx", default=True)], None, None, False),
        ([ingress_class("edge", default=True)], "nginx", None, False),
        ([], None, "twingress", True),
        ([ingress_class("edge", default=True)], None, "nginx", False),
        ([], "nginx", "twingress", False),
        ([ingress_class("edge", default=True)], None, "", True),
    ],
    ids=["class-name-without-object", "class-name-with-our-object", "our-controller-other-name",
         "other-controller", "other-name-without-object", "our-name-but-other-controller", "class-less",
         "class-less-our-class-not-default", "class-less-our-default", "class-less-other-default",
         "other-class-despite-our-default", "legacy-annotation", "legacy-other-class-despite-our-default",
         "spec-beats-legacy-annotation", "empty-legacy-annotation-is-class-less"],
)
def test_ingress_class_selection(classes: list[dict[str, Any]], spec_class: Optional[str],
                                 annotation: Optional[str], ours: bool) -> None:
    annotations = {} if annotation is None else {"kubernetes.io/ingress.class": annotation}
    obj = ingress("i", rule("a.example", path("/", "missing")), cls=spec_class, annotations=annotations,
                  default=("missing", 80))
    routes = table(*classes, obj)
    assert (target(routes.table, "a.example") is not None) == ours
    assert (routes.table.default_route is not None) == ours
    assert bool(routes.report.problems) == ours  # the missing Service of someone else's Ingress is not our problem
    assert bool(select_ingresses(state_from_objects([*classes, obj]))) == ours


@pytest.mark.parametrize(
    "kwargs, ours",
    [
        ({"class_name": "edge"}, ["by-name"]),
        ({"controller_name": "example.com/other"}, ["by-controller", "by-default-name", "class-less"]),
        ({}, ["by-default-name"]),
    ],
    ids=["custom-class-name", "custom-controller", "defaults"],
)
def test_class_and_controller_names_are_parameters(kwargs: dict[str, str], ours: list[str]) -> None:
    objects = [
        ingress_class("other", "example.com/other", default=True),
        ingress("by-name", rule("a.example", path("/")), cls="edge"),
        ingress("by-controller", rule("b.example", path("/")), cls="other"),
        ingress("by-default-name", rule("c.example", path("/")), cls="twingress"),
        ingress("class-less", rule("d.example", path("/")), cls=None),
    ]
    routes = table(*objects, service(), **kwargs)
    assert sorted(routes.table.match(host, "/").source.name for host in routes.table.hosts) == sorted(ours)


def test_select_ingresses_oldest_first() -> None:
    state = state_from_objects([ingress(name, created=created, default=("w", 80))
                                for name, created in (("c", T1), ("b", T0), ("a", T2))])
    assert [i.meta.name for i in select_ingresses(state)] == ["b", "c", "a"]


# -- problems, invalid objects and the table as a whole


def test_invalid_objects_do_not_stop_the_rest() -> None:
    routes = table(
        ingress("bad-host", rule("bad_host", path("/"))),
        ingress("bad-path", rule("a.example", path("relative"))),
        {**service("broken"), "spec": {"ports": [{"port": 0}]}},
        endpoints("web", "999.0.0.1", name="broken-slice"),
        ingress("good", rule("a.example", path("/", "web"))),
        service(), endpoints("web", "10.0.0.1"),
    )
    assert routes.table.match("a.example", "/").upstream.endpoints == (("10.0.0.1", 8080),)
    assert problems(routes) == [
        ("default/broken-slice", "Invalid"), ("default/bad-host", "Invalid"), ("default/bad-path", "Invalid"),
        ("default/broken", "Invalid")]


def test_state_problems_come_first_then_sorted_build_problems() -> None:
    state_problem = Problem(ObjectRef("Service", "z", "z"), "Invalid", "from the source")
    state = state_from_objects([
        ingress("b", rule("a.example", path("/", "gone")), created=T1),
        ingress("a", rule("a.example", path("/", "web")), created=T0),
        ingress("c", rule("c.example", path("/", "gone"))),
    ])
    routes = build(dataclasses.replace(state, problems=(state_problem,)))
    assert routes.report.problems[0] == state_problem
    assert [(p.ref.name, p.reason) for p in routes.report.problems[1:]] == [
        ("a", "ServiceNotFound"), ("b", "Conflict"), ("c", "ServiceNotFound")]


def test_generation_and_empty_state() -> None:
    routes = build(ClusterState(), generation=7)
    assert routes == Built(RoutingTable(generation=7), BuildReport())
    assert routes.table.match("a.example", "/") is None


def test_table_dumps_to_json() -> None:
    routes = table(ingress("i", rule("a.example", path("/api", "web")), default=("web", 80)), service(),
                   endpoints("web", "10.0.0.1"))
    dump = routes.to_json()
    assert dump["hosts"]["a.example"]["prefix"]["/api"] == {
        "route": "default/i", "upstream": "default/web:80", "endpoints": ["10.0.0.1:8080"]}
    assert dump["defaultBackend"] == {"route": "default/i", "upstream": "default/web:80"}


def test_a_host_s_paths_with_a_match_of_their_own_are_asked_for_their_route() -> None:
    """
    lookup.match reads a plain HostRoutes' fields itself (compiled, with the request path); a subclass
    that overrides match (Gateway API regular-expression paths) is asked instead, never bypassed.
    """
    route = table(ingress("web", rule("a.example", path("/")))).table.match("a.example", "/")
    assert route is not None

    @dataclasses.dataclass(frozen=True, slots=True)
    class OnlyPathX(HostRoutes):
        def match(self, path: str) -> Optional[Route]:
            return route if path == "/x" else None

    assert HostRoutes.plain and not RegexPaths.plain and not OnlyPathX.plain
    own = RoutingTable(hosts={"b.example": OnlyPathX(prefixes={"": route})})
    assert own.match("b.example", "/x") is route and lookup.match(own, "b.example", "/x") is route
    assert own.match("b.example", "/y") is None  # its prefix "/" is its own match's to use, and it does not
