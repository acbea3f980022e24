"""
The ingress-nginx ConfigMap's guards through twistd with real sockets: each one enforces, or closes
the routes it covers (503, the reason in /debug/routes, a metric); none ever serves open.

Spec: ingress-nginx's docs/user-guide/nginx-configuration/configmap.md ("global-auth-url" and the
global-auth-* keys, "no-auth-locations", "whitelist-source-range", "denylist-source-range",
"block-cidrs"), the e2e tests test/e2e/settings/global_external_auth.go (401 for every Ingress,
200 with enable-global-auth "false") and test/e2e/settings/global_access_block.go (block-cidrs: 403).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.proxy.test_external_auth import Service
from tests.support import EchoBackend, Manifests, Twingress

CONFIG = "default/ingress-nginx-controller"


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    auth = Service()
    yield auth
    auth.stop()


def _config_map(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ingress-nginx-controller", "namespace": "default"}, "data": data}


def _get(proxy: Twingress, host: str, target: str = "/", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=15)
    connection.request("GET", target, headers={"Host": host, **(headers or {})})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def _apply(manifests: Manifests, proxy: Twingress, data: dict[str, str]) -> None:
    generation = proxy.generation()
    manifests.write("config.yaml", _config_map(data))
    proxy.wait_generation_above(generation)


def _deny_reason(proxy: Twingress, host: str) -> str:
    route = proxy.routes()["hosts"][host]["prefix"]["/"]
    return str(route.get("policies", {}).get("deny", {}).get("reason", ""))


def test_global_auth_covers_every_ingress_but_the_opted_out(
    manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend], service: Service
) -> None:
    """
    global_external_auth.go: "should return status code 401 when request any protected service", "200 when
    request whitelisted (via ingress annotation) service"; configmap.md "no-auth-locations" (default
    /.well-known/acme-challenge); nginx.tmpl shouldApplyGlobalAuth (an Ingress's own auth-url wins).
    """
    manifests.write(
        "all.yaml",
        *manifests.service("web", [echo_pair[0].address]),
        Manifests.ingress("plain", "plain.test", "web"),
        Manifests.nginx_ingress("optout", "optout.test", "web", {"enable-global-auth": "false"}),
        Manifests.nginx_ingress("own", "own.test", "web", {"auth-url": service.url("/allow")}),
        Manifests.ingress("solver", "plain.test", "web", path="/.well-known/acme-challenge/token", path_type="Exact"),
    )
    manifests.write("config.yaml", _config_map({"global-auth-url": service.url("/deny")}))
    proxy = twingress("--nginx-configmap", CONFIG)
    assert _get(proxy, "plain.test")[0] == 401
    assert _get(proxy, "optout.test")[0] == 200
    assert _get(proxy, "own.test")[0] == 200
    assert _get(proxy, "plain.test", "/.well-known/acme-challenge/token")[0] == 200

    _apply(manifests, proxy, {"global-auth-url": service.url("/allow"), "global-auth-response-headers": "X-Auth-Request-User"})
    status, _, body = _get(proxy, "plain.test", headers={"X-Auth-Request-User": "mallory"})
    assert status == 200 and json.loads(body)["headers"]["X-Auth-Request-User"] == ["alice"]

    _apply(manifests, proxy, {"global-auth-url": service.url("/deny"), "global-auth-signin": "https://login.test/start"})
    status, fields, _ = _get(proxy, "plain.test", "/x?y=1")
    assert status == 302 and fields["location"] == "https://login.test/start?rd=http://plain.test%2Fx%3Fy%3D1"  # $escaped_request_uri


@pytest.mark.parametrize(
    ("key", "value"),
    [("global-auth-method", "FETCH"), ("global-auth-snippet", "proxy_set_header X-Tenant a;"), ("global-auth-cache-duration", "forever")],
)
def test_global_auth_that_cannot_be_honoured_closes_what_it_covers(
    manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend], service: Service, key: str, value: str
) -> None:
    """A companion of global-auth-url twingress cannot honour: 503 with the reason, never 200 unauthenticated."""
    manifests.write(
        "all.yaml",
        *manifests.service("web", [echo_pair[0].address]),
        Manifests.ingress("plain", "plain.test", "web"),
        Manifests.nginx_ingress("optout", "optout.test", "web", {"enable-global-auth": "false"}),
    )
    manifests.write("config.yaml", _config_map({"global-auth-url": service.url("/allow"), key: value}))
    proxy = twingress("--nginx-configmap", CONFIG)
    assert _get(proxy, "plain.test")[0] == 503
    assert _get(proxy, "optout.test")[0] == 200  # not covered by global auth, not closed by it
    assert key in _deny_reason(proxy, "plain.test")
    assert proxy.metric("twingress_http_denied_total", reason="closed", route="default/plain") == 1
    assert proxy.metric("twingress_object_problems", reason="UnenforcedGuard") >= 1
    problems = [p for p in proxy.routes()["problems"] if p["reason"] == "UnenforcedGuard"]
    assert problems and problems[0]["object"] == "ConfigMap/default/ingress-nginx-controller"


def test_source_ranges_and_block_cidrs(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """
    configmap.md "whitelist-source-range" / "denylist-source-range" ("can be overwritten by an annotation
    on an Ingress rule"), "block-cidrs" (global_access_block.go: 403); the client here is 127.0.0.1.
    """
    manifests.write(
        "all.yaml",
        *manifests.service("web", [echo_pair[0].address]),
        Manifests.ingress("plain", "plain.test", "web"),
        Manifests.nginx_ingress("own", "own.test", "web", {"whitelist-source-range": "127.0.0.1/32", "denylist-source-range": "192.0.2.0/24"}),
    )
    manifests.write("config.yaml", _config_map({"whitelist-source-range": "192.0.2.0/24"}))
    proxy = twingress("--nginx-configmap", CONFIG)
    assert _get(proxy, "plain.test")[0] == 403
    assert _get(proxy, "own.test")[0] == 200

    _apply(manifests, proxy, {"denylist-source-range": "127.0.0.0/8"})
    assert _get(proxy, "plain.test")[0] == 403
    assert _get(proxy, "own.test")[0] == 200  # its own deny list replaces the global one

    _apply(manifests, proxy, {"block-cidrs": "10.0.0.0/8, 127.0.0.1"})
    assert [_get(proxy, host)[0] for host in ("plain.test", "own.test", "nowhere.test")] == [403, 403, 403]
    assert proxy.routes()["globalBlock"]["cidrs"] == ["10.0.0.0/8", "127.0.0.1/32"]
    assert proxy.metric("twingress_http_denied_total", reason="block-cidrs") == 3

    _apply(manifests, proxy, {"block-user-agents": "AlphaBot, ~*crawler", "block-referers": "~*example\\.com"})
    assert _get(proxy, "plain.test", headers={"User-Agent": "alphabot"})[0] == 403
    assert _get(proxy, "plain.test", headers={"User-Agent": "A Crawler/1.0"})[0] == 403
    assert _get(proxy, "plain.test", headers={"Referer": "https://www.EXAMPLE.com/"})[0] == 403
    assert _get(proxy, "plain.test", headers={"User-Agent": "curl/8", "Referer": "https://other.test/"})[0] == 200
    assert proxy.metric("twingress_http_denied_total", reason="block-user-agents") == 2

    _apply(manifests, proxy, {"block-cidrs": "10.0.0.0/8, 127.0.0.300"})
    assert [_get(proxy, host)[0] for host in ("plain.test", "own.test")] == [503, 503]
    assert "block-cidrs" in _deny_reason(proxy, "plain.test")

    _apply(manifests, proxy, {"whitelist-source-range": "not-a-cidr"})
    assert _get(proxy, "plain.test")[0] == 503 and _get(proxy, "own.test")[0] == 200  # own.test has its own allow list


def test_guards_twingress_does_not_enforce_close_every_route(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """configmap.md "modsecurity-snippet" (ModSecurity is not run here), snippets that may guard, a misspelt guard key: 503, never 200."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("plain", "plain.test", "web"))
    manifests.write("config.yaml", _config_map({"modsecurity-snippet": "SecRuleEngine On"}))
    proxy = twingress("--nginx-configmap", CONFIG)
    assert _get(proxy, "plain.test")[0] == 503 and "modsecurity-snippet" in _deny_reason(proxy, "plain.test")
    for data in ({"server-snippet": "allow 10.0.0.0/8; deny all;"}, {"whitelist-source-ranges": "10.0.0.0/8"}):
        _apply(manifests, proxy, data)
        assert _get(proxy, "plain.test")[0] == 503 and next(iter(data)) in _deny_reason(proxy, "plain.test")
    _apply(manifests, proxy, {"server-snippet": "more_set_headers 'X-Frame-Options: DENY';"})
    assert _get(proxy, "plain.test")[0] == 200  # header directives only: reported, harmless
