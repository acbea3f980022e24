"""
Gateways told apart by address (--gateway-addresses), through twistd in manifests mode with real
sockets: HTTPRouteMultipleGateways (sigs.k8s.io/gateway-api conformance v1.6.3,
tests/httproute-multiple-gateways.go): two Gateways with HTTP listeners on one port, a catch-all
route each and a route shared by both; a client reaches each Gateway at its own address (a pod-like
address of the test's network namespace) and gets that Gateway's routes, over HTTP/1.1 and h2c.
"""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import EchoBackend, Manifests, Twingress, free_port, wait_for_port

GW = "gateway.networking.k8s.io/v1"
ONE, TWO = "10.244.0.30", "10.244.0.31"


def _route(name: str, service: str, parents: list[str], path: str = "/") -> dict[str, Any]:
    rule = {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": [{"name": service, "port": 80}]}
    spec = {"parentRefs": [{"name": p} for p in parents], "rules": [rule]}
    return {"apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Twingress, int]]:
    echoes = {name: EchoBackend(f"pod-{name}") for name in ("shared", "one", "two")}
    manifests = Manifests(tmp_path_factory.mktemp("gateway-addresses"))
    manifests.write("services.yaml", *(obj for name, echo in echoes.items() for obj in manifests.service(name, [echo.address])))
    port = free_port()
    process = Twingress(manifests.path, "--http", f"tcp:{port}", "--gateway-addresses", f"{ONE},{TWO}", "--http2-cleartext")
    wait_for_port("127.0.0.1", port, process.process)
    generation = process.generation()
    listeners = [{"name": "http", "port": port, "protocol": "HTTP"}]
    gateways = [
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": name, "namespace": "default", "creationTimestamp": f"2024-01-0{n}T00:00:00Z"},
         "spec": {"gatewayClassName": "twingress", "listeners": listeners}}
        for n, name in ((1, "one"), (2, "two"))
    ]
    manifests.write(
        "gateway.yaml",
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}},
        *gateways,
        _route("shared", "shared", ["one", "two"], "/shared"), _route("one", "one", ["one"]), _route("two", "two", ["two"]),
    )
    process.wait_generation_above(generation)
    yield process, port
    process.stop()
    for echo in echoes.values():
        echo.stop()


def _backend(address: str, port: int, path: str) -> str:
    connection = http.client.HTTPConnection(address, port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": "any.example"})
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, (response.status, body[:200])
        return str(json.loads(body)["name"])
    finally:
        connection.close()


def test_each_gateway_answers_at_its_own_address(proxy: tuple[Twingress, int]) -> None:
    """The dedicated routes at their Gateway's address only; the shared one at both."""
    _, port = proxy
    assert _backend(ONE, port, "/") == "pod-one"
    assert _backend(TWO, port, "/") == "pod-two"
    assert _backend(ONE, port, "/shared") == _backend(TWO, port, "/shared") == "pod-shared"


def test_h2c_is_routed_by_the_address_too(proxy: tuple[Twingress, int]) -> None:
    """HTTP/2 with prior knowledge (the GRPCRoute path) picks the table by address as HTTP/1.1 does."""
    _, port = proxy
    for address, name in ((ONE, "pod-one"), (TWO, "pod-two")):
        done = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-H", "Host: any.example", f"http://{address}:{port}/"],
                              capture_output=True, text=True, timeout=20)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["name"] == name
