"""
GRPCRoutes through twistd in manifests mode: real grpcio servers behind a Gateway's HTTP listener
(twingress's own port, HTTP/2 with prior knowledge: --http2-cleartext), real grpcio clients.

Each test names the Gateway API conformance test it restates (sigs.k8s.io/gateway-api/conformance
v1.7.0, tests/grpcroute-*.go); a gRPC client reads HTTP 404 as UNIMPLEMENTED and 503 as
UNAVAILABLE ("gRPC over HTTP2", the HTTP-to-gRPC status mapping), which GRPCRoute asks for.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.proxy.test_grpc import Backend
from tests.support import Manifests, Twingress

GW = "gateway.networking.k8s.io/v1"


def _rule(service: str, *, method: str = "", matches: list[dict[str, Any]] | None = None, weights: tuple[int, ...] = (), backends: tuple[str, ...] = ("a",)) -> dict[str, Any]:
    refs = [{"name": name, "port": 80, **({"weight": weights[i]} if weights else {})} for i, name in enumerate(backends)]
    found: dict[str, Any] = {"backendRefs": refs}
    if matches is not None:
        found["matches"] = matches
    elif service:
        found["matches"] = [{"method": {"service": service, **({"method": method} if method else {})}}]
    return found


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Twingress, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("gateway-grpc")
    backends = {name: Backend(directory) for name in ("a", "b")}
    manifests = Manifests(directory / "manifests")
    manifests.path.mkdir()
    manifests.write("services.yaml", *(obj for name, b in backends.items() for obj in manifests.service(name, [("127.0.0.1", b.port)])))
    twingress = Twingress(manifests.path, "--http2-cleartext")
    generation = twingress.generation()
    header = [{"method": {"service": "test.Echo", "method": "Unary"}, "headers": [{"name": "version", "value": "two"}]}]
    manifests.write(
        "gateway.yaml",
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}},
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "default"},
         "spec": {"gatewayClassName": "twingress", "listeners": [{"name": "http", "port": twingress.http_port, "protocol": "HTTP"}]}},
        {"apiVersion": GW, "kind": "GRPCRoute", "metadata": {"name": "rpc", "namespace": "default"},
         "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["rpc.gw.test"], "rules": [
             _rule("test.Echo", method="Unary", backends=("a",)),
             _rule("", matches=header, backends=("b",)),
             _rule("test.Echo", method="Chat", backends=("b",)),
         ]}},
        {"apiVersion": GW, "kind": "GRPCRoute", "metadata": {"name": "split", "namespace": "default"},
         "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["split.gw.test"], "rules": [
             _rule("test.Echo", weights=(70, 30), backends=("a", "b")),
             _rule("broken.Service", backends=("missing",)),
         ]}},
    )
    twingress.wait_generation_above(generation)
    yield twingress, {name: f"port-{b.port}" for name, b in backends.items()}
    twingress.stop()
    for started in backends.values():
        started.stop()


def _channel(twingress: Twingress, host: str) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{twingress.http_port}", options=[("grpc.default_authority", host)])


def test_exact_method_and_header_matching(proxy: tuple[Twingress, dict[str, str]]) -> None:
    """GRPCExactMethodMatching and GRPCRouteHeaderMatching: a method of a service, more headers first; anything else UNIMPLEMENTED."""
    twingress, names = proxy
    with _channel(twingress, "rpc.gw.test") as channel:
        unary = channel.unary_unary("/test.Echo/Unary")
        assert unary(b"who", timeout=10) == names["a"].encode()
        assert unary(b"who", metadata=(("version", "two"),), timeout=10) == names["b"].encode()
        chat = channel.stream_stream("/test.Echo/Chat")
        assert list(chat(iter([b"olleh"]), timeout=10)) == [b"hello"]
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary("/test.Echo/Upload")(b"x", timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_weights_and_an_unusable_backend(proxy: tuple[Twingress, dict[str, str]]) -> None:
    """GRPCRouteWeight (70/30 within 5% of 1,000 calls) and an unusable backend: UNAVAILABLE."""
    twingress, names = proxy
    counts: collections.Counter[bytes] = collections.Counter()
    with _channel(twingress, "split.gw.test") as channel:
        unary = channel.unary_unary("/test.Echo/Unary")
        for _ in range(1000):
            counts[unary(b"who", timeout=10)] += 1
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary("/broken.Service/Call")(b"x", timeout=10)
    assert abs(counts[names["a"].encode()] - 700) <= 50 and abs(counts[names["b"].encode()] - 300) <= 50
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_status_shows_the_routes_accepted(proxy: tuple[Twingress, dict[str, str]]) -> None:
    """The listener supports GRPCRoute when h2c is served; the broken backend is BackendNotFound."""
    twingress, _ = proxy
    status = twingress.routes()["gatewayAPI"]
    (listener,) = status["gateways"]["default/gw"]["listeners"]
    assert listener["supportedKinds"] == ["HTTPRoute", "GRPCRoute"] and listener["attachedRoutes"] == 2
    (split,) = status["httpRoutes"]["default/split"]
    assert {c["type"]: c["reason"] for c in split["conditions"]} == {"Accepted": "Accepted", "ResolvedRefs": "BackendNotFound"}
