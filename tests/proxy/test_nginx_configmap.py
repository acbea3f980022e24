"""
The ingress-nginx controller ConfigMap (--nginx-configmap) through twistd in manifests mode: its keys
are every route's defaults, and an edit applies live (docs/user-guide/nginx-configuration/configmap.md).
"""

from __future__ import annotations

import http.client
import json
import subprocess

from tests.support import EchoBackend, Manifests, Twingress, free_port, raw_exchange


def _post(proxy: Twingress, host: str, size: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("POST", "/", body=b"x" * size, headers={"Host": host})
    response = connection.getresponse()
    response.read()
    return response.status


def test_configmap_keys_are_route_defaults_and_apply_live(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    echo = echo_pair[0]
    annotated = Manifests.ingress("annotated", "annotated.test", "web")
    annotated["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/proxy-body-size": "8k"}
    manifests.write("all.yaml", *manifests.service("web", [echo.address]), Manifests.ingress("plain", "plain.test", "web"), annotated)
    manifests.write("config.yaml", Manifests.controller_config_map({"proxy-body-size": "1k", "enable-brotli": "true"}))
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
    assert _post(proxy, "plain.test", 2000) == 413  # the ConfigMap's 1k
    assert _post(proxy, "annotated.test", 2000) == 200  # the annotation wins over the ConfigMap
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert ("ConfigMap/default/ingress-nginx-controller", "UnsupportedConfigKey") in problems  # enable-brotli
    generation = proxy.generation()
    manifests.write("config.yaml", Manifests.controller_config_map({"proxy-body-size": "4k"}))
    proxy.wait_generation_above(generation)
    assert _post(proxy, "plain.test", 2000) == 200


def test_header_fields_from_the_configmaps(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """add-headers replace the response's fields of those names; proxy-set-headers the request's."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("plain", "plain.test", "web"))
    response_fields = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "response-fields", "namespace": "default"},
                       "data": {"X-Frame-Options": "DENY", "X-Backend": "hidden"}}
    request_fields = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "request-fields", "namespace": "default"},
                      "data": {"X-Edge": "twingress"}}
    manifests.write("config.yaml", Manifests.controller_config_map({"add-headers": "default/response-fields", "proxy-set-headers": "default/request-fields"}),
                    response_fields, request_fields)
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("GET", "/", headers={"Host": "plain.test", "X-Edge": "from-the-client"})
    response = connection.getresponse()
    seen = json.loads(response.read())
    assert response.getheader("X-Frame-Options") == "DENY"
    assert response.getheaders().count(("X-Backend", "hidden")) == 1 and ("X-Backend", echo_pair[0].name) not in response.getheaders()
    assert seen["headers"]["X-Edge"] == ["twingress"]


def test_client_keep_alive_settings_apply_live(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """keep-alive-requests: the connection closes after that many responses; keep-alive "0": no keep-alive."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("plain", "plain.test", "web"))
    manifests.write("config.yaml", Manifests.controller_config_map({"keep-alive-requests": "2"}))
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    closes = []
    for _ in range(4):
        connection.request("GET", "/", headers={"Host": "plain.test"})
        response = connection.getresponse()
        response.read()
        closes.append(response.getheader("Connection"))
    assert closes == [None, "close", None, "close"]  # http.client reconnects after each close
    generation = proxy.generation()
    manifests.write("config.yaml", Manifests.controller_config_map({"keep-alive": "0"}))
    proxy.wait_generation_above(generation)
    connection.request("GET", "/", headers={"Host": "plain.test"})
    response = connection.getresponse()
    response.read()
    assert response.getheader("Connection") == "close"


def test_ssl_protocols_apply_live(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """ssl-protocols "TLSv1.3": a TLS 1.2 client is refused; removing it lets TLS 1.2 in again."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("plain", "plain.test", "web"))
    manifests.write("config.yaml", Manifests.controller_config_map({"ssl-protocols": "TLSv1.3"}))
    https_port = free_port()
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP, "--https", f"tcp:{https_port}:interface=127.0.0.1")

    def handshake(version: str) -> bool:
        result = subprocess.run(
            ["openssl", "s_client", f"-{version}", "-connect", f"127.0.0.1:{https_port}", "-servername", "plain.test"],
            input=b"", capture_output=True, timeout=10,
        )
        return result.returncode == 0

    assert handshake("tls1_3") and not handshake("tls1_2")
    generation = proxy.generation()
    manifests.write("config.yaml", Manifests.controller_config_map({}))
    proxy.wait_generation_above(generation)
    assert handshake("tls1_2")


def test_use_proxy_protocol_applies_live(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """use-proxy-protocol: new connections must open with a PROXY header (its source is the client), until it is off again."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("plain", "plain.test", "web"))
    manifests.write("config.yaml", Manifests.controller_config_map({"use-proxy-protocol": "true"}))
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
    request = b"GET / HTTP/1.1\r\nHost: plain.test\r\nConnection: close\r\n\r\n"
    answer = raw_exchange(proxy.http_port, b"PROXY TCP4 198.51.100.7 10.0.0.1 40000 80\r\n" + request)
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"X-Forwarded-For": ["198.51.100.7"]' in answer
    assert not raw_exchange(proxy.http_port, request).startswith(b"HTTP/1.1 200 ")  # no header: not served
    generation = proxy.generation()
    manifests.write("config.yaml", Manifests.controller_config_map({}))
    proxy.wait_generation_above(generation)
    assert raw_exchange(proxy.http_port, request).startswith(b"HTTP/1.1 200 ")
