"""
L{ingress.proxy.request.routed.route_request} directly: a parsed request head against a table from
L{ingress.routing.build}, as both framings ask it.  The table's own lookups are L{tests.unit.test_routing}'s;
these cases are what the request adds: the Host field or an absolute target, the path as sent
(query, encoding, dot segments), the path types' precedence, the default backend, and the answers
given without an upstream.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ingress.proxy.message import h1
from ingress.proxy.request.forwarding import ForwardedFor, scheme_fields
from ingress.proxy.request.routed import Routed, route_request
from ingress.routing import RoutingTable
from tests.unit.objects import endpoints, ingress, path, rule, service, table

FORWARDED = ForwardedFor("10.0.0.9", b"X-Forwarded-For: 10.0.0.9\r\nX-Forwarded-Proto: http\r\n" + scheme_fields(b"http"), b"http")


def backends(*names: str) -> list[dict[str, Any]]:
    """A Service with one ready endpoint for each name."""
    objects: list[dict[str, Any]] = []
    for number, name in enumerate(names, 1):
        objects += [service(name), endpoints(name, f"10.244.0.{number}")]
    return objects


def routes(*ingresses: dict[str, Any]) -> RoutingTable:
    names = {p["backend"]["service"]["name"] for i in ingresses for r in i["spec"].get("rules", []) for p in r["http"]["paths"]}
    if "defaultBackend" in ingresses[0]["spec"]:
        names.add(ingresses[0]["spec"]["defaultBackend"]["service"]["name"])
    return table(*ingresses, *backends(*sorted(names))).table


def request(target: str, host: Optional[str] = "example.com", method: str = "GET", fields: str = "") -> h1.Head:
    """A parsed request head: HTTP/1.1, or HTTP/1.0 without a Host field when C{host} is None."""
    if host is None:
        return h1.parse_request_head(f"{method} {target} HTTP/1.0\r\n{fields}\r\n".encode("latin-1"))
    return h1.parse_request_head(f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{fields}\r\n".encode("latin-1"))


def routed(table: RoutingTable, target: str, host: Optional[str] = "example.com", **kw: Any) -> Routed:
    return route_request(table, request(target, host, **kw), FORWARDED, None)


def service_of(result: Routed) -> Optional[str]:
    """The Service a forwarded request goes to, or None for an answer given here."""
    if result.status or result.route is None:
        return None
    return result.route.upstream.key.split("/")[1].split(":")[0]


HOSTS = routes(
    ingress("exact", rule("foo.example.com", path("/", "exact"))),
    ingress("wild", rule("*.example.com", path("/", "wild"))),
    ingress("any", rule(None, path("/only-here", "any"))),
)


@pytest.mark.parametrize(
    "host, target, expected",
    [
        ("foo.example.com", "/", "exact"),
        ("FOO.Example.COM.:8080", "/", "exact"),
        ("bar.example.com", "/x", "wild"),
        ("a.bar.example.com", "/x", None),
        ("example.com", "/x", None),
        ("other.test", "/only-here/x", "any"),
        ("foo.example.com", "http://bar.example.com/", "wild"),
    ],
    ids=["exact", "exact-case-dot-port", "wildcard", "wildcard-one-label", "not-the-apex", "host-less-rule", "absolute-target-wins-over-host"],
)
def test_the_host_picks_the_rule(host: str, target: str, expected: Optional[str]) -> None:
    result = routed(HOSTS, target, host)
    assert service_of(result) == expected
    assert result.status == (0 if expected else 404)


PATHS = routes(
    ingress(
        "paths",
        rule(
            "example.com",
            path("/", "root"),
            path("/foo", "foo-prefix"),
            path("/foo", "foo-exact", kind="Exact"),
            path("/foo/bar", "foobar-prefix"),
            path("/impl", "impl", kind="ImplementationSpecific"),
            path("/exact-only", "exact-only", kind="Exact"),
        ),
    )
)


@pytest.mark.parametrize(
    "target, expected",
    [
        ("/foo", "foo-exact"),
        ("/foo?q=1", "foo-exact"),
        ("/foo/", "foo-prefix"),
        ("/foo/baz", "foo-prefix"),
        ("/foobar", "root"),
        ("/foo/bar", "foobar-prefix"),
        ("/foo/bar/baz", "foobar-prefix"),
        ("/foo/barbaz", "foo-prefix"),
        ("/impl/x", "impl"),
        ("/exact-only", "exact-only"),
        ("/exact-only/", "root"),
        ("/%66oo", "foo-exact"),
        ("/foo//bar", "foobar-prefix"),
        ("/x/../foo", "foo-exact"),
    ],
    ids=["exact-beats-prefix", "query-ignored", "prefix-trailing-slash", "prefix-child", "prefix-by-element-not-string",
         "longest-prefix", "longest-prefix-child", "element-boundary", "implementation-specific-is-prefix", "exact",
         "exact-is-not-prefix", "percent-decoded", "empty-elements", "dot-segments-removed"],
)
def test_the_path_types_and_their_precedence(target: str, expected: str) -> None:
    assert service_of(routed(PATHS, target)) == expected


@pytest.mark.parametrize("target", ["/../etc", "/a/%2e%2e/%2e%2e/x"], ids=["climbs", "climbs-encoded"])
def test_a_path_above_the_root_is_refused_as_malformed(target: str) -> None:
    result = routed(PATHS, target)
    assert (result.status, result.refused) == (400, True)


DEFAULTED = routes(ingress("with-default", rule("example.com", path("/app", "app")), default=("fallback", 80)))


@pytest.mark.parametrize(
    "host, target, expected",
    [("example.com", "/app/x", "app"), ("example.com", "/other", "fallback"), ("elsewhere.test", "/", "fallback"), (None, "/", "fallback")],
    ids=["rule", "host-matched-path-not", "unknown-host", "http-1.0-without-host"],
)
def test_requests_no_rule_matches_go_to_the_default_backend(host: Optional[str], target: str, expected: str) -> None:
    assert service_of(routed(DEFAULTED, target, host)) == expected


def test_without_a_default_backend_no_match_is_404_without_a_route() -> None:
    result = routed(HOSTS, "/", "nowhere.test")
    assert (result.status, result.route, result.refused, result.head_bytes) == (404, None, False, b"")


def test_a_forwarded_request_carries_the_head_to_send_upstream_with_the_forwarding_fields() -> None:
    result = routed(PATHS, "/foo?q=1", "Example.com", fields="X-Forwarded-For: 192.0.2.1\r\nAccept: */*\r\n")
    assert result.status == 0 and result.route is not None
    head = result.head_bytes.decode("latin-1")
    assert head.startswith("GET /foo?q=1 HTTP/1.1\r\n")
    assert "Host: Example.com\r\n" in head and "Accept: */*\r\n" in head
    assert "X-Forwarded-For: 10.0.0.9\r\n" in head and "192.0.2.1" not in head, "the client's own X-Forwarded-For is replaced"
    assert head.endswith("\r\n\r\n")


def test_connect_is_refused_as_not_proxied() -> None:
    result = route_request(PATHS, h1.parse_request_head(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"), FORWARDED, None)
    assert (result.status, result.refused) == (405, True)


def test_an_ssl_redirect_route_answers_a_cleartext_request_with_its_https_location() -> None:
    redirecting = routes(
        ingress("tls", rule("example.com", path("/", "root")), annotations={"twingress.io/ssl-redirect": "true", "twingress.io/force-ssl-redirect": "true"})
    )
    result = routed(redirecting, "/a?b=1")
    assert result.status == 308 and result.location == b"https://example.com/a?b=1"
    assert route_request(redirecting, request("/a?b=1"), FORWARDED, 8443).location == b"https://example.com:8443/a?b=1"


def test_a_source_range_guard_answers_403_to_a_client_outside_it_and_forwards_one_inside() -> None:
    guarded = routes(ingress("guarded", rule("example.com", path("/", "root")), annotations={"twingress.io/allowlist-source-range": "192.0.2.0/24"}))
    outside = routed(guarded, "/")
    assert (outside.status, outside.denied) == (403, "source-range")
    inside = route_request(guarded, request("/"), ForwardedFor("192.0.2.7", b"", b"http"), None)
    assert (inside.status, service_of(inside)) == (0, "root")
