"""
External auth's values and decisions, directly (ingress-nginx annotations.md "External Authentication";
its authreq parser's validators; nginx's proxy_cache_valid and time units; buildAuthSignURL).
"""

from __future__ import annotations

import base64

import pytest

from ingress.proxy.message import h1
from ingress.proxy.request.extauth import Verdict, _drop_pattern
from ingress.proxy.request.variables import expand
from ingress.routing.annotations import auth_values
from ingress.routing.annotations.values import InvalidValue
from ingress.routing.policies.extauth import ExternalAuth
from ingress.routing.policies.variables import ALL_VARIABLES, REQUEST_VARIABLES, UnknownVariable, parse_template


def _head(target: bytes = b"/a%20b?x=1&y=two", fields: bytes = b"Host: Shop.Test:8080\r\n") -> h1.Head:
    return h1.parse_request_head(b"POST " + target + b" HTTP/1.1\r\n" + fields + b"\r\n", 100)


def test_templates_read_text_and_variables() -> None:
    assert parse_template("https://$host/oauth2/auth", ALL_VARIABLES) == (("text", "https://"), ("var", "host"), ("text", "/oauth2/auth"))
    assert parse_template("${remote_user}x$http_authorization", ALL_VARIABLES) == (("var", "remote_user"), ("text", "x"), ("var", "http_authorization"))


def test_a_variable_twingress_cannot_compute_is_refused_when_read() -> None:
    with pytest.raises(UnknownVariable):
        parse_template("$upstream_addr", ALL_VARIABLES)
    with pytest.raises(UnknownVariable):
        parse_template("$arg_x")  # not among upstream-hash-by's variables
    assert REQUEST_VARIABLES.knows("cookie_session") and not REQUEST_VARIABLES.knows("cookie_")


def test_variables_are_filled_in_as_nginx_does() -> None:
    token = base64.b64encode(b"mia:secret").decode()
    head = _head(fields=b"Host: Shop.Test:8080\r\nAuthorization: Basic %s\r\nCookie: a=1; sid=xyz\r\n" % token.encode())

    def filled(text: str) -> str:
        return expand(parse_template(text, ALL_VARIABLES), head, "10.1.2.3", b"https")

    assert filled("$host|$http_host|$best_http_host") == "shop.test|shop.test:8080|shop.test:8080"  # the parser lower-cases Host
    assert filled("$request_uri|$uri|$args|$arg_y|$arg_z") == "/a%20b?x=1&y=two|/a%20b|x=1&y=two|two|"
    assert filled("$escaped_request_uri") == "%2Fa%2520b%3Fx%3D1%26y%3Dtwo"  # set_escape_uri: all but letters, digits, -._~
    assert filled("$scheme $pass_access_scheme $request_method $remote_addr $remote_user $cookie_sid") == "https https POST 10.1.2.3 mia xyz"


def test_auth_url_must_be_an_http_url() -> None:
    """authreq: auth-url must parse as a URL; twingress also needs http(s) and a host to ask anything."""
    assert auth_values.url(" http://auth.svc/check ") == "http://auth.svc/check"
    for bad in ("auth.svc/check", "ftp://auth/x", "http:///x", "http://a b/"):
        with pytest.raises(InvalidValue):
            auth_values.url(bad)


def test_auth_method_and_response_headers_are_validated() -> None:
    """authreq's methodsRegex and headerRegexp."""
    assert auth_values.method("POST") == "POST"
    with pytest.raises(InvalidValue):
        auth_values.method("post")
    assert auth_values.response_headers("X-Auth-Request-User, X-Auth-Request-Email,") == ("X-Auth-Request-User", "X-Auth-Request-Email")
    with pytest.raises(InvalidValue):
        auth_values.response_headers("X-User, X:Bad")


def test_cache_durations_read_as_proxy_cache_valid() -> None:
    """ "auth-cache-duration ... e.g. 200 202 30m ... comma-separated": codes then a duration; a duration alone: 200, 301, 302."""
    rules = auth_values.cache_rules("200 202 10m, 401 5s")
    auth = ExternalAuth(url=(), source="", cache_rules=rules)
    assert (auth.cache_seconds(200), auth.cache_seconds(202), auth.cache_seconds(401), auth.cache_seconds(403)) == (600, 600, 5, 0)
    assert ExternalAuth(url=(), source="", cache_rules=auth_values.cache_rules("1h")).cache_seconds(302) == 3600
    assert ExternalAuth(url=(), source="", cache_rules=auth_values.cache_rules("any 1d")).cache_seconds(500) == 86400
    assert auth_values.cache_rules(auth_values.DEFAULT_CACHE_DURATION) == ((frozenset({200, 202, 401}), 300),)
    for bad in ("200 ten", "10m 200", "2000 5m", ""):
        with pytest.raises(InvalidValue):
            auth_values.cache_rules(bad)


def test_the_signin_url_gets_the_original_url_once() -> None:
    """buildAuthSignURL: ?rd=... appended, &rd=... after a query, left alone when the URL sets the parameter."""

    def text(parts: tuple[tuple[str, str], ...]) -> str:
        return "".join(value if kind == "text" else "$" + value for kind, value in parts)

    original = "$pass_access_scheme://$http_host$escaped_request_uri"
    assert text(auth_values.signin_with_redirect("https://login/start", "")) == f"https://login/start?rd={original}"
    assert text(auth_values.signin_with_redirect("https://login/start?a=b", "next")) == f"https://login/start?a=b&next={original}"
    assert text(auth_values.signin_with_redirect("https://$host/start?rd=$escaped_request_uri", "")) == "https://$host/start?rd=$escaped_request_uri"


def test_a_verdict_replaces_the_clients_fields_of_the_listed_names() -> None:
    head = b"GET / HTTP/1.1\r\nHost: a\r\nx-user: mallory\r\nX-Other: 1\r\n\r\n"
    verdict = Verdict(request_fields=b"X-User: alice\r\n", drop=_drop_pattern(("X-User",)))
    assert verdict.applied_to(head) == b"GET / HTTP/1.1\r\nX-User: alice\r\nHost: a\r\nX-Other: 1\r\n\r\n"
    assert Verdict().applied_to(head) == head
