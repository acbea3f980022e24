"""
Gateway API TLS listeners that terminate (tls.mode Terminate) through twistd: a TLSRoute's hosts
get TLS with the listener's certificate, and the bytes inside reach the TCP backend, on the --https
port beside HTTPS routes and on a port of its own (restating TLSRouteTerminateSimpleSameNamespace,
sigs.k8s.io/gateway-api/conformance v1.7.0: a client that trusts the listener's CA talks to the
backend through the terminated connection).
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.support import Manifests, Twingress, free_port, wait_for_port

GW = "gateway.networking.k8s.io/v1"


class TCPEcho:
    """A TCP backend that answers each connection's first read with b"echo:" and the bytes, then closes."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"echo:" + connection.recv(1024))

    def close(self) -> None:
        self.server.close()


@dataclass
class TerminatingProxy:
    process: Twingress
    https_port: int
    own_port: int
    cafile: Path


def _tls_route(name: str, section: str, host: str) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute", "metadata": {"name": name, "namespace": "default"},
        "spec": {"parentRefs": [{"name": "gw", "sectionName": section}], "hostnames": [host], "rules": [{"backendRefs": [{"name": "echo", "port": 80}]}]},
    }


@pytest.fixture(scope="module")
def terminating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TerminatingProxy]:
    echo = TCPEcho()
    manifests = Manifests(tmp_path_factory.mktemp("gateway-tls"))
    root = CertificateAuthority("gateway tls root")
    cafile = root.write(tmp_path_factory.mktemp("gateway-tls-pki") / "root.pem")
    https_port, own_port = free_port(), free_port()
    process = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--gateway-interface", "127.0.0.1")
    wait_for_port("127.0.0.1", https_port, process.process)
    generation = process.generation()
    terminate = {"mode": "Terminate", "certificateRefs": [{"name": "tcp-tls"}]}
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [("127.0.0.1", echo.port)]),
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}},
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "default"}, "spec": {"gatewayClassName": "twingress", "listeners": [
            {"name": "main", "port": https_port, "protocol": "TLS", "hostname": "tcp.tls.test", "tls": terminate},
            {"name": "own", "port": own_port, "protocol": "TLS", "hostname": "*.own.tls.test", "tls": terminate},
        ]}},
        tls_secret("tcp-tls", root.issue(["tcp.tls.test", "*.own.tls.test"], "ec")),
        _tls_route("main", "main", "tcp.tls.test"),
        _tls_route("own", "own", "*.own.tls.test"),
    )
    process.wait_generation_above(generation)
    wait_for_port("127.0.0.1", own_port, process.process)
    yield TerminatingProxy(process, https_port, own_port, cafile)
    process.stop()
    echo.close()


def _through(proxy: TerminatingProxy, port: int, name: str, payload: bytes) -> bytes:
    """One TLS connection with SNI C{name} that verifies the certificate, C{payload} sent, everything read."""
    context = ssl.create_default_context(cafile=str(proxy.cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw, server_hostname=name) as tls:
        tls.sendall(payload)
        received = b""
        while True:
            try:
                data = tls.recv(1024)
            except ssl.SSLEOFError:
                break
            if not data:
                break
            received += data
        return received


def test_tls_is_terminated_and_the_stream_relayed_on_the_https_port(terminating: TerminatingProxy) -> None:
    """TLSRouteTerminateSimpleSameNamespace: the listener's certificate verifies, the backend gets the plain bytes."""
    assert _through(terminating, terminating.https_port, "tcp.tls.test", b"ping") == b"echo:ping"


def test_a_tls_listener_on_a_port_of_its_own_terminates_its_wildcard_names(terminating: TerminatingProxy) -> None:
    """A port of its own, a wildcard listener hostname and route (the certificate's *.own.tls.test verifies one label)."""
    assert _through(terminating, terminating.own_port, "a.own.tls.test", b"pong") == b"echo:pong"


def test_the_relays_are_counted_as_streams(terminating: TerminatingProxy) -> None:
    _through(terminating, terminating.https_port, "tcp.tls.test", b"count")
    text = terminating.process.admin("/metrics")[1].decode()
    assert any(line.startswith("twingress_stream_connections_total{") and "tls-terminated/default/echo:80" in line for line in text.splitlines())
