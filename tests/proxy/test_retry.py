"""
proxy-next-upstream and load-balance: ewma through twistd with real backends: one pod failing (or slow) among healthy ones.

ingress-nginx's annotations page, "Custom timeouts" (proxy-next-upstream, -tries, -timeout),
with nginx's proxy_next_upstream rules (docs/user-guide/nginx-configuration/annotations.md).
"""

from __future__ import annotations

import http.client
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import EchoBackend, Manifests, Twingress


def _ingress(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return Manifests.nginx_ingress(name, f"{name}.test", "web", annotations)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    pods = [EchoBackend("bad-pod"), EchoBackend("good-pod")]
    manifests = Manifests(tmp_path_factory.mktemp("retry"))
    manifests.write(
        "all.yaml",
        *manifests.service("web", [pod.address for pod in pods]),
        Manifests.ingress("plain", "plain.test", "web"),
        _ingress("on-503", {"proxy-next-upstream": "error timeout http_503"}),
        _ingress("on-503-post", {"proxy-next-upstream": "http_503 non_idempotent"}),
        _ingress("on-timeout", {"proxy-next-upstream": "timeout", "proxy-read-timeout": "1"}),
        _ingress("off", {"proxy-next-upstream": "off", "proxy-read-timeout": "1"}),
        _ingress("ewma", {"load-balance": "ewma"}),
    )
    twingress = Twingress(manifests.path)
    yield twingress
    twingress.stop()
    for pod in pods:
        pod.stop()


def _answers(proxy: Twingress, host: str, target: str, method: str = "GET", count: int = 8) -> Counter[tuple[int, str]]:
    """(status, backend) of C{count} requests on one keep-alive connection."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    seen: Counter[tuple[int, str]] = Counter()
    for _ in range(count):
        connection.request(method, target, headers={"Host": host})
        response = connection.getresponse()
        body = response.read()
        seen[(response.status, json.loads(body)["name"] if body.startswith(b"{") else "")] += 1
    return seen


def test_without_the_annotation_a_503_goes_to_the_client(proxy: Twingress) -> None:
    assert _answers(proxy, "plain.test", "/?on=bad-pod&status=503") == Counter({(503, "bad-pod"): 4, (200, "good-pod"): 4})


def test_a_503_is_passed_to_the_next_endpoint(proxy: Twingress) -> None:
    assert _answers(proxy, "on-503.test", "/?on=bad-pod&status=503") == Counter({(200, "good-pod"): 8})


def test_a_post_is_passed_on_only_with_non_idempotent(proxy: Twingress) -> None:
    assert _answers(proxy, "on-503.test", "/?on=bad-pod&status=503", "POST") == Counter({(503, "bad-pod"): 4, (200, "good-pod"): 4})
    assert _answers(proxy, "on-503-post.test", "/?on=bad-pod&status=503", "POST") == Counter({(200, "good-pod"): 8})


def test_a_timeout_is_passed_on_unless_off(proxy: Twingress) -> None:
    assert _answers(proxy, "on-timeout.test", "/?on=bad-pod&delay=3", count=4) == Counter({(200, "good-pod"): 4})
    assert _answers(proxy, "off.test", "/?on=bad-pod&delay=3", count=4) == Counter({(504, ""): 2, (200, "good-pod"): 2})


def test_ewma_sends_requests_to_the_endpoint_that_answers_faster(proxy: Twingress) -> None:
    """
    ingress-nginx "Custom NGINX load balancing", load-balance: ewma; round robin would split them evenly.
    Until both endpoints are measured, an unmeasured one ties with the other's score (slow start) and
    a tie goes either way, so the first requests are a warm-up; after it the fast pod takes them all.
    """
    _answers(proxy, "ewma.test", "/?on=bad-pod&delay=0.2", count=10)
    seen = _answers(proxy, "ewma.test", "/?on=bad-pod&delay=0.2", count=30)
    assert seen[(200, "bad-pod")] <= 1 and seen[(200, "good-pod")] >= 29, seen
