"""
External authentication through twistd against a real auth service process (tests/proxy/auth_service.py).

The spec is ingress-nginx's annotations page ("External Authentication"), the auth location
of its nginx.tmpl (the fields the service receives) and nginx's ngx_http_auth_request_module
("If the subrequest returns a 2xx response code, the access is allowed. If it returns 401 or
403, the access is denied with the corresponding error code. Any other response code returned
by the subrequest is considered an error."; a 401 carries the service's WWW-Authenticate).
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.proxy.h2client import H2Client
from tests.support import EchoBackend, Manifests, Twingress, free_port, wait_for_port

HERE = Path(__file__).parent


class Service:
    """The auth service process and what it was asked."""

    def __init__(self, tls: Optional[tuple[Path, Path]] = None) -> None:
        self.port = free_port()
        self.scheme = "https" if tls else "http"
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "auth_service.py"), "--port", str(self.port), *(["--tls", *map(str, tls)] if tls else [])]
        )
        wait_for_port("127.0.0.1", self.port, self.process)

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def asked(self) -> list[dict[str, Any]]:
        context = ssl._create_unverified_context() if self.scheme == "https" else None
        with urllib.request.urlopen(self.url("/__asked"), timeout=5, context=context) as answer:
            questions: list[dict[str, Any]] = json.loads(answer.read())
        return questions


    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Proxy:
    def __init__(self, twingress: Twingress, service: Service, https_port: int) -> None:
        self.twingress, self.service, self.https_port = twingress, service, https_port


def _guarded(name: str, service: Service, path: str, **annotations: str) -> dict[str, Any]:
    return Manifests.nginx_ingress(name, f"{name}.test", "echo", {"auth-url": service.url(path), **annotations})


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    echo = EchoBackend("pod-external-auth")
    service = Service()
    manifests = Manifests(tmp_path_factory.mktemp("external-auth"))
    closed_port = free_port()
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "auth-fields", "namespace": "default"}, "data": {"X-Tenant": "tenant-$host", "X-Empty": "$http_x_absent"}},
        _guarded("allow", service, "/allow", **{"auth-response-headers": "X-Auth-Request-User, X-Auth-Request-Email"}),
        _guarded("quiet", service, "/allow-quietly", **{"auth-response-headers": "X-Auth-Request-User"}),
        _guarded("posting", service, "/allow", **{"auth-method": "POST", "auth-request-redirect": "https://back.test/here", "auth-proxy-set-headers": "auth-fields"}),
        _guarded("deny", service, "/deny"),
        _guarded("always", service, "/deny", **{"auth-always-set-cookie": "true"}),
        _guarded("signin", service, "/deny", **{"auth-signin": "https://login.test/oauth2/start"}),
        _guarded("signinparam", service, "/deny", **{"auth-signin": "https://$host/oauth2/start?x=1", "auth-signin-redirect-param": "next"}),
        _guarded("forbid", service, "/forbid"),
        _guarded("odd", service, "/redirect"),
        _guarded("slow", service, "/slow", **{"proxy-connect-timeout": "1", "proxy-read-timeout": "1"}),
        Manifests.nginx_ingress("unreachable", "unreachable.test", "echo", {"auth-url": f"http://127.0.0.1:{closed_port}/auth"}),
        _guarded("cached", service, "/token", **{"auth-cache-key": "$http_authorization", "auth-cache-duration": "200 10m"}),
        _guarded("uncached", service, "/token"),
        Manifests.nginx_ingress("notaurl", "notaurl.test", "echo", {"auth-url": "auth-service/check"}),
        Manifests.nginx_ingress("unknownvar", "unknownvar.test", "echo", {"auth-url": "http://$upstream_addr/check"}),
        _guarded("nomap", service, "/allow", **{"auth-proxy-set-headers": "missing"}),
        _guarded("badmethod", service, "/allow", **{"auth-method": "FETCH"}),
    )
    https_port = free_port()
    twingress = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    yield Proxy(twingress, service, https_port)
    twingress.stop()
    service.stop()
    echo.stop()


def _request(
    proxy: Proxy, host: str, target: str = "/private?q=1", method: str = "GET", body: Optional[bytes] = None, headers: Optional[dict[str, str]] = None
) -> tuple[http.client.HTTPResponse, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.twingress.http_port, timeout=15)
    connection.request(method, target, body=body, headers={"Host": host, **(headers or {})})
    response = connection.getresponse()
    return response, response.read()


def _last_question(proxy: Proxy, path: str) -> dict[str, Any]:
    question = [asked for asked in proxy.service.asked() if asked["path"] == path][-1]
    question["fields"] = {name.lower(): value for name, value in question["headers"]}
    return question


def test_a_2xx_lets_the_request_through_with_the_listed_fields(proxy: Proxy) -> None:
    """ "auth-response-headers": the service's fields reach the backend in place of the client's own."""
    response, body = _request(proxy, "allow.test", headers={"X-Auth-Request-User": "mallory", "Cookie": "session=abc"})
    assert response.status == 200
    seen = json.loads(body)
    assert seen["headers"]["X-Auth-Request-User"] == ["alice"] and seen["headers"]["X-Auth-Request-Email"] == ["alice@example.com"]
    assert response.getheader("Set-Cookie") == "session=abc; Path=/"  # auth_request_set $auth_cookie; add_header Set-Cookie


def test_the_question_carries_what_ingress_nginx_sends(proxy: Proxy) -> None:
    """nginx.tmpl's auth location: the client's fields, no body, the original method and URL in fields; a GET."""
    response, _ = _request(proxy, "allow.test", "/private?q=1", "POST", b"secret body", {"Cookie": "session=abc", "X-Forwarded-Proto": "gopher"})
    assert response.status == 200
    question = _last_question(proxy, "/allow")
    fields = question["fields"]
    assert question["method"] == "GET" and question["body"] == 0 and "content-length" not in fields  # proxy_pass_request_body off
    assert fields["host"] == "127.0.0.1"  # $externalAuth.Host: the URL's host, without its port
    assert fields["x-original-url"] == "http://allow.test/private?q=1" and fields["x-original-method"] == "POST"
    assert fields["x-sent-from"] == "nginx-ingress-controller" and fields["x-auth-request-redirect"] == "/private?q=1"
    assert fields["x-real-ip"] == "127.0.0.1" and fields["x-forwarded-for"] == "127.0.0.1"
    assert fields["cookie"] == "session=abc" and "x-forwarded-proto" not in fields  # proxy_set_header X-Forwarded-Proto ""
    assert "x-original-uri" not in fields and "x-scheme" not in fields  # only with auth-method


def test_auth_method_redirect_and_proxy_set_headers(proxy: Proxy) -> None:
    """ "auth-method", "auth-request-redirect", "auth-proxy-set-headers" (a ConfigMap of nginx strings; empty ones not sent)."""
    assert _request(proxy, "posting.test", "/p?x=y")[0].status == 200
    question = _last_question(proxy, "/allow")
    fields = question["fields"]
    assert question["method"] == "POST" and fields["x-original-uri"] == "/p?x=y" and fields["x-scheme"] == "http"
    assert fields["x-auth-request-redirect"] == "https://back.test/here"
    assert fields["x-tenant"] == "tenant-posting.test" and "x-empty" not in fields


def test_a_listed_field_the_service_does_not_send_is_not_the_clients(proxy: Proxy) -> None:
    """proxy_set_header with an empty $authHeader sends no field: a client cannot supply its own."""
    response, body = _request(proxy, "quiet.test", headers={"X-Auth-Request-User": "mallory"})
    assert response.status == 200 and "X-Auth-Request-User" not in json.loads(body)["headers"]


def test_401_and_403_reach_the_client_and_not_the_backend(proxy: Proxy) -> None:
    response, body = _request(proxy, "deny.test")
    assert response.status == 401 and response.getheader("WWW-Authenticate") == 'Bearer realm="svc"'
    assert response.getheader("Set-Cookie") is None  # add_header without always: not on a 401
    assert b"pod-external-auth" not in body
    assert _request(proxy, "forbid.test")[0].status == 403


def test_auth_always_set_cookie_sets_it_on_a_401(proxy: Proxy) -> None:
    """ "auth-always-set-cookie": add_header Set-Cookie $auth_cookie always."""
    response, _ = _request(proxy, "always.test")
    assert response.status == 401 and response.getheader("Set-Cookie") == "tried=1"


def test_a_401_redirects_to_auth_signin_with_the_original_url(proxy: Proxy) -> None:
    """ "auth-signin": 302 to it with rd=$pass_access_scheme://$http_host$escaped_request_uri (buildAuthSignURL)."""
    response, _ = _request(proxy, "signin.test", "/private?q=1")
    assert response.status == 302
    assert response.getheader("Location") == "https://login.test/oauth2/start?rd=http://signin.test%2Fprivate%3Fq%3D1"
    response, _ = _request(proxy, "signinparam.test", "/a b".replace(" ", "%20"))
    assert response.getheader("Location") == "https://signinparam.test/oauth2/start?x=1&next=http://signinparam.test%2Fa%2520b"


@pytest.mark.parametrize("host", ["odd.test", "slow.test", "unreachable.test"])
def test_anything_else_is_a_500_never_the_backend(proxy: Proxy, host: str) -> None:
    """
    A 302 from the service, no answer within the route's timeouts (1 s + 1 s here), or no service: 500 (fail closed).
    The slow service would say 200 after 5 s: a 500 means the proxy gave up before (no clock needed to tell).
    """
    response, body = _request(proxy, host)
    assert response.status == 500 and b"pod-external-auth" not in body


@pytest.mark.parametrize(
    ("host", "reason"),
    [("notaurl.test", "InvalidAnnotation"), ("unknownvar.test", "InvalidAnnotation"), ("nomap.test", "InvalidExternalAuth"), ("badmethod.test", "InvalidAnnotation")],
)
def test_what_cannot_be_read_closes_the_route(proxy: Proxy, host: str, reason: str) -> None:
    """Fail closed: an auth-url that is not a URL, a variable twingress cannot compute, a missing ConfigMap, a bad method."""
    assert _request(proxy, host)[0].status == 503
    name = host.split(".")[0]
    assert (f"Ingress/default/{name}", reason) in {(p["object"], p["reason"]) for p in proxy.twingress.routes()["problems"]}


def test_auth_cache_key_keeps_answers_per_key(proxy: Proxy) -> None:
    """ "auth-cache-key", "auth-cache-duration": one question per key while the answer is kept; none without a key."""

    def questions() -> int:
        return sum(1 for asked in proxy.service.asked() if asked["path"] == "/token")

    before = questions()
    for _ in range(3):
        assert _request(proxy, "cached.test", headers={"Authorization": "Bearer good"})[0].status == 200
    assert questions() == before + 1
    assert _request(proxy, "cached.test", headers={"Authorization": "Bearer bad"})[0].status == 401  # another key: asked
    assert _request(proxy, "cached.test", headers={"Authorization": "Bearer bad"})[0].status == 401  # 401 is not in "200 10m"
    assert questions() == before + 3
    for _ in range(2):
        assert _request(proxy, "uncached.test", headers={"Authorization": "Bearer good"})[0].status == 200
    assert questions() == before + 5


def test_the_request_body_waits_and_reaches_the_backend(proxy: Proxy) -> None:
    body = b"z" * 300_000
    response, answer = _request(proxy, "allow.test", "/upload", "POST", body)
    assert response.status == 200 and json.loads(answer)["body_bytes"] == len(body)


def test_http2_clients_are_guarded_the_same_way(proxy: Proxy) -> None:
    client = H2Client(proxy.https_port)
    denied = client.get("/private", authority="deny.test")
    assert denied.status == 401 and denied.headers[b"www-authenticate"] == b'Bearer realm="svc"'
    allowed = client.get("/private", authority="allow.test", method="POST", body=b"y" * 100_000, headers=(("x-auth-request-user", "mallory"),))
    seen = json.loads(bytes(allowed.body))
    assert allowed.status == 200 and seen["body_bytes"] == 100_000 and seen["headers"]["X-Auth-Request-User"] == ["alice"]
    client.close()


def test_denials_are_counted(proxy: Proxy) -> None:
    def count(reason: str, route: str) -> float:
        for line in proxy.twingress.admin("/metrics")[1].decode().splitlines():
            if line.startswith(f'twingress_http_denied_total{{reason="{reason}",route="{route}"}}'):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    denied, errors = count("external-auth", "default/forbid"), count("external-auth-error", "default/odd")
    assert _request(proxy, "forbid.test")[0].status == 403
    assert _request(proxy, "odd.test")[0].status == 500
    assert count("external-auth", "default/forbid") == denied + 1 and count("external-auth-error", "default/odd") == errors + 1


def test_debug_routes_shows_the_service(proxy: Proxy) -> None:
    policies = proxy.twingress.routes()["hosts"]["posting.test"]["prefix"]["/"]["policies"]
    assert policies["externalAuth"] == {"url": proxy.service.url("/allow"), "method": "POST"}
