"""
upstream-hash-by, service-upstream, server-alias and from-to-www-redirect through twistd, real sockets.

ingress-nginx's annotations page (docs/user-guide/nginx-configuration/annotations.md), sections
"Custom NGINX upstream hashing", "Service Upstream", "Server Alias" and "Redirect from/to www".
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any, Optional

import pytest

from tests.support import EchoBackend, Manifests, Twingress


def _ingress(name: str, host: str, service: str, annotations: dict[str, str]) -> dict[str, Any]:
    return Manifests.nginx_ingress(name, host, service, annotations)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    pods = [EchoBackend(f"pod-{n}") for n in range(3)]
    via_service = EchoBackend("cluster-ip")
    manifests = Manifests(tmp_path_factory.mktemp("hosts"))
    cluster_ip_service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc", "namespace": "default"},
        "spec": {"clusterIP": "127.0.0.1", "ports": [{"name": "http", "port": via_service.port}]},
    }
    service_upstream = _ingress("service-upstream", "service.test", "svc", {"service-upstream": "true"})
    service_upstream["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] = {"number": via_service.port}
    manifests.write(
        "all.yaml",
        *manifests.service("web", [pod.address for pod in pods]),
        cluster_ip_service,
        _ingress("by-uri", "uri.test", "web", {"upstream-hash-by": "$request_uri"}),
        _ingress("by-user", "user.test", "web", {"upstream-hash-by": "${http_x_user}-${cookie_team}"}),
        _ingress("aliased", "main.test", "web", {"server-alias": "alias.test"}),
        _ingress("www", "www.example.test", "web", {"from-to-www-redirect": "true"}),
        service_upstream,
    )
    twingress = Twingress(manifests.path)
    yield twingress
    twingress.stop()
    for pod in [*pods, via_service]:
        pod.stop()


def _get(proxy: Twingress, host: str, target: str = "/", headers: Optional[dict[str, str]] = None) -> tuple[int, Any, Optional[str]]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("GET", target, headers={"Host": host, **(headers or {})})
    response = connection.getresponse()
    body = response.read()
    name = json.loads(body)["name"] if response.status == 200 else None
    return response.status, name, response.getheader("Location")


def test_the_same_uri_always_reaches_the_same_endpoint(proxy: Twingress) -> None:
    chosen = {f"/item/{n}": _get(proxy, "uri.test", f"/item/{n}")[1] for n in range(30)}
    assert len(set(chosen.values())) == 3  # different URIs are spread
    for _ in range(2):
        assert {target: _get(proxy, "uri.test", target)[1] for target in chosen} == chosen


def test_a_key_of_header_and_cookie(proxy: Twingress) -> None:
    for user in ("alice", "bob", "carol"):
        backends = {_get(proxy, "user.test", "/", {"X-User": user, "Cookie": "team=red"})[1] for _ in range(6)}
        assert len(backends) == 1


def test_server_alias(proxy: Twingress) -> None:
    assert _get(proxy, "alias.test")[0] == 200
    assert _get(proxy, "other.test")[0] == 404


def test_from_to_www_redirect(proxy: Twingress) -> None:
    status, _, location = _get(proxy, "example.test:8080", "/page?x=1")
    assert (status, location) == (308, "http://www.example.test/page?x=1")
    assert _get(proxy, "www.example.test")[0] == 200


def test_service_upstream_goes_to_the_cluster_ip(proxy: Twingress) -> None:
    assert _get(proxy, "service.test")[1] == "cluster-ip"
