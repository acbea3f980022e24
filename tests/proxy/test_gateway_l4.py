"""
TLSRoute, TCPRoute and UDPRoute through twistd in manifests mode, real sockets: a Gateway's TCP and
UDP listeners open stream ports, its TLS Passthrough listener (twingress's --https port) passes TLS
through by SNI.  Conformance names: TLSRouteSimpleSameNamespace, and the TCPRoute/UDPRoute
profiles' basic case (sigs.k8s.io/gateway-api/conformance v1.7.0).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.proxy.streams_support import BlockingEchoes, tcp_answer, udp_answer
from tests.proxy.test_tls_passthrough import tls_backend  # noqa: F401  (the openssl s_server fixture, pt.test)
from tests.support import Manifests, Twingress, free_port, wait_for_port

GW = "gateway.networking.k8s.io/v1"


def _route(kind: str, name: str, service: str, port: int, section: str, hostnames: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentRefs": [{"name": "gw", "sectionName": section}], "rules": [{"backendRefs": [{"name": service, "port": port}]}]}
    if hostnames:
        spec["hostnames"] = list(hostnames)
    return {"apiVersion": GW, "kind": kind, "metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, tls_backend: int) -> Iterator[tuple[Twingress, int, int, int]]:  # noqa: F811
    echoes = BlockingEchoes(b"gw-echo")
    manifests = Manifests(tmp_path_factory.mktemp("gateway-l4"))
    udp_service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns", "namespace": "default"},
                   "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}}
    udp_slice = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                 "metadata": {"name": "dns-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "dns"}},
                 "ports": [{"name": "dns", "port": echoes.udp_port, "protocol": "UDP"}], "endpoints": [{"addresses": ["127.0.0.1"]}]}
    manifests.write(
        "services.yaml",
        *manifests.service("tcp-echo", [("127.0.0.1", echoes.port)]),
        *manifests.service("tls-backend", [("127.0.0.1", tls_backend)]),
        udp_service, udp_slice,
    )
    https_port, tcp_port, udp_port = free_port(), free_port(), free_port(kind=socket.SOCK_DGRAM)
    twingress = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--stream-interface", "127.0.0.1")
    generation = twingress.generation()
    listeners = [
        {"name": "tls", "port": https_port, "protocol": "TLS", "hostname": "*.test", "tls": {"mode": "Passthrough"}},
        {"name": "tcp", "port": tcp_port, "protocol": "TCP"},
        {"name": "udp", "port": udp_port, "protocol": "UDP"},
    ]
    manifests.write(
        "gateway.yaml",
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}},
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "default"}, "spec": {"gatewayClassName": "twingress", "listeners": listeners}},
        _route("TLSRoute", "pt", "tls-backend", 80, "tls", ("pt.test",)),
        _route("TCPRoute", "echo", "tcp-echo", 80, "tcp"),
        _route("UDPRoute", "dns", "dns", 53, "udp"),
    )
    twingress.wait_generation_above(generation)
    wait_for_port("127.0.0.1", tcp_port, twingress.process)
    yield twingress, https_port, tcp_port, udp_port
    twingress.stop()
    echoes.close()


def test_tcp_route_opens_its_listener_port(proxy: tuple[Twingress, int, int, int]) -> None:
    """TCPRoute: a connection to the TCP listener's port reaches the route's backend."""
    _, _, tcp_port, _ = proxy
    assert tcp_answer(tcp_port) == b"gw-echo"


def test_udp_route_opens_its_listener_port(proxy: tuple[Twingress, int, int, int]) -> None:
    """UDPRoute: a datagram to the UDP listener's port reaches the route's backend, and its answer comes back."""
    _, _, _, udp_port = proxy
    assert udp_answer(udp_port) == b"gw-echo:hi"


def test_tls_route_passes_tls_through_by_sni(proxy: tuple[Twingress, int, int, int]) -> None:
    """TLSRouteSimpleSameNamespace: the backend's own certificate, the whole conversation its own."""
    twingress, https_port, _, _ = proxy
    done = subprocess.run(
        ["curl", "-sk", "--resolve", f"pt.test:{https_port}:127.0.0.1", f"https://pt.test:{https_port}/"],
        capture_output=True, timeout=20, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "s_server" in done.stdout  # openssl s_server -www answered: TLS was not terminated here
    assert twingress.routes()["passthrough"] == {"pt.test": "default/tls-backend:80"}


def test_a_name_no_tls_route_serves_is_reset(proxy: tuple[Twingress, int, int, int]) -> None:
    """
    TLSRouteHostnameIntersection's "TLS request not matching hostnames intersection should not reach
    backend" (conformance v1.6.3, tests/tlsroute-hostname-intersection.go, utils/tls
    MakeTLSConnectionAndExpectEventuallyConnectionRejection): on a port a Gateway TLS listener serves, a
    ClientHello for a name that no TLSRoute, HTTPS listener or certificate serves is refused, the connection
    reset, not answered with another name's certificate.  A name the route serves still passes through.
    """
    _, https_port, _, _ = proxy
    with socket.create_connection(("127.0.0.1", https_port), timeout=10) as raw:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with pytest.raises((ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError)):
            context.wrap_socket(raw, server_hostname="other.test").close()
    test_tls_route_passes_tls_through_by_sni(proxy)
