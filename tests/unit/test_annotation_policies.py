"""
Tests for the ingress-nginx annotations compiled into route policies (L{ingress.routing.annotations}).

Each case cites the ingress-nginx documentation it checks: the annotations page
(docs/user-guide/nginx-configuration/annotations.md, by section), the rewrite
example (docs/examples/rewrite/README.md) and "Ingress Path Matching"
(docs/user-guide/ingress-path-matching.md).
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ingress.model import Problem
from ingress.routing import RoutingTable
from ingress.routing.policies.limits import UNLIMITED
from ingress.routing.report import Built
from ingress.routing.route import Policies
from tests.unit.objects import T0, T1, ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"


def _one(annotations: dict[str, str], *paths: dict[str, Any], host: str = "a.test", **build: Any) -> Built:
    return table(ingress("web", rule(host, *(paths or (path("/"),))), annotations=annotations), **build)


def _policies(annotations: dict[str, str], request_path: str = "/", **build: Any) -> Optional[Policies]:
    route = _one(annotations, **build).table.match("a.test", request_path)
    assert route is not None
    return route.policies


def _annotation_problems(routes: Built) -> list[Problem]:
    """The table's problems less ServiceNotFound (these tables have no Services: only routing is checked)."""
    return [p for p in routes.report.problems if p.reason != "ServiceNotFound"]


def _reasons(routes: RoutingTable) -> list[str]:
    return [p.reason for p in _annotation_problems(routes)]


# -- reading: prefixes, precedence, what is reported


def test_a_route_without_annotations_has_no_policies() -> None:
    assert _policies({}) is None
    assert _policies({"example.com/owner": "team-a"}) is None


def test_both_prefixes_are_read_and_twingress_io_wins() -> None:
    assert _policies({NGINX + "permanent-redirect": "https://a.example/"}).redirect.location == "https://a.example/"  # type: ignore[union-attr]
    both = {NGINX + "permanent-redirect": "https://nginx.example/", "twingress.io/permanent-redirect": "https://ours.example/"}
    assert _policies(both).redirect.location == "https://ours.example/"  # type: ignore[union-attr]


def test_nginx_annotations_false_ignores_the_nginx_prefix_entirely() -> None:
    routes = _one({NGINX + "permanent-redirect": "https://a.example/", NGINX + "configuration-snippet": "x"}, nginx_annotations=False)
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is None and _reasons(routes) == []


def test_an_unsupported_nginx_key_is_reported_and_changes_nothing() -> None:
    routes = _one({NGINX + "proxy-buffering": "on"})
    assert _reasons(routes) == ["UnsupportedAnnotation"]
    assert NGINX + "proxy-buffering" in _annotation_problems(routes)[0].message
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is None


def test_a_snippet_is_never_executed_and_says_so() -> None:
    """Issue 13: snippets (CVE-2025-1974's attack surface) get a Warning saying they are not run."""
    routes = _one({NGINX + "configuration-snippet": "more_set_headers 'X: y';", NGINX + "server-snippet": "return 200;"})
    assert _reasons(routes) == ["UnsupportedAnnotation", "UnsupportedAnnotation"]
    assert all("never executed" in p.message for p in _annotation_problems(routes))


@pytest.mark.parametrize(("key", "value"), [("auth-tls-verify-client", "maybe"), ("auth-url", "not a url"), ("auth-method", "FETCH")])
def test_an_unreadable_access_guard_closes_the_route(key: str, value: str) -> None:
    """Fail closed where it guards access: the route answers 503 rather than serving unguarded."""
    routes = _one({NGINX + key: value})
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.deny is not None
    assert route.policies.deny.status == 503
    assert _reasons(routes) == ["InvalidAnnotation"] and "503" in _annotation_problems(routes)[0].message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ssl-redirect", "yes"),  # Go's strconv.ParseBool: 1 t T TRUE true True 0 f F FALSE false False
        ("use-regex", "on"),
        ("proxy-read-timeout", "60s"),  # "unitless and in seconds" (Custom timeouts)
        ("proxy-connect-timeout", "0"),
        ("proxy-body-size", "8 m"),  # nginx sizes: 1024, 8k, 10m, 1g
        ("permanent-redirect", "ftp://a.example/"),
        ("permanent-redirect", "https://a.example/$request_uri"),  # no nginx variables (URLIsValidRegex)
        ("permanent-redirect-code", "310"),
        ("temporal-redirect-code", "308"),  # temporal codes are 300-307
        ("rewrite-target", "/a b"),
        ("app-root", "app"),
        ("upstream-vhost", "a.example/x"),
        ("x-forwarded-prefix", "/a\r\nX-Evil: 1"),
    ],
)
def test_an_invalid_value_leaves_that_ingress_out_and_the_rest_in(key: str, value: str) -> None:
    """Issue 13: an invalid value skips the Ingress's paths with a Warning, never the table, never a silent default."""
    routes = table(
        ingress("bad", rule("a.test", path("/")), annotations={NGINX + key: value}, created=T0),
        ingress("good", rule("b.test", path("/")), created=T1),
    )
    assert routes.table.match("a.test", "/") is None and routes.table.match("b.test", "/") is not None
    [problem] = _annotation_problems(routes)
    assert problem.reason == "InvalidAnnotation" and problem.ref.name == "bad" and repr(value) in problem.message


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "t", "1"])
def test_booleans_read_as_ingress_nginx_reads_them(value: str) -> None:
    assert _policies({NGINX + "force-ssl-redirect": value}) is None  # a TLS option, not a policy...
    route = _one({NGINX + "force-ssl-redirect": value}).table.match("a.test", "/")
    assert route is not None and route.redirect_https  # ...on the route itself


# -- redirects ("Permanent Redirect", "Permanent Redirect Code", "Temporal Redirect", "Temporal Redirect Code")


@pytest.mark.parametrize(
    ("annotations", "code", "location"),
    [
        ({"permanent-redirect": "https://www.google.com"}, 301, "https://www.google.com"),
        ({"permanent-redirect": "https://www.google.com", "permanent-redirect-code": "308"}, 308, "https://www.google.com"),
        ({"temporal-redirect": "https://www.google.com"}, 302, "https://www.google.com"),
        ({"temporal-redirect": "https://www.google.com", "temporal-redirect-code": "307"}, 307, "https://www.google.com"),
        # the redirect parser reads temporal-redirect first: it wins over permanent-redirect
        ({"temporal-redirect": "https://t.example/", "permanent-redirect": "https://p.example/"}, 302, "https://t.example/"),
        ({"permanent-redirect": "/elsewhere?x=1"}, 301, "/elsewhere?x=1"),
    ],
)
def test_redirects(annotations: dict[str, str], code: int, location: str) -> None:
    policies = _policies({NGINX + k: v for k, v in annotations.items()})
    assert policies is not None and policies.redirect is not None
    assert (policies.redirect.code, policies.redirect.location) == (code, location)


def test_a_relative_redirect_is_made_absolute_with_the_requests_scheme_and_host() -> None:
    policies = _policies({NGINX + "permanent-redirect": "/new"})
    assert policies is not None and policies.redirect is not None
    assert policies.redirect.location_for(b"https", "a.test") == b"https://a.test/new"


def test_app_root() -> None:
    """ "Rewrite": app-root redirects requests for / (the proxy answers 302; see the proxy tests)."""
    policies = _policies({NGINX + "app-root": "/app1"})
    assert policies is not None and policies.app_root == "/app1"


# -- regex paths ("Use Regex", "Ingress Path Matching")


def test_use_regex_paths_are_case_insensitive_prefix_regexes() -> None:
    routes = _one({NGINX + "use-regex": "true"}, path("/foo/.*", "foo", kind="ImplementationSpecific"))
    assert routes.table.match("a.test", "/foo/bar") is not None
    assert routes.table.match("a.test", "/FOO/bar/baz") is not None  # ~* : case-insensitive
    assert routes.table.match("a.test", "/foo") is None  # "^/foo/.*" needs the slash
    assert routes.table.match("a.test", "/x/foo/bar") is None  # anchored at the start


def test_regex_on_one_ingress_makes_every_path_of_the_host_a_regex() -> None:
    """ "Use Regex": enforced on ALL paths for a given host regardless of what Ingress they are defined on."""
    routes = table(
        ingress("plain", rule("a.test", path("/api", "api", kind="Exact")), created=T0),
        ingress("regex", rule("a.test", path("/v[0-9]+/", "versioned", kind="ImplementationSpecific")), annotations={NGINX + "use-regex": "true"}, created=T1),
        ingress("other-host", rule("b.test", path("/api", "b-api", kind="Exact")), created=T1),
    )
    api = routes.table.match("a.test", "/API/users")  # the Exact path became "~* ^/api": a prefix, any case
    assert api is not None and api.upstream.key == "default/api:80"
    assert routes.table.match("b.test", "/api/users") is None  # another host keeps the spec's Exact
    versioned = routes.table.match("a.test", "/v2/x")
    assert versioned is not None and versioned.upstream.key == "default/versioned:80"


def test_regex_paths_are_tried_longest_first() -> None:
    """ "Path Priority": the example of test-ingress-1 and test-ingress-2."""
    routes = table(
        ingress("test-ingress-1", rule("test.com", path("/foo/bar", "service1"), path("/foo/bar/", "service2")), created=T0),
        ingress(
            "test-ingress-2",
            rule("test.com", path("/foo/bar/(.+)", "service3", kind="ImplementationSpecific")),
            annotations={NGINX + "rewrite-target": "/$1"},
            created=T1,
        ),
    )
    expected = {"/foo/bar/1": "service3", "/foo/bar/": "service2", "/foo/bar": "service1"}
    for request_path, service in expected.items():
        route = routes.table.match("test.com", request_path)
        assert route is not None and route.upstream.key == f"default/{service}:80", request_path


def test_the_first_matching_regex_wins_even_over_a_literal_path() -> None:
    """ "Warning": /foo/bar/bar goes to ^/foo/bar/[A-Z0-9]{3}, the longer pattern, not the literal path."""
    routes = _one(
        {NGINX + "use-regex": "true"},
        path("/foo/bar/bar", "literal"),
        path("/foo/bar/[A-Z0-9]{3}", "pattern", kind="ImplementationSpecific"),
        host="test.com",
    )
    route = routes.table.match("test.com", "/foo/bar/bar")
    assert route is not None and route.upstream.key == "default/pattern:80"


def test_a_path_that_is_no_regex_is_left_out_with_a_problem() -> None:
    routes = _one({NGINX + "use-regex": "true"}, path("/ok", "ok"), path("/broken(", "broken", kind="ImplementationSpecific"))
    assert routes.table.match("a.test", "/ok") is not None
    assert _reasons(routes) == ["InvalidPath"]


# -- rewrite ("Rewrite", the rewrite example, "X-Forwarded-Prefix Header")


@pytest.mark.parametrize(
    ("request_path", "rewritten"),
    [("/something", "/"), ("/something/", "/"), ("/something/new", "/new"), ("/SOMETHING/New", "/New")],
)
def test_the_rewrite_example(request_path: str, rewritten: str) -> None:
    """docs/examples/rewrite: path /something(/|$)(.*) with rewrite-target /$2."""
    routes = _one(
        {NGINX + "use-regex": "true", NGINX + "rewrite-target": "/$2"},
        path("/something(/|$)(.*)", "http-svc", kind="ImplementationSpecific"),
        host="rewrite.bar.com",
    )
    route = routes.table.match("rewrite.bar.com", request_path)
    assert route is not None and route.policies is not None and route.policies.rewrite is not None
    assert route.policies.rewrite.path_for(request_path) == rewritten


def test_a_rewrite_keeps_the_query_and_escapes_what_a_path_cannot_carry() -> None:
    routes = _one({NGINX + "rewrite-target": "/v2/$1"}, path("/api/(.*)", "api", kind="ImplementationSpecific"))
    route = routes.table.match("a.test", "/api/a b")
    assert route is not None and route.policies is not None and route.policies.rewrite is not None
    assert route.policies.rewrite.target_for("/api/a b", b"x=1") == b"/v2/a%20b?x=1"
    assert route.policies.rewrite.target_for("/api/c", b"") == b"/v2/c"


def test_a_rewrite_to_the_path_itself_is_no_rewrite_and_a_missing_group_is_empty() -> None:
    same = _policies({NGINX + "rewrite-target": "/"})
    assert same is None  # "if the path in the ingress rule is equal to the target: no special rewrite"
    routes = _one({NGINX + "rewrite-target": "/x/$3"}, path("/a/(.*)", kind="ImplementationSpecific"))
    route = routes.table.match("a.test", "/a/b")
    assert route is not None and route.policies is not None and route.policies.rewrite is not None
    assert route.policies.rewrite.path_for("/a/b") == "/x/"


def test_x_forwarded_prefix_comes_with_a_rewrite() -> None:
    routes = _one({NGINX + "rewrite-target": "/$1", NGINX + "x-forwarded-prefix": "/api"}, path("/api/(.*)", kind="ImplementationSpecific"))
    route = routes.table.match("a.test", "/api/x")
    assert route is not None and route.policies is not None and route.policies.rewrite is not None
    assert route.policies.rewrite.prefix == "/api"


# -- backends ("Custom timeouts", "Custom max body size", "Custom NGINX upstream vhost")


@pytest.mark.parametrize(
    ("value", "limit"),
    [("1024", 1024), ("8k", 8 << 10), ("8K", 8 << 10), ("10m", 10 << 20), ("1g", 1 << 30), ("0", UNLIMITED)],
)
def test_proxy_body_size(value: str, limit: int) -> None:
    policies = _policies({NGINX + "proxy-body-size": value})
    assert policies is not None and policies.limits is not None and policies.limits.max_body_bytes == limit


def test_timeouts_and_upstream_vhost() -> None:
    policies = _policies(
        {
            NGINX + "proxy-connect-timeout": "2",
            NGINX + "proxy-read-timeout": "120",
            NGINX + "proxy-send-timeout": "30",
            NGINX + "upstream-vhost": "internal.example:8080",
        }
    )
    assert policies is not None and policies.limits is not None
    limits = policies.limits
    assert (limits.connect_timeout, limits.read_timeout, limits.send_timeout, limits.max_body_bytes) == (2.0, 120.0, 30.0, None)
    assert policies.upstream_host == "internal.example:8080"


def test_preserve_trailing_slash_false_strips_on_the_https_redirect() -> None:
    """ "Server-side HTTPS enforcement": twingress keeps the slash unless preserve-trailing-slash is "false"."""
    assert _policies({NGINX + "preserve-trailing-slash": "true"}) is None
    policies = _policies({NGINX + "preserve-trailing-slash": "false"})
    assert policies is not None and policies.strip_trailing_slash


# -- "Backend Protocol": GRPC, GRPCS (HTTP/2 to the endpoints), H2C (twingress's), and the refused ones


@pytest.mark.parametrize(("value", "http2", "tls_alpn"), [
    ("GRPC", True, None), ("grpc", True, None), ("GRPCS", True, ("h2",)), ("H2C", True, None), ("HTTPS", False, ()), ("HTTP", False, None),
])
def test_backend_protocol_http2_values(value: str, http2: bool, tls_alpn: Optional[tuple[str, ...]]) -> None:
    """annotations.md "Backend Protocol": HTTP, HTTPS, GRPC, GRPCS (case-insensitive here as there)."""
    policies = _policies({NGINX + "backend-protocol": value})
    backend_http2 = policies.backend_http2 if policies is not None else False
    backend_tls = policies.backend_tls if policies is not None else None
    assert backend_http2 is http2
    assert (backend_tls.alpn if backend_tls is not None else None) == tls_alpn


@pytest.mark.parametrize("value", ["FCGI", "AUTO_HTTP", "h3"])
def test_backend_protocols_not_served_leave_the_ingress_out(value: str) -> None:
    routes = _one({NGINX + "backend-protocol": value})
    assert routes.table.match("a.test", "/") is None
    assert _reasons(routes) == ["InvalidAnnotation"]


# -- "Allowlist source range", "Denylist source range" (annotations.md): deny rules, then allow, then deny all


def test_source_ranges_are_read_under_both_names_and_ipv6() -> None:
    allow = _policies({NGINX + "whitelist-source-range": "10.0.0.0/8, 192.168.1.1"})
    assert allow is not None and allow.source_ranges is not None
    assert [str(n) for n in allow.source_ranges.allow] == ["10.0.0.0/8", "192.168.1.1/32"]
    both = _policies({NGINX + "allowlist-source-range": "2001:db8::/32", NGINX + "denylist-source-range": "2001:db8::1"})
    assert both is not None and both.source_ranges is not None
    assert both.source_ranges.permits("2001:db8::2") and not both.source_ranges.permits("2001:db8::1")


@pytest.mark.parametrize("value", ["10.0.0.0/33", "10.0.0.0/8,,nonsense", "", "all"])
def test_a_source_range_that_cannot_be_read_closes_the_route(value: str) -> None:
    """Fail closed: the route answers 503 (as ingress-nginx denies a location whose annotation fails), never opens."""
    routes = _one({NGINX + "whitelist-source-range": value})
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.deny is not None
    assert route.policies.deny.status == 503
    assert _reasons(routes) == ["InvalidAnnotation"]
