"""
What the shutdown drain waits for (issue 61, point 7): a UDP session is not a connection to wait
for, so a real C{twistd -n ingress} that relayed one datagram exits at once on SIGINT or SIGTERM,
with or without worker processes, aborts nothing and leaves the UDP port free; while a drain does
wait, its log says for what, by kind and port.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from ingress.observe.metrics import Metrics
from ingress.process.drain import GracefulShutdown
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import StreamListeners
from tests.kube.twingress import wait_until
from tests.proxy.streams_support import BlockingEchoes, external_stream, recv_exactly, stream_route, table, tcp_echo, udp_answer, udp_echo, until
from tests.support import Manifests, Twingress, free_port

LONG_DRAIN = 120.0  # far above what a prompt exit takes: a drain that waited for the UDP session fails the deadline
EXIT_DEADLINE = 30.0


@pytest.fixture
def echoes() -> Iterator[BlockingEchoes]:
    backend = BlockingEchoes(b"pod")
    yield backend
    backend.close()


def _udp_port_free(port: int) -> bool:
    """True when this process can bind the UDP port on every address (nothing holds it any more)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_udp_session_does_not_hold_the_stop(manifests: Manifests, echoes: BlockingEchoes, workers: str, signal_number: int) -> None:
    port = free_port(kind=socket.SOCK_DGRAM)
    manifests.write("udp.yaml", external_stream("dns", "UDP", port, echoes.udp_port))
    proxy = Twingress(manifests.path, "--stream-interface", "127.0.0.1", "--workers", workers, "--drain-timeout", str(LONG_DRAIN))
    try:
        wait_until(lambda: udp_answer(port) == b"pod:hi", 10.0, "the UDP listener answering")  # one datagram through it, one session open
        assert not _udp_port_free(port)
        proxy.process.send_signal(signal_number)
        assert proxy.process.wait(EXIT_DEADLINE) == 0, proxy.log()[-3000:]
        log = proxy.log()
        assert "drain over (drained)" in log, log[-3000:]
        assert "aborted" not in log, log[-3000:]
        assert f"stream listener UDP/{port} closed, 1 sessions ended (UDP: nothing to wait for)" in log, log[-3000:]
        assert _udp_port_free(port), "the UDP port is still bound after the exit"
    finally:
        proxy.stop()


@pytest.fixture
def streams() -> Iterator[StreamListeners]:
    listeners = StreamListeners(reactor, UpstreamPool(reactor, ProxySettings()), Metrics(), interface="127.0.0.1")
    yield listeners
    listeners.stop()


@pytest_twisted.inlineCallbacks
def test_the_drain_closes_udp_ports_at_once_and_waits_for_tcp_streams(streams: StreamListeners) -> Any:
    """In this process: the UDP port closes when the drain begins, its session ends; the TCP stream is waited for and named."""
    tcp_backend, _ = tcp_echo()
    udp_backend, _ = udp_echo()
    tcp_port, udp_port = free_port(), free_port(kind=socket.SOCK_DGRAM)
    streams.apply(table(
        stream_route("TCP", tcp_port, [("127.0.0.1", tcp_backend.getHost().port)]),
        stream_route("UDP", udp_port, [("127.0.0.1", udp_backend.getHost().port)]),
    ))
    try:
        assert (yield deferToThread(udp_answer, udp_port)) == b"hi"
        client = yield deferToThread(socket.create_connection, ("127.0.0.1", tcp_port), 10)
        yield until(lambda: streams.open_kinds() == {f"TCP stream{{s}} on :{tcp_port}": 1, f"UDP session{{s}} on :{udp_port}": 1}, what="both open")
        stopped: list[bool] = []
        shutdown = GracefulShutdown(reactor, [], [streams], shutdown_delay=0, drain_timeout=LONG_DRAIN, stop=lambda: stopped.append(True))
        shutdown.begin()
        yield until(lambda: shutdown._poll is not None, what="the listeners closed")
        assert streams.open_kinds() == {f"TCP stream{{s}} on :{tcp_port}": 1}
        assert shutdown._waiting_for() == f"waiting for 1 TCP stream on :{tcp_port}"
        yield until(lambda: _udp_port_free(udp_port), what="the UDP port closed")
        yield deferToThread(client.sendall, b"still open")
        assert (yield deferToThread(recv_exactly, client, 10)) == b"still open"
        assert not stopped
        client.close()
        yield until(lambda: stopped, what="the stop once the TCP stream ended")
    finally:
        tcp_backend.stopListening()
        udp_backend.stopListening()


def test_the_drain_says_what_it_waits_for(manifests: Manifests) -> None:
    """A real twistd: while a request and a TCP stream are under way, its log names both, and says it again while it waits."""
    port, silent = free_port(), _silent_backend()
    manifests.write("tcp.yaml", external_stream("db", "TCP", port, silent))
    manifests.route("slow", "slow.test", [("127.0.0.1", silent)])
    proxy = Twingress(manifests.path, "--stream-interface", "127.0.0.1", "--drain-timeout", "6")
    try:
        stream = socket.create_connection(("127.0.0.1", port), timeout=10)
        http = socket.create_connection(("127.0.0.1", proxy.http_port), timeout=10)
        http.sendall(b"GET / HTTP/1.1\r\nHost: slow.test\r\n\r\n")  # forwarded, never answered: a request under way
        wait_until(lambda: proxy.metric("twingress_stream_active", protocol="TCP") == 1, 10.0, "the stream open")
        wait_until(lambda: proxy.metric("twingress_upstream_connections_opened_total", protocol="http/1.1") == 1, 10.0, "the request forwarded")
        proxy.process.send_signal(signal.SIGTERM)
        assert proxy.process.wait(EXIT_DEADLINE) == 0
        log = proxy.log()
        assert f"listeners closed; waiting for 1 HTTP/1.1 connection on http, 1 TCP stream on :{port}" in log, log[-3000:]
        assert f"drain: 5s of 6s, waiting for 1 HTTP/1.1 connection on http, 1 TCP stream on :{port}" in log, log[-3000:]
        assert "drain over (timeout): aborted 2 connections still open" in log, log[-3000:]
        stream.close()
        http.close()
    finally:
        proxy.stop()


_held: list[socket.socket] = []


def _silent_backend() -> int:
    """A TCP port that accepts (into its queue) and never answers: what is open to it stays open until cut."""
    server = socket.create_server(("127.0.0.1", 0), backlog=16)
    _held.append(server)
    return int(server.getsockname()[1])
