"""
Stream listeners in C{twistd -n ingress --manifests DIR}: StreamIngresses in
the directory open TCP and UDP listeners on C{--stream-interface}, an edit
moves the traffic, a removal closes the port, and C{/debug/routes} shows the
listeners, including one whose port is taken.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.kube.twingress import wait_until
from tests.proxy.streams_support import BlockingEchoes, external_stream, tcp_answer, udp_answer
from tests.support import Manifests, Twingress, free_port
from tests.waiting import eventually


@pytest.fixture
def echoes() -> Iterator[tuple[BlockingEchoes, BlockingEchoes]]:
    a, b = BlockingEchoes(b"a"), BlockingEchoes(b"b")
    yield a, b
    a.close()
    b.close()


def test_stream_ingresses_open_move_and_close_listeners(manifests: Manifests, echoes: tuple[BlockingEchoes, BlockingEchoes]) -> None:
    a, b = echoes
    port = free_port()
    manifests.write("s.yaml", external_stream("s-tcp", "TCP", port, a.port), external_stream("s-udp", "UDP", port, a.udp_port))
    proxy = Twingress(manifests.path, "--stream-interface", "127.0.0.1", "--stream-drain-timeout", "1")
    try:
        wait_until(lambda: tcp_answer(port) == b"a", what="TCP listener to a")
        wait_until(lambda: udp_answer(port) == b"a:hi", what="UDP listener to a")
        listening = proxy.routes()["streamListeners"]["listening"]
        assert listening[f"TCP/{port}"]["route"] == "default/s-tcp"
        assert listening[f"UDP/{port}"]["endpoints"] == [f"127.0.0.1:{a.udp_port}"]

        manifests.write("s.yaml", external_stream("s-tcp", "TCP", port, b.port), external_stream("s-udp", "UDP", port, b.udp_port))
        wait_until(lambda: tcp_answer(port) == b"b", what="TCP moved to b")
        wait_until(lambda: udp_answer(port) == b"b:hi", what="UDP moved to b (a new client)")

        manifests.remove("s.yaml")
        wait_until(lambda: tcp_answer(port) == b"<ConnectionRefusedError>", what="TCP port closed")
        wait_until(lambda: proxy.routes()["streamListeners"] == {"listening": {}, "failed": {}}, what="listeners gone")
    finally:
        proxy.stop()


def test_a_taken_port_shows_in_debug_routes_and_the_rest_works(manifests: Manifests, echoes: tuple[BlockingEchoes, BlockingEchoes]) -> None:
    a, _ = echoes
    with socket.create_server(("127.0.0.1", 0)) as busy:
        taken, free = busy.getsockname()[1], free_port()
        manifests.write("s.yaml", external_stream("taken", "TCP", taken, a.port), external_stream("fine", "TCP", free, a.port))
        proxy = Twingress(manifests.path, "--stream-interface", "127.0.0.1")
        try:
            wait_until(lambda: tcp_answer(free) == b"a", what="the free port works")
            failed = proxy.routes()["streamListeners"]["failed"]
            assert "in use" in failed[f"TCP/{taken}"]
            metrics = proxy.admin("/metrics")[1].decode()
            assert f'twingress_stream_listener_errors_total{{port="{taken}",protocol="TCP"}} 1.0' in metrics
            eventually(lambda: f"stream listener TCP/{taken} for default/taken cannot be opened" in proxy.log(), "the bind failure logged", timeout=5.0)
        finally:
            proxy.stop()
