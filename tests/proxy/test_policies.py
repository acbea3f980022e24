"""
Route policies from ingress-nginx annotations, through twistd in manifests mode, real sockets.

Each test cites the section of ingress-nginx's annotations page
(docs/user-guide/nginx-configuration/annotations.md) or example whose behaviour it checks.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any, Optional

import pytest

from tests.support import EchoBackend, Manifests, Twingress


def _annotated(name: str, host: str, annotations: dict[str, str], path: str = "/", path_type: str = "Prefix") -> dict[str, Any]:
    return Manifests.nginx_ingress(name, host, "echo", annotations, path=path, path_type=path_type)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    echo = EchoBackend("pod-policies")
    manifests = Manifests(tmp_path_factory.mktemp("policies"))
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        Manifests.ingress("plain", "plain.test", "echo"),
        _annotated("permanent", "permanent.test", {"permanent-redirect": "https://new.example/landing", "permanent-redirect-code": "308"}),
        _annotated("temporal", "temporal.test", {"temporal-redirect": "/maintenance"}),
        _annotated("approot", "approot.test", {"app-root": "/app1"}),
        _annotated(
            "rewrite",
            "rewrite.bar.com",
            {"use-regex": "true", "rewrite-target": "/$2", "x-forwarded-prefix": "/something"},
            path="/something(/|$)(.*)",
            path_type="ImplementationSpecific",
        ),
        _annotated("vhost", "vhost.test", {"upstream-vhost": "internal.example"}),
        _annotated("small", "small.test", {"proxy-body-size": "1k"}),
        _annotated("impatient", "impatient.test", {"proxy-read-timeout": "1"}),
        _annotated("guarded", "guarded.test", {"whitelist-source-range": "10.0.0.0/8"}),
        _annotated("allowed", "allowed.test", {"allowlist-source-range": "10.0.0.0/8, 127.0.0.0/8"}),
        _annotated("denied", "denied.test", {"denylist-source-range": "127.0.0.1/32"}),
        _annotated("unreadable", "unreadable.test", {"whitelist-source-range": "127.0.0.0/33"}),
        _annotated("unguarded", "unguarded.test", {"auth-tls-secret": "default/client-ca"}),
        _annotated("cors-any", "cors-any.test", {"enable-cors": "true"}),
        _annotated("cors-list", "cors-list.test", {"enable-cors": "true", "cors-allow-origin": "https://app.example, https://*.example.org",
                                                    "cors-allow-credentials": "false", "cors-expose-headers": "X-Total"}),
    )
    twingress = Twingress(manifests.path, "--max-body-size", "2k")
    yield twingress
    twingress.stop()
    echo.stop()


def _request(
    proxy: Twingress, host: str, target: str, method: str = "GET", body: Optional[bytes] = None, headers: Optional[dict[str, str]] = None
) -> tuple[http.client.HTTPResponse, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request(method, target, body=body, headers={"Host": host, **(headers or {})})
    response = connection.getresponse()
    return response, response.read()


def _seen(proxy: Twingress, host: str, target: str, **kwargs: Any) -> dict[str, Any]:
    """What the backend received (the echo backend's JSON), after checking the answer is its 200."""
    response, body = _request(proxy, host, target, **kwargs)
    assert response.status == 200, body
    return json.loads(body)


def test_a_route_without_annotations_is_untouched(proxy: Twingress) -> None:
    seen = _seen(proxy, "plain.test", "/a/b?c=d", headers={"X-Forwarded-Prefix": "/client"})
    assert seen["uri"] == "/a/b?c=d" and seen["host"] == "plain.test"
    assert seen["headers"]["X-Forwarded-Prefix"] == ["/client"]


def test_permanent_redirect_with_its_code(proxy: Twingress) -> None:
    """ "Permanent Redirect", "Permanent Redirect Code": 308 instead of 301, the URL as given."""
    response, _ = _request(proxy, "permanent.test", "/anything?x=1")
    assert response.status == 308
    assert response.getheader("Location") == "https://new.example/landing"


def test_temporal_redirect_to_a_path_is_made_absolute(proxy: Twingress) -> None:
    """ "Temporal Redirect": 302 by default; a path gets the request's scheme and host (no port, as port_in_redirect off)."""
    response, _ = _request(proxy, "temporal.test:8080", "/x")
    assert response.status == 302
    assert response.getheader("Location") == "http://temporal.test/maintenance"


def test_app_root_redirects_only_the_root(proxy: Twingress) -> None:
    """ "Rewrite" / the app-root example: / answers 302 to $scheme://$http_host/app1; other paths are proxied."""
    response, _ = _request(proxy, "approot.test:8080", "/")
    assert response.status == 302
    assert response.getheader("Location") == "http://approot.test:8080/app1"
    assert _seen(proxy, "approot.test", "/app1/page")["path"] == "/app1/page"


@pytest.mark.parametrize(
    ("target", "uri"),
    [("/something", "/"), ("/something/", "/"), ("/something/new", "/new"), ("/SOMETHING/new?x=1", "/new?x=1")],
)
def test_the_rewrite_example(proxy: Twingress, target: str, uri: str) -> None:
    """docs/examples/rewrite: /something(/|$)(.*) with rewrite-target /$2; the query goes along."""
    seen = _seen(proxy, "rewrite.bar.com", target, headers={"X-Forwarded-Prefix": "/client"})
    assert seen["uri"] == uri
    assert seen["headers"]["X-Forwarded-Prefix"] == ["/something"]  # "X-Forwarded-Prefix Header"; the client's is dropped


def test_a_regex_host_does_not_match_outside_its_patterns(proxy: Twingress) -> None:
    response, _ = _request(proxy, "rewrite.bar.com", "/other")
    assert response.status == 404


def test_upstream_vhost_sets_the_host_the_backend_sees(proxy: Twingress) -> None:
    """ "Custom NGINX upstream vhost": Host is replaced; X-Forwarded-Host keeps the client's."""
    seen = _seen(proxy, "vhost.test", "/")
    assert seen["host"] == "internal.example"
    assert seen["headers"]["X-Forwarded-Host"] == ["vhost.test"]


def test_proxy_body_size_is_the_routes_own_limit(proxy: Twingress) -> None:
    """ "Custom max body size": 413 beyond the route's limit (1k here); other routes keep --max-body-size (2k)."""
    response, _ = _request(proxy, "small.test", "/", method="POST", body=b"x" * 1500)
    assert response.status == 413
    assert _seen(proxy, "small.test", "/", method="POST", body=b"x" * 1000)["body_bytes"] == 1000
    assert _seen(proxy, "plain.test", "/", method="POST", body=b"x" * 1500)["body_bytes"] == 1500


def test_proxy_read_timeout_is_the_routes_own(proxy: Twingress) -> None:
    """ "Custom timeouts": proxy-read-timeout 1 s gives 504 for a backend that answers after 3 s."""
    response, _ = _request(proxy, "impatient.test", "/?delay=3")
    assert response.status == 504
    assert _seen(proxy, "plain.test", "/?delay=1.5")["path"] == "/"  # the listener's 60 s elsewhere


def test_source_ranges_allow_and_deny_the_client_address(proxy: Twingress) -> None:
    """annotations.md "Allowlist source range", "Denylist source range": 403 outside the allow list or inside the deny list."""
    assert _request(proxy, "guarded.test", "/")[0].status == 403  # 127.0.0.1 is not in 10.0.0.0/8
    assert _seen(proxy, "allowed.test", "/")["path"] == "/"
    assert _request(proxy, "denied.test", "/")[0].status == 403
    assert _request(proxy, "plain.test", "/")[0].status == 200


def test_an_access_guard_that_cannot_be_honoured_closes_the_route(proxy: Twingress) -> None:
    """Fail closed: an unreadable allow list (503), a client-certificate CA that is not there (403), never the backend."""
    assert _request(proxy, "unreadable.test", "/")[0].status == 503
    assert _request(proxy, "unguarded.test", "/")[0].status == 403
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert ("Ingress/default/unreadable", "InvalidAnnotation") in problems
    assert ("Ingress/default/unguarded", "InvalidClientAuth") in problems


def test_denials_are_counted_by_reason_and_route(proxy: Twingress) -> None:
    def denied() -> float:
        for line in proxy.admin("/metrics")[1].decode().splitlines():
            if line.startswith('twingress_http_denied_total{reason="source-range",route="default/denied"}'):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = denied()
    for _ in range(3):
        assert _request(proxy, "denied.test", "/")[0].status == 403
    assert denied() == before + 3


def test_debug_routes_shows_the_policies(proxy: Twingress) -> None:
    hosts = proxy.routes()["hosts"]
    assert hosts["permanent.test"]["prefix"]["/"]["policies"] == {"redirect": {"code": 308, "location": "https://new.example/landing"}}
    [regex] = hosts["rewrite.bar.com"]["regex"]
    assert regex["pattern"] == "^/something(/|$)(.*)" and regex["policies"]["rewrite"]["target"] == "/$2"
    assert "policies" not in hosts["plain.test"]["prefix"]["/"]


# -- CORS (annotations.md "Enable CORS")


def test_a_cors_preflight_is_answered_by_the_proxy(proxy: Twingress) -> None:
    """An allowed OPTIONS gets 204 with the CORS fields and no body, as ingress-nginx returns it; the backend never sees it."""
    response, body = _request(proxy, "cors-list.test", "/api", "OPTIONS",
                              headers={"Origin": "https://a.example.org", "Access-Control-Request-Method": "PUT"})
    assert response.status == 204 and body == b""
    assert response.getheader("Access-Control-Allow-Origin") == "https://a.example.org"
    assert response.getheader("Access-Control-Allow-Methods") == "GET, PUT, POST, DELETE, PATCH, OPTIONS"
    assert response.getheader("Access-Control-Max-Age") == "1728000"
    assert response.getheader("Access-Control-Allow-Credentials") is None
    assert response.getheader("Content-Length") is None  # RFC 9110 8.6: none on a 204


def test_cors_fields_on_an_allowed_origins_responses_and_none_for_others(proxy: Twingress) -> None:
    response, body = _request(proxy, "cors-list.test", "/api", headers={"Origin": "https://app.example"})
    assert response.status == 200 and json.loads(body)["path"] == "/api"
    assert response.getheader("Access-Control-Allow-Origin") == "https://app.example"
    assert response.getheader("Access-Control-Expose-Headers") == "X-Total"
    other, _ = _request(proxy, "cors-list.test", "/api", headers={"Origin": "https://evil.test"})
    assert other.status == 200 and other.getheader("Access-Control-Allow-Origin") is None
    preflight, body = _request(proxy, "cors-list.test", "/api", "OPTIONS", headers={"Origin": "https://evil.test"})
    assert preflight.status == 200 and json.loads(body)["method"] == "OPTIONS"  # not ours to answer: the backend's
    star, _ = _request(proxy, "cors-any.test", "/")
    assert star.getheader("Access-Control-Allow-Origin") == "*" and star.getheader("Access-Control-Allow-Credentials") == "true"


def test_a_preflight_is_answered_before_the_allow_list_is_asked(tmp_path_factory: pytest.TempPathFactory) -> None:
    """ingress-nginx answers a CORS preflight with "return 204" (nginx's rewrite phase) before allow/deny (its access phase)."""
    echo = EchoBackend("pod-cors-guarded")
    manifests = Manifests(tmp_path_factory.mktemp("cors-guarded"))
    manifests.write("all.yaml", *manifests.service("echo", [echo.address]),
                    _annotated("both", "both.test", {"enable-cors": "true", "whitelist-source-range": "10.0.0.0/8"}))
    twingress = Twingress(manifests.path)
    try:
        preflight, _ = _request(twingress, "both.test", "/", "OPTIONS", headers={"Origin": "https://a.test"})
        assert preflight.status == 204
        assert _request(twingress, "both.test", "/", headers={"Origin": "https://a.test"})[0].status == 403
    finally:
        twingress.stop()
        echo.stop()
