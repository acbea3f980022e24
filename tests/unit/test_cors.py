"""
CORS (ingress-nginx annotations.md "Enable CORS"): origin matching, the fields sent, and the
annotations read with ingress-nginx's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import pytest

from ingress.routing.policies.cors import DEFAULT_HEADERS, DEFAULT_MAX_AGE, DEFAULT_METHODS, Cors
from tests.unit.objects import ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"


def _fields(cors: Cors, origin: Optional[bytes]) -> dict[bytes, bytes]:
    lines = cors.fields_for(origin).split(b"\r\n")[:-1]
    return dict(line.split(b": ", 1) for line in lines)  # type: ignore[misc]


def test_the_default_allows_every_origin_with_a_star_and_ingress_nginx_defaults() -> None:
    fields = _fields(Cors(), b"https://anything.example")
    assert fields == {
        b"Access-Control-Allow-Origin": b"*",
        b"Access-Control-Allow-Credentials": b"true",
        b"Access-Control-Allow-Methods": DEFAULT_METHODS.encode(),
        b"Access-Control-Allow-Headers": DEFAULT_HEADERS.encode(),
        b"Access-Control-Max-Age": b"%d" % DEFAULT_MAX_AGE,
    }
    assert _fields(Cors(), None)[b"Access-Control-Allow-Origin"] == b"*"  # ingress-nginx sets $cors for "*" always


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (b"https://origin-site.com:4443", True),
        (b"HTTP://ORIGIN-SITE.COM", True),  # nginx's ~* is case-insensitive
        (b"https://origin-site.com", False),  # the port is part of the origin
        (b"https://a.example.org", True),  # one label for the "*"
        (b"https://a.b.example.org", False),  # not two
        (b"https://example.org", False),
        (b"https://evil.test.https://a.example.org", False),  # anchored at both ends (ingress-nginx: end only)
        (b"https://a.example.org.evil.test", False),
        (None, False),
    ],
)
def test_a_list_echoes_an_allowed_origin_and_ignores_the_rest(origin: Optional[bytes], allowed: bool) -> None:
    cors = Cors(origins=("https://origin-site.com:4443", "http://origin-site.com", "https://*.example.org"))
    fields = _fields(cors, origin)
    assert (origin is not None and fields.get(b"Access-Control-Allow-Origin") == origin) is allowed
    assert bool(fields) is allowed


def test_credentials_off_and_expose_headers_on() -> None:
    fields = _fields(Cors(credentials=False, expose="X-Total, X-Page"), b"https://x.test")
    assert b"Access-Control-Allow-Credentials" not in fields
    assert fields[b"Access-Control-Expose-Headers"] == b"X-Total, X-Page"


def _cors(annotations: dict[str, str]) -> Optional[Cors]:
    route = table(ingress("web", rule("a.test", path("/")), annotations=annotations)).table.match("a.test", "/")
    assert route is not None
    return route.policies.cors if route.policies is not None else None


def test_annotations_are_read_with_the_documented_defaults() -> None:
    assert _cors({NGINX + "cors-allow-origin": "https://a.test"}) is None  # enable-cors is what turns it on
    assert _cors({NGINX + "enable-cors": "true"}) == Cors()
    custom = _cors({NGINX + "enable-cors": "true", NGINX + "cors-allow-origin": "https://a.test, https://*.b.test",
                    NGINX + "cors-allow-methods": "GET, POST", NGINX + "cors-allow-headers": "X-Custom, Content-Type",
                    NGINX + "cors-allow-credentials": "false", NGINX + "cors-max-age": "600", NGINX + "cors-expose-headers": "*"})
    assert custom == Cors(("https://a.test", "https://*.b.test"), "GET, POST", "X-Custom, Content-Type", "*", False, 600)


@pytest.mark.parametrize(("key", "value"), [("cors-allow-origin", "origin-site.com"), ("cors-allow-methods", "GET;DROP"), ("cors-max-age", "1h")])
def test_an_unreadable_cors_value_leaves_the_paths_out(key: str, value: str) -> None:
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "enable-cors": "true", NGINX + key: value}))
    assert routes.table.match("a.test", "/") is None
    assert [p.reason for p in routes.report.problems if p.reason != "ServiceNotFound"] == ["InvalidAnnotation"]


# -- the Gateway API's CORS filter (GEP-1767, apis/v1 HTTPCORSFilter; conformance tests/httproute-cors.go)


def _asking(**fields: str) -> Callable[[bytes], Optional[bytes]]:
    found = {name.replace("_", "-").encode(): value.encode() for name, value in fields.items()}
    return found.get


def test_gateway_wildcards_cover_any_number_of_labels_and_the_default_port() -> None:
    cors = Cors(origins=("https://*.bar.com", "http://www.foo.com"), methods="GET", headers="", credentials=False, max_age=5, gateway=True)
    for origin in (b"https://www.bar.com", b"https://xpto.www.bar.com", b"http://www.foo.com:80"):
        assert _fields(cors, origin)[b"Access-Control-Allow-Origin"] == origin
    for origin in (b"https://bar.com", b"http://www.foo.com:8080", b"https://www.foo.com"):
        assert _fields(cors, origin) == {}
    assert b"Access-Control-Allow-Headers" not in _fields(cors, b"https://a.bar.com")  # no allowHeaders: no field


def test_gateway_stars_with_credentials_echo_the_request() -> None:
    """GEP-1767: with allowCredentials a "*" is never sent: the origin, method and headers asked for are."""
    cors = Cors(origins=("*",), methods="*", headers="*", credentials=True, max_age=5, gateway=True)
    asked = _asking(access_control_request_method="PUT", access_control_request_headers="x-a, x-b")
    lines = cors.fields_for(b"https://other.foo.com", asked).split(b"\r\n")[:-1]
    fields = dict(line.split(b": ", 1) for line in lines)
    assert fields[b"Access-Control-Allow-Origin"] == b"https://other.foo.com"
    assert fields[b"Access-Control-Allow-Methods"] == b"PUT" and fields[b"Access-Control-Allow-Headers"] == b"x-a, x-b"
    assert b"Access-Control-Allow-Methods" not in _fields(cors, b"https://other.foo.com")  # nothing asked: no field
    without = Cors(origins=("*",), methods="PUT", headers="", credentials=False, max_age=5, gateway=True)
    assert _fields(without, b"https://x.test")[b"Access-Control-Allow-Origin"] == b"*"


def test_a_gateway_preflight_is_answered_here_whatever_its_origin() -> None:
    """
    The Fetch standard's CORS-preflight request (Origin and Access-Control-Request-Method), answered
    here even when its origin is not allowed (HTTPCORSFilter.AllowOrigins: 204/200 without the CORS
    fields); ingress-nginx answers every allowed OPTIONS and passes the others on.
    """
    gateway, nginx = Cors(origins=("https://a.test",), gateway=True), Cors(origins=("https://a.test",))
    asking = _asking(origin="https://b.test", access_control_request_method="GET")
    assert gateway.answers_preflight(b"OPTIONS", asking, gateway.fields_for(b"https://b.test", asking))
    assert not gateway.answers_preflight(b"OPTIONS", _asking(origin="https://a.test"), b"")
    assert not nginx.answers_preflight(b"OPTIONS", asking, nginx.fields_for(b"https://b.test", asking))
    assert nginx.answers_preflight(b"OPTIONS", _asking(), nginx.fields_for(b"https://a.test"))
    assert not nginx.answers_preflight(b"GET", _asking(), nginx.fields_for(b"https://a.test"))
