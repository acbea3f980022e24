"""
Trusted forwarding headers (ingress-nginx ConfigMap use-forwarded-headers, proxy-real-ip-cidr,
compute-full-forwarded-for; docs/user-guide/nginx-configuration/configmap.md) through twistd, real sockets.
"""

from __future__ import annotations

import http.client
import json
from typing import Any, Optional

from tests.support import EchoBackend, Manifests, Twingress

CONFIG = "default/ingress-nginx-controller"


def _config_map(data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ingress-nginx-controller", "namespace": "default"}, "data": data}


def _get(proxy: Twingress, host: str, headers: dict[str, str]) -> tuple[int, Optional[dict[str, Any]], Optional[str]]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("GET", "/x", headers={"Host": host, **headers})
    response = connection.getresponse()
    body = response.read()
    return response.status, json.loads(body)["headers"] if response.status == 200 else None, response.getheader("Location")


LB_HEADERS = {"X-Forwarded-For": "203.0.113.7, 127.0.0.9", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "shop.example", "X-Forwarded-Port": "443"}


def _setup(manifests: Manifests, echo: EchoBackend, data: dict[str, str]) -> None:
    secured = Manifests.ingress("secured", "tls.test", "web", tls=[{"hosts": ["tls.test"], "secretName": "none"}])
    manifests.write("all.yaml", *manifests.service("web", [echo.address]), Manifests.ingress("plain", "plain.test", "web"), secured)
    manifests.write("config.yaml", _config_map(data))


def test_headers_from_a_trusted_load_balancer_are_believed(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    _setup(manifests, echo_pair[0], {"use-forwarded-headers": "true", "proxy-real-ip-cidr": "127.0.0.0/8"})
    proxy = twingress("--nginx-configmap", CONFIG)
    status, seen, _ = _get(proxy, "plain.test", LB_HEADERS)
    assert status == 200 and seen is not None
    assert (seen["X-Forwarded-For"], seen["X-Real-Ip"], seen["X-Forwarded-Proto"], seen["X-Forwarded-Host"], seen["X-Forwarded-Port"]) == (
        ["203.0.113.7"], ["203.0.113.7"], ["https"], ["shop.example"], ["443"])
    # the load balancer terminated TLS: no redirect loop to https for a TLS host
    assert _get(proxy, "tls.test", LB_HEADERS)[0] == 200
    status, _, location = _get(proxy, "tls.test", {"X-Forwarded-Proto": "http"})
    assert status == 308 and location is not None and location.startswith("https://tls.test")


def test_compute_full_forwarded_for_appends_the_peer(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    _setup(manifests, echo_pair[0], {"use-forwarded-headers": "true", "compute-full-forwarded-for": "true"})
    proxy = twingress("--nginx-configmap", CONFIG)
    seen = _get(proxy, "plain.test", LB_HEADERS)[1]
    assert seen is not None and seen["X-Forwarded-For"] == ["203.0.113.7, 127.0.0.9, 127.0.0.1"] and seen["X-Real-Ip"] == ["203.0.113.7"]


def test_an_untrusted_peer_and_a_dropped_trust_get_their_headers_replaced(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    _setup(manifests, echo_pair[0], {"use-forwarded-headers": "true", "proxy-real-ip-cidr": "10.0.0.0/8"})
    proxy = twingress("--nginx-configmap", CONFIG)
    seen = _get(proxy, "plain.test", LB_HEADERS)[1]
    assert seen is not None and (seen["X-Forwarded-For"], seen["X-Forwarded-Proto"], seen["X-Forwarded-Host"]) == (["127.0.0.1"], ["http"], ["plain.test"])
    # trusted, then the ConfigMap edited to trust nothing: live on the same keep-alive connection
    generation = proxy.generation()
    manifests.write("config.yaml", _config_map({"use-forwarded-headers": "true"}))
    proxy.wait_generation_above(generation)
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)

    def forwarded_for() -> list[str]:
        connection.request("GET", "/", headers={"Host": "plain.test", **LB_HEADERS})
        return json.loads(connection.getresponse().read())["headers"]["X-Forwarded-For"]

    assert forwarded_for() == ["203.0.113.7"]
    generation = proxy.generation()
    manifests.write("config.yaml", _config_map({}))
    proxy.wait_generation_above(generation)
    assert forwarded_for() == ["127.0.0.1"]


def test_source_ranges_judge_the_forwarded_client_behind_a_trusted_proxy(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """The allow list sees the client a trusted load balancer names (nginx's realip runs before its access phase), never a spoofed one."""
    guarded = Manifests.nginx_ingress("guarded", "guarded.test", "web", {"allowlist-source-range": "203.0.113.0/24"})
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), guarded)
    manifests.write("config.yaml", _config_map({"use-forwarded-headers": "true", "proxy-real-ip-cidr": "127.0.0.0/8"}))
    proxy = twingress("--nginx-configmap", CONFIG)
    assert _get(proxy, "guarded.test", LB_HEADERS)[0] == 200  # the client is 203.0.113.7
    assert _get(proxy, "guarded.test", {"X-Forwarded-For": "198.51.100.1"})[0] == 403
    generation = proxy.generation()
    manifests.write("config.yaml", _config_map({"use-forwarded-headers": "true", "proxy-real-ip-cidr": "10.0.0.0/8"}))
    proxy.wait_generation_above(generation)
    assert _get(proxy, "guarded.test", LB_HEADERS)[0] == 403  # the peer is no longer trusted: it is 127.0.0.1
