"""
examples/nginx-migration, served by its own run.sh (echo backends and twistd, as `make run-migration`):
a realistic set of ingress-nginx Ingresses and its ConfigMap, unchanged but for ingressClassName.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any, Optional

import pytest

from tests.support import ROOT, ProcessExited, free_port, raw_exchange
from tests.waiting import eventually


class Example:
    def __init__(self, http_port: int, admin_port: int) -> None:
        self.http_port, self.admin_port = http_port, admin_port

    def request(self, host: str, target: str = "/", method: str = "GET", body: Optional[bytes] = None, headers: Optional[dict[str, str]] = None) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        connection.request(method, target, body=body, headers={"Host": host, **(headers or {})})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()

    def routes(self) -> dict[str, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=10)
        connection.request("GET", "/debug/routes")
        return json.loads(connection.getresponse().read())


@pytest.fixture(scope="module")
def example() -> Iterator[Example]:
    http_port, admin_port = free_port(), free_port()
    env = os.environ | {"HTTP": f"tcp:{http_port}:interface=127.0.0.1", "HTTPS": "", "ADMIN": f"tcp:{admin_port}:interface=127.0.0.1"}
    process = subprocess.Popen([str(ROOT / "examples" / "nginx-migration" / "run.sh")], env=env, cwd=ROOT, start_new_session=True)
    running = Example(http_port, admin_port)

    def serving() -> bool:
        if process.poll() is not None:
            raise ProcessExited(f"the example exited with {process.returncode}")
        return running.request("api.example.com")[0] == 200

    eventually(serving, "the example to serve api.example.com", timeout=20, interval=0.2, fatal=(ProcessExited,))
    yield running
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(10)


def test_the_shop_rewrite_prefix_and_sticky_cookie(example: Example) -> None:
    status, headers, body = example.request("shop.example.com", "/shop/cart?item=1", headers={"X-Canary": "never"})
    assert status == 200
    seen = json.loads(body)
    assert seen["name"] in ("shop-pod-a", "shop-pod-b") and seen["uri"] == "/cart?item=1"
    assert seen["headers"]["X-Forwarded-Prefix"] == ["/shop"]
    assert headers["set-cookie"].startswith("SHOPID=") and "Path=/shop" in headers["set-cookie"]


def test_the_canary_by_header(example: Example) -> None:
    status, _, body = example.request("shop.example.com", "/shop/", headers={"X-Canary": "always"})
    assert status == 200 and json.loads(body)["name"] == "shop-v2-pod"


def test_the_api_keeps_a_user_on_one_pod_and_answers_its_alias(example: Example) -> None:
    for user in ("u1", "u2", "u3"):
        pods = {json.loads(example.request("api.example.com", headers={"X-User-Id": user})[2])["name"] for _ in range(5)}
        assert len(pods) == 1
    assert example.request("api-v1.example.com")[0] == 200


def test_redirects(example: Example) -> None:
    assert example.request("example.com", "/about")[0] == 308
    assert example.request("example.com", "/about")[1]["location"] == "http://www.example.com/about"
    status, headers, _ = example.request("www.example.com", "/")
    assert (status, headers["location"]) == (302, "http://www.example.com/shop/")
    status, headers, _ = example.request("old-shop.example.com", "/anything")
    assert (status, headers["location"]) == (301, "https://shop.example.com/shop/")


def test_the_configmap_body_limit_and_the_annotation_over_it(example: Example) -> None:
    nine_megabytes = b"x" * (9 << 20)
    head = b"POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: %d\r\n\r\n" % len(nine_megabytes)
    assert raw_exchange(example.http_port, head).startswith(b"HTTP/1.1 413 ")  # ConfigMap: 8m, refused at the head
    status, _, body = example.request("shop.example.com", "/shop/upload", "POST", nine_megabytes, {"X-Canary": "never"})
    assert status == 200 and json.loads(body)["body_bytes"] == 9 << 20  # the shop's own 20m


def test_what_cannot_be_honoured_is_closed_and_reported(example: Example) -> None:
    assert example.request("admin.example.com")[0] == 403  # auth-tls-secret names no Secret: closed
    problems = sorted((p["object"], p["reason"]) for p in example.routes()["problems"])
    assert problems == [
        ("ConfigMap/ingress-nginx/ingress-nginx-controller", "UnsupportedConfigKey"),
        ("ConfigMap/ingress-nginx/ingress-nginx-controller", "UnsupportedConfigKey"),
        ("Ingress/api/admin", "InvalidClientAuth"),
        ("Ingress/api/admin", "UnsupportedAnnotation"),
    ]
