"""
GRPCRoutes through twistd in manifests mode: real grpcio servers behind a Gateway's HTTP listener
(twingress's own port, HTTP/2 with prior knowledge: --http2-cleartext), real grpcio clients.

Each test names the Gateway API conformance test it restates (sigs.k8s.io/gateway-api/conformance
v1.7.0, tests/grpcroute-*.go); a gRPC client reads HTTP 404 as UNIMPLEMENTED and 503 as
UNAVAILABLE ("gRPC over HTTP2", the HTTP-to-gRPC status mapping), which GRPCRoute asks for.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.proxy.gateway_support import GATEWAY_CLASS, apply, gateway, route
from tests.proxy.grpc_support import Backend, h2c_channel
from tests.support import Manifests, Twingress, free_port, wait_for_port

GW = "gateway.networking.k8s.io/v1"
ECHO = "test.Echo"


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
        GATEWAY_CLASS,
        gateway("gw", [{"name": "http", "port": twingress.http_port, "protocol": "HTTP"}]),
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
    return h2c_channel(twingress.http_port, host)


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


@contextlib.contextmanager
def _grpc_twingress(directory: Path, names: tuple[str, ...]) -> Iterator[tuple[Manifests, Twingress, dict[str, bytes]]]:
    """twistd with h2c on --http and Gateway ports on 127.0.0.1, in front of a grpcio server per name; what each answers to "who"."""
    backends = {name: Backend(directory) for name in names}
    manifests = Manifests(directory / "manifests")
    manifests.path.mkdir()
    manifests.write("services.yaml", *(obj for name, b in backends.items() for obj in manifests.service(name, [("127.0.0.1", b.port)])))
    twingress = Twingress(manifests.path, "--http2-cleartext", "--gateway-interface", "127.0.0.1")
    try:
        yield manifests, twingress, {name: b.name for name, b in backends.items()}
    finally:
        twingress.stop()
        for started in backends.values():
            started.stop()


def _who(port: int, authority: str, method: str = "Unary") -> bytes | grpc.StatusCode:
    """What answered a call of test.Echo/C{method} to C{authority} on 127.0.0.1:port, or the call's status code."""
    with h2c_channel(port, authority) as channel:
        try:
            return bytes(channel.unary_unary(f"/{ECHO}/{method}")(b"who", timeout=10))
        except grpc.RpcError as error:
            return error.code()


def test_grpcroute_listener_hostname_matching(tmp_path: Path) -> None:
    """
    GRPCRouteListenerHostnameMatching (grpcroute-listener-hostname-matching.go): listeners of one
    port with different hostnames, a GRPCRoute on each by sectionName: the :authority picks the
    listener (an exact hostname before a wildcard, a wildcard over any number of labels), and an
    authority no listener has is UNIMPLEMENTED.
    """
    with _grpc_twingress(tmp_path, ("v1", "v2", "v3")) as (manifests, twingress, names):
        same = {"namespaces": {"from": "Same"}}
        listeners = [
            {"name": f"listener-{n}", "port": twingress.http_port, "protocol": "HTTP", "hostname": host, "allowedRoutes": same}
            for n, host in ((1, "bar.com"), (2, "foo.bar.com"), (3, "*.bar.com"), (4, "*.foo.com"))
        ]
        rules = [{"backendRefs": [{"name": "v1", "port": 80}]}]
        apply(
            manifests, twingress, gateway("grpcroute-listener-hostname-matching", listeners),
            route("backend-v1", [{"name": "grpcroute-listener-hostname-matching", "sectionName": "listener-1"}], rules, kind="GRPCRoute"),
            route("backend-v2", [{"name": "grpcroute-listener-hostname-matching", "sectionName": "listener-2"}],
                  [{"backendRefs": [{"name": "v2", "port": 80}]}], kind="GRPCRoute"),
            route("backend-v3", [{"name": "grpcroute-listener-hostname-matching", "sectionName": f"listener-{n}"} for n in (3, 4)],
                  [{"backendRefs": [{"name": "v3", "port": 80}]}], kind="GRPCRoute"),
        )
        expected = {
            "bar.com": names["v1"], "foo.bar.com": names["v2"], "baz.bar.com": names["v3"], "boo.bar.com": names["v3"],
            "multiple.prefixes.bar.com": names["v3"], "multiple.prefixes.foo.com": names["v3"],
            "foo.com": grpc.StatusCode.UNIMPLEMENTED, "no.matching.host": grpc.StatusCode.UNIMPLEMENTED,
        }
        assert {authority: _who(twingress.http_port, authority) for authority in expected} == expected


def test_grpcroute_multiple_gateways(tmp_path: Path) -> None:
    """
    GRPCRouteMultipleGateways (grpcroute-multiple-gateways.go): a GRPCRoute attached to two
    Gateways (one on --http, one on a port of its own: ours share one address) is served by
    each, and each Gateway's dedicated route (another method) only by its own.
    """
    with _grpc_twingress(tmp_path, ("v1", "v2", "v3")) as (manifests, twingress, names):
        own = free_port()

        def method(name: str, backend: str) -> list[dict[str, Any]]:
            return [{"matches": [{"method": {"service": ECHO, "method": name}}], "backendRefs": [{"name": backend, "port": 80}]}]

        apply(
            manifests, twingress,
            gateway("same-namespace", [{"name": "http", "port": twingress.http_port, "protocol": "HTTP"}]),
            gateway("all-namespaces", [{"name": "http", "port": own, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]),
            route("multiple-gateways-shared-route", [{"name": "same-namespace"}, {"name": "all-namespaces"}], method("Unary", "v1"), kind="GRPCRoute"),
            route("same-namespace-dedicated-route", [{"name": "same-namespace"}], method("UnaryTwo", "v2"), kind="GRPCRoute"),
            route("all-namespaces-dedicated-route", [{"name": "all-namespaces"}], method("UnaryTwo", "v3"), kind="GRPCRoute"),
        )
        wait_for_port("127.0.0.1", own, twingress.process)
        assert [_who(twingress.http_port, "grpc.example"), _who(twingress.http_port, "grpc.example", "UnaryTwo")] == [names["v1"], names["v2"]]
        assert [_who(own, "grpc.example"), _who(own, "grpc.example", "UnaryTwo")] == [names["v1"], names["v3"]]
