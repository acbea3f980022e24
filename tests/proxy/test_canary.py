"""
Canary Ingresses through twistd in manifests mode, real sockets, two real backends.

ingress-nginx's annotations page, section "Canary" (docs/user-guide/nginx-configuration/annotations.md),
is the specification: header, then cookie, then weight.
"""

from __future__ import annotations

import http.client
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any, Optional

import pytest

from tests.support import EchoBackend, Manifests, Twingress


def _ingress(name: str, host: str, service: str, annotations: dict[str, str], path: str = "/") -> dict[str, Any]:
    return Manifests.nginx_ingress(name, host, service, annotations, path=path, path_type="ImplementationSpecific")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    stable, canary = EchoBackend("stable-pod"), EchoBackend("canary-pod")
    manifests = Manifests(tmp_path_factory.mktemp("canary"))
    manifests.write(
        "all.yaml",
        *manifests.service("stable", [stable.address]),
        *manifests.service("canary", [canary.address]),
        _ingress("main", "shop.test", "stable", {"rewrite-target": "/v1/$1"}, path="/(.*)"),
        _ingress("shop-canary", "shop.test", "canary", {"canary": "true", "canary-by-header": "X-Canary", "canary-by-cookie": "beta", "canary-weight": "25"}, path="/(.*)"),
        _ingress("half", "half.test", "stable", {}),
        _ingress("half-canary", "half.test", "canary", {"canary": "true", "canary-weight": "50"}),
        _ingress("lonely-canary", "lonely.test", "canary", {"canary": "true", "canary-weight": "100"}),
    )
    twingress = Twingress(manifests.path)
    yield twingress
    twingress.stop()
    stable.stop()
    canary.stop()


def _backend(proxy: Twingress, host: str, target: str = "/", headers: Optional[dict[str, str]] = None, connection: Optional[http.client.HTTPConnection] = None) -> dict[str, Any]:
    connection = connection or http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("GET", target, headers={"Host": host, **(headers or {})})
    response = connection.getresponse()
    body = response.read()
    assert response.status == 200, body
    return json.loads(body)


@pytest.mark.parametrize(
    ("headers", "backend"),
    [
        ({"X-Canary": "always"}, "canary-pod"),
        ({"X-Canary": "never", "Cookie": "beta=always"}, "stable-pod"),  # the header decides before the cookie
        ({"Cookie": "session=1; beta=always"}, "canary-pod"),
        ({"X-Canary": "never"}, "stable-pod"),
    ],
)
def test_header_then_cookie_decide(proxy: Twingress, headers: dict[str, str], backend: str) -> None:
    for _ in range(20):  # never the weight's 25%: these requests are decided before it
        assert _backend(proxy, "shop.test", "/item", headers)["name"] == backend


def test_the_canary_gets_the_main_ingress_rewrite(proxy: Twingress) -> None:
    """The canary's requests inherit the main Ingress's other annotations (here rewrite-target)."""
    seen = _backend(proxy, "shop.test", "/item?x=1", {"X-Canary": "always"})
    assert (seen["name"], seen["uri"]) == ("canary-pod", "/v1/item?x=1")


def test_the_weight_splits_requests(proxy: Twingress) -> None:
    """canary-weight 50: over 400 requests on keep-alive connections both backends get a share near half."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    counts = Counter(_backend(proxy, "half.test", connection=connection)["name"] for _ in range(400))
    assert set(counts) == {"stable-pod", "canary-pod"}
    assert 140 <= counts["canary-pod"] <= 260, counts  # binomial(400, 0.5): 6 standard deviations either side


def test_a_canary_without_main_ingress_serves_nothing(proxy: Twingress) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("GET", "/", headers={"Host": "lonely.test"})
    assert connection.getresponse().status == 404
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert ("Ingress/default/lonely-canary", "CanaryWithoutMain") in problems


def test_requests_are_counted_under_the_ingress_that_served_them(proxy: Twingress) -> None:
    for _ in range(3):
        _backend(proxy, "shop.test", "/", {"X-Canary": "always"})
    metrics = proxy.admin("/metrics")[1].decode()
    assert 'route="default/shop-canary"' in metrics
