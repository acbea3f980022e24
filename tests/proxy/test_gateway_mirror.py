"""
RequestMirror through twistd (manifests mode): copies of the requests reach the mirror backends,
whose answers are ignored; a share of the requests with percent; a mirror that is down never
costs the client its answer.

Restates the Gateway API conformance tests HTTPRouteRequestMirror, HTTPRouteRequestMultipleMirrors
and HTTPRouteRequestPercentageMirror (sigs.k8s.io/gateway-api/conformance v1.7.0, tests/*.go;
they read the mirror's logs, these read what the mirror backend recorded) and the field
documentation of HTTPRequestMirrorFilter (apis/v1/httproute_types.go): "Requests are sent to the
specified destination, but responses from that destination are ignored."
"""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.proxy.test_external_auth import Service
from tests.support import EchoBackend, Manifests, Twingress, refusing_address, wait_for_port
from tests.waiting import at_least, eventually

GW = "gateway.networking.k8s.io/v1"


@dataclass
class MirrorProxy:
    process: Twingress
    mirrors: dict[str, Service]


def _route(host: str, *mirrors: dict[str, Any]) -> dict[str, Any]:
    filters = [{"type": "RequestMirror", "requestMirror": mirror} for mirror in mirrors]
    return {
        "apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": host.split(".")[0], "namespace": "default"},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host], "rules": [{"filters": filters, "backendRefs": [{"name": "echo", "port": 80}]}]},
    }


@pytest.fixture(scope="module")
def mirror_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MirrorProxy]:
    echo = EchoBackend("pod-primary")
    mirrors = {"one": Service(), "two": Service()}
    manifests = Manifests(tmp_path_factory.mktemp("mirror"))
    process = Twingress(manifests.path, "--http2-cleartext")
    wait_for_port("127.0.0.1", process.http_port, process.process)
    generation = process.generation()
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        *manifests.service("mirror-one", [("127.0.0.1", mirrors["one"].port)]),
        *manifests.service("mirror-two", [("127.0.0.1", mirrors["two"].port)]),
        *manifests.service("mirror-down", [refusing_address()]),
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}},
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "default"},
         "spec": {"gatewayClassName": "twingress", "listeners": [{"name": "http", "port": process.http_port, "protocol": "HTTP"}]}},
        _route("single.test", {"backendRef": {"name": "mirror-one", "port": 80}}),
        _route("both.test", {"backendRef": {"name": "mirror-one", "port": 80}}, {"backendRef": {"name": "mirror-two", "port": 80}}),
        _route("half.test", {"backendRef": {"name": "mirror-two", "port": 80}, "percent": 50}),
        _route("down.test", {"backendRef": {"name": "mirror-down", "port": 80}}),
        _route("missing.test", {"backendRef": {"name": "no-such-service", "port": 80}}),
    )
    process.wait_generation_above(generation)
    yield MirrorProxy(process, mirrors)
    process.stop()
    echo.stop()
    for mirror in mirrors.values():
        mirror.stop()


def _send(proxy: MirrorProxy, host: str, target: str, method: str = "GET", body: bytes = b"") -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.process.http_port, timeout=10)
    connection.request(method, target, body=body or None, headers={"Host": host})
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    return response.status, json.loads(answer)["name"] if response.status == 200 else ""


def _copies(mirror: Service, path: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The requests the mirror recorded for C{path}, once there are C{count} (copies arrive after the answers)."""
    return at_least(lambda: [asked for asked in mirror.asked() if asked["path"] == path], count, f"copies of {path} at the mirror", timeout=timeout)


def _mirror_outcomes(proxy: MirrorProxy, route: str, outcome: str) -> float:
    """twingress_http_mirror_requests_total of the route whose label contains C{route}, for C{outcome}."""
    text = proxy.process.admin("/metrics")[1].decode()
    lines = [line for line in text.splitlines() if line.startswith("twingress_http_mirror_requests_total{") and f'outcome="{outcome}"' in line and route in line]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0


def test_a_request_is_copied_to_the_mirror(mirror_proxy: MirrorProxy) -> None:
    """HTTPRouteRequestMirror: the client gets the backend's answer; the mirror gets the same request, body included."""
    assert _send(mirror_proxy, "single.test", "/copied?x=1") == (200, "pod-primary")
    (copy,) = _copies(mirror_proxy.mirrors["one"], "/copied?x=1", 1)
    assert copy["method"] == "GET"
    assert ("Host", "single.test") in [tuple(pair) for pair in copy["headers"]]
    # Under Twisted's write buffer (64 KiB), so that the copy can never be paused and then cut by design (mirror.py:
    # a copy never holds the original up). A 100 kB body's copy went missing once in CI under load, the likely cause.
    body = b"b" * 50_000
    assert _send(mirror_proxy, "single.test", "/posted", "POST", body) == (200, "pod-primary")
    (posted,) = _copies(mirror_proxy.mirrors["one"], "/posted", 1)
    assert (posted["method"], posted["body"]) == ("POST", len(body))


def test_an_http2_request_is_copied_too(mirror_proxy: MirrorProxy) -> None:
    """An HTTP/2 client's request (h2c with prior knowledge) goes to an HTTP/1.1 backend and its mirror alike."""
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "15", "--http2-prior-knowledge", "-H", "Host: single.test", "--data-binary", "x" * 5000,
         f"http://127.0.0.1:{mirror_proxy.process.http_port}/h2"],
        capture_output=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "pod-primary"
    (copy,) = _copies(mirror_proxy.mirrors["one"], "/h2", 1)
    assert (copy["method"], copy["body"]) == ("POST", 5000)


def test_every_mirror_of_a_rule_gets_a_copy(mirror_proxy: MirrorProxy) -> None:
    """HTTPRouteRequestMultipleMirrors."""
    assert _send(mirror_proxy, "both.test", "/both") == (200, "pod-primary")
    assert len(_copies(mirror_proxy.mirrors["one"], "/both", 1)) == 1
    assert len(_copies(mirror_proxy.mirrors["two"], "/both", 1)) == 1


def test_percent_copies_a_share_of_the_requests(mirror_proxy: MirrorProxy) -> None:
    """
    HTTPRouteRequestPercentageMirror: percent 50 of 400 requests; the count is binomial (mean 200,
    sd 10), so 140..260 fails by chance with a probability under 1e-8.
    """
    for _ in range(400):
        assert _send(mirror_proxy, "half.test", "/half") == (200, "pod-primary")

    def settled() -> int:
        """The copies the mirror has, once each has been answered back to the proxy (none lands later than its answer)."""
        copies = len([asked for asked in mirror_proxy.mirrors["two"].asked() if asked["path"] == "/half"])
        return copies if copies >= 140 and _mirror_outcomes(mirror_proxy, "default/half", "answered") == copies else 0

    count = eventually(settled, "the copies of /half at the mirror, each answered")
    assert 140 <= count <= 260, count


def test_a_mirror_that_is_down_costs_the_client_nothing(mirror_proxy: MirrorProxy) -> None:
    """Responses (and failures) of the mirror are ignored: every request is answered; the failed copies are counted."""
    for _ in range(20):
        assert _send(mirror_proxy, "down.test", "/down") == (200, "pod-primary")

    eventually(lambda: _mirror_outcomes(mirror_proxy, "default/down", "failed") >= 20, "20 failed copies counted", interval=0.1)
    assert _mirror_outcomes(mirror_proxy, "default/down", "failed") == 20


def test_a_mirror_whose_backend_is_missing_is_dropped(mirror_proxy: MirrorProxy) -> None:
    """The rule is served; the route's ResolvedRefs says BackendNotFound (HTTPRequestMirrorFilter.BackendRef)."""
    assert _send(mirror_proxy, "missing.test", "/") == (200, "pod-primary")
    routes = mirror_proxy.process.routes()["gatewayAPI"]["httpRoutes"]["default/missing"]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in routes[0]["conditions"]}
    assert conditions["ResolvedRefs"] == ("False", "BackendNotFound")
