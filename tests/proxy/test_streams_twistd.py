"""
Stream listeners in C{twistd -n ingress --manifests DIR}: StreamIngresses in
the directory open TCP and UDP listeners on C{--stream-interface}, an edit
moves the traffic, a removal closes the port, and C{/debug/routes} shows the
listeners, including one whose port is taken.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube.twingress import wait_until
from tests.support import Manifests, Twingress, free_port


def stream(name: str, protocol: str, listen: int, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "twingress.io/v1alpha1",
        "kind": "StreamIngress",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"protocol": protocol, "listen": listen, "external": True, "upstream": {"host": "127.0.0.1", "port": port}},
    }


class _Echoes:
    """Blocking TCP and UDP servers in this process that answer with their name (TCP: then close)."""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp_port = self.udp.getsockname()[1]
        for target in (self._serve_tcp, self._serve_udp):
            threading.Thread(target=target, daemon=True).start()

    def _serve_tcp(self) -> None:
        while True:
            try:
                connection, _ = self.tcp.accept()
            except OSError:
                return
            with connection:
                connection.sendall(self.name)

    def _serve_udp(self) -> None:
        while True:
            try:
                data, peer = self.udp.recvfrom(2048)
            except OSError:
                return
            self.udp.sendto(self.name + b":" + data, peer)

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


@pytest.fixture
def echoes() -> Iterator[tuple[_Echoes, _Echoes]]:
    a, b = _Echoes(b"a"), _Echoes(b"b")
    yield a, b
    a.close()
    b.close()


def tcp_answer(port: int) -> bytes:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return s.recv(100)
    except OSError as error:
        return f"<{type(error).__name__}>".encode()


def udp_answer(port: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        s.sendto(b"hi", ("127.0.0.1", port))
        try:
            return s.recvfrom(2048)[0]
        except OSError as error:
            return f"<{type(error).__name__}>".encode()


def test_stream_ingresses_open_move_and_close_listeners(manifests: Manifests, echoes: tuple[_Echoes, _Echoes]) -> None:
    a, b = echoes
    port = free_port()
    manifests.write("s.yaml", stream("s-tcp", "TCP", port, a.port), stream("s-udp", "UDP", port, a.udp_port))
    proxy = Twingress(manifests.path, "--stream-interface", "127.0.0.1", "--stream-drain-timeout", "1")
    try:
        wait_until(lambda: tcp_answer(port) == b"a", what="TCP listener to a")
        wait_until(lambda: udp_answer(port) == b"a:hi", what="UDP listener to a")
        listening = proxy.routes()["streamListeners"]["listening"]
        assert listening[f"TCP:{port}"]["route"] == "default/s-tcp"
        assert listening[f"UDP:{port}"]["endpoints"] == [f"127.0.0.1:{a.udp_port}"]

        manifests.write("s.yaml", stream("s-tcp", "TCP", port, b.port), stream("s-udp", "UDP", port, b.udp_port))
        wait_until(lambda: tcp_answer(port) == b"b", what="TCP moved to b")
        wait_until(lambda: udp_answer(port) == b"b:hi", what="UDP moved to b (a new client)")

        manifests.remove("s.yaml")
        wait_until(lambda: tcp_answer(port) == b"<ConnectionRefusedError>", what="TCP port closed")
        wait_until(lambda: proxy.routes()["streamListeners"] == {"listening": {}, "failed": {}}, what="listeners gone")
    finally:
        proxy.stop()


def test_a_taken_port_shows_in_debug_routes_and_the_rest_works(manifests: Manifests, echoes: tuple[_Echoes, _Echoes]) -> None:
    a, _ = echoes
    with socket.create_server(("127.0.0.1", 0)) as busy:
        taken, free = busy.getsockname()[1], free_port()
        manifests.write("s.yaml", stream("taken", "TCP", taken, a.port), stream("fine", "TCP", free, a.port))
        proxy = Twingress(manifests.path, "--stream-interface", "127.0.0.1")
        try:
            wait_until(lambda: tcp_answer(free) == b"a", what="the free port works")
            failed = proxy.routes()["streamListeners"]["failed"]
            assert "in use" in failed[f"TCP:{taken}"]
            metrics = proxy.admin("/metrics")[1].decode()
            assert f'twingress_stream_listener_errors_total{{port="{taken}",protocol="TCP"}} 1.0' in metrics
            deadline = time.monotonic() + 5
            while "cannot be opened" not in proxy.log() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert f"stream listener TCP:{taken} for default/taken cannot be opened" in proxy.log()
        finally:
            proxy.stop()
