"""
Error pages from a Service through twistd: ingress-nginx's custom-http-errors with default-backend.

The facts checked are ingress-nginx's: annotations.md "Custom HTTP Errors" (the listed codes go to the
default-backend annotation's Service) and "Default Backend" (also used while the route's Service has no
endpoint); user-guide/custom-errors.md (the X-* fields, and "NGINX does not change the response from the
custom default backend"); the e2e test disableproxyintercepterrors.go (its status, X-Request-ID passed
on); nginx.tmpl's @custom location (GET "/" with the client's method, Host as sent). The error backend is
the echo backend: it answers 200 with what it received.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.proxy.h2client import H2Client
from tests.support import EchoBackend, Manifests, Twingress, refusing_address

PAGES = {"custom-http-errors": "404,502,503", "default-backend": "errors"}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    pod, errors = EchoBackend("pod"), EchoBackend("errors")
    dead = refusing_address()
    manifests = Manifests(tmp_path_factory.mktemp("error-pages"))
    manifests.write(
        "all.yaml",
        *manifests.service("web", [pod.address]),
        *manifests.service("errors", [errors.address]),
        *manifests.service("dead", [dead]),
        *manifests.service("empty", []),
        Manifests.nginx_ingress("shop", "shop.test", "web", PAGES),
        Manifests.nginx_ingress("down", "down.test", "dead", PAGES),
        Manifests.nginx_ingress("unready", "unready.test", "empty", {"default-backend": "errors"}),
        Manifests.nginx_ingress("passing", "passing.test", "web", {**PAGES, "disable-proxy-intercept-errors": "true"}),
        Manifests.nginx_ingress("own", "own.test", "web", {"custom-http-errors": "404"}),
        Manifests.nginx_ingress("lost", "lost.test", "web", {"custom-http-errors": "404", "default-backend": "missing"}),
    )
    twingress = Twingress(manifests.path, "--http2-cleartext")
    yield twingress
    twingress.stop()
    pod.stop()
    errors.stop()


def _get(proxy: Twingress, host: str, target: str, method: str = "GET", **headers: str) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request(method, target, headers={"Host": host, **headers})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    is_json = response.getheader("content-type") == "application/json"
    return response.status, json.loads(body) if is_json and body else body


def _fields(seen: dict[str, Any]) -> dict[str, str]:
    return {name.lower(): values[0] for name, values in seen["headers"].items()}


def test_a_listed_status_from_the_upstream_is_answered_by_the_error_backend(proxy: Twingress) -> None:
    status, seen = _get(proxy, "shop.test", "/cart?status=404", Accept="application/json", **{"X-Request-ID": "req-1"})
    assert status == 200 and seen["name"] == "errors"  # the error backend's own answer, unchanged
    assert seen["method"] == "GET" and seen["uri"] == "/" and seen["host"] == "shop.test"
    fields = _fields(seen)
    assert {key: fields.get(key) for key in ("x-code", "x-format", "x-original-uri", "x-namespace", "x-ingress-name", "x-service-name", "x-service-port", "x-request-id")} == {
        "x-code": "404", "x-format": "application/json", "x-original-uri": "/cart?status=404", "x-namespace": "default",
        "x-ingress-name": "shop", "x-service-name": "web", "x-service-port": "80", "x-request-id": "req-1",
    }


def test_other_statuses_pass_unchanged(proxy: Twingress) -> None:
    status, seen = _get(proxy, "shop.test", "/cart?status=500")
    assert status == 500 and seen["name"] == "pod"
    status, seen = _get(proxy, "shop.test", "/cart")
    assert status == 200 and seen["name"] == "pod"


def test_the_method_is_kept_and_the_body_is_not_sent_again(proxy: Twingress) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("POST", "/form?status=404", body=b"x" * 1000, headers={"Host": "shop.test"})
    response = connection.getresponse()
    seen = json.loads(response.read())
    assert response.status == 200 and seen["name"] == "errors" and seen["method"] == "POST" and seen["body_bytes"] == 0
    connection.request("GET", "/next", headers={"Host": "shop.test"})  # the connection serves on
    follow = connection.getresponse()
    assert follow.status == 200 and json.loads(follow.read())["name"] == "pod"
    connection.close()


def test_an_error_the_proxy_makes_is_answered_by_the_error_backend_too(proxy: Twingress) -> None:
    """error_page covers nginx's own 502 (no endpoint accepts)."""
    status, seen = _get(proxy, "down.test", "/x")
    assert status == 200 and seen["name"] == "errors" and _fields(seen)["x-code"] == "502"


def test_a_route_without_endpoints_is_served_by_the_default_backend(proxy: Twingress) -> None:
    """"Default Backend": the request as it is (path kept), with X-Code 503 and the route's names."""
    status, seen = _get(proxy, "unready.test", "/orders?id=1")
    assert status == 200 and seen["name"] == "errors" and seen["uri"] == "/orders?id=1"
    fields = _fields(seen)
    assert fields["x-code"] == "503" and fields["x-service-name"] == "empty" and fields["x-ingress-name"] == "unready"


def test_disabled_interception_passes_the_upstreams_errors(proxy: Twingress) -> None:
    status, seen = _get(proxy, "passing.test", "/x?status=404")
    assert status == 404 and seen["name"] == "pod"


def test_without_a_default_backend_the_proxys_own_page_hides_the_upstreams(proxy: Twingress) -> None:
    for host in ("own.test", "lost.test"):  # none named; one named that does not exist (reported)
        status, body = _get(proxy, host, "/secret?status=404")
        assert status == 404 and b"pod" not in body and b"404" in body
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert {("Ingress/default/own", "UnsupportedAnnotation"), ("Ingress/default/lost", "ServiceNotFound")} <= problems


def test_http2_requests_get_the_error_page(proxy: Twingress) -> None:
    client = H2Client(proxy.http_port, tls=False)
    response = client.get("/cart?status=404", authority="shop.test")
    client.close()
    seen = json.loads(bytes(response.body))
    assert response.status == 200 and seen["name"] == "errors" and _fields(seen)["x-code"] == "404"


def test_a_dead_error_backend_leaves_the_proxys_own_answer(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The error request is not retried nor intercepted again: nginx answers its own 502."""
    pod = EchoBackend("pod")
    manifests = Manifests(tmp_path_factory.mktemp("dead-error-backend"))
    closed = refusing_address()
    manifests.write(
        "all.yaml",
        *manifests.service("web", [pod.address]),
        *manifests.service("errors", [closed]),
        Manifests.nginx_ingress("shop", "shop.test", "web", PAGES),
    )
    twingress = Twingress(manifests.path)
    try:
        status, body = _get(twingress, "shop.test", "/x?status=404")
        assert status == 502 and b"pod" not in body
    finally:
        twingress.stop()
        pod.stop()
