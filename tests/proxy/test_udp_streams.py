"""
UDP stream listeners with real sockets: 100 concurrent clients each get only
their own replies, sessions expire, the session cap drops and counts, new
sessions go round-robin and avoid a refusing endpoint, and the listener
follows the table.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from ingress.observe.metrics import Metrics
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import StreamListeners
from tests.proxy import streams_support
from tests.proxy.streams_support import many_clients, metric, stream_route, table, udp_echo, until
from tests.support import free_port

ROUTE = "default/stream"


metrics = streams_support.metrics
servers = streams_support.servers
listeners = streams_support.listeners


def echo(servers: list[Any], prefix: bytes = b"", host: str = "127.0.0.1") -> tuple[tuple[str, int], Any]:
    port, protocol = udp_echo(host, prefix)
    servers.append(port)
    return (host, port.getHost().port), protocol


def ask(port: int, data: bytes, sock: socket.socket | None = None, timeout: float = 5.0) -> bytes:
    """One datagram to the proxy and its answer (from a new socket unless one is given)."""
    own = sock is None
    s = sock or socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(timeout)
        s.sendto(data, ("127.0.0.1", port))
        return s.recvfrom(65535)[0]
    finally:
        if own:
            s.close()


@pytest_twisted.inlineCallbacks
def test_100_concurrent_clients_each_get_only_their_own_replies(
    listeners: StreamListeners, servers: list[Any], metrics: Metrics
) -> Any:
    upstream, protocol = echo(servers, b"echo:")
    port = free_port(kind=socket.SOCK_DGRAM)
    listeners.apply(table(stream_route("UDP", port, [upstream])))
    answers = yield deferToThread(many_clients, port, 100, 20)
    for index, got in enumerate(answers):
        assert got == [f"echo:client {index} message {n}".encode() for n in range(20)]
    assert len(protocol.peers) == 100  # one upstream socket per client session
    assert metric(metrics, "twingress_stream_connections_total", route=ROUTE, protocol="UDP") == 100
    assert metric(metrics, "twingress_stream_active", route=ROUTE, protocol="UDP") == 100
    listeners.stop()  # byte counts are added per MiB and when a session ends
    assert metric(metrics, "twingress_stream_active", route=ROUTE, protocol="UDP") == 0
    sent = sum(len(f"client {i} message {n}") for i in range(100) for n in range(20))
    assert metric(metrics, "twingress_stream_bytes_total", route=ROUTE, protocol="UDP", direction="upstream") == sent
    assert metric(metrics, "twingress_stream_bytes_total", route=ROUTE, protocol="UDP", direction="downstream") == sent + 5 * 2000


@pytest_twisted.inlineCallbacks
def test_large_datagrams_are_not_truncated(listeners: StreamListeners, servers: list[Any]) -> Any:
    upstream, _ = echo(servers)
    port = free_port(kind=socket.SOCK_DGRAM)
    listeners.apply(table(stream_route("UDP", port, [upstream])))
    payload = bytes(range(256)) * 200  # 51,200 bytes: far above Twisted's default 8192
    assert (yield deferToThread(ask, port, payload)) == payload


@pytest_twisted.inlineCallbacks
def test_idle_sessions_expire_and_the_client_gets_a_new_one(
    listeners: StreamListeners, servers: list[Any], metrics: Metrics
) -> Any:
    upstream, protocol = echo(servers)
    port = free_port(kind=socket.SOCK_DGRAM)
    listeners.apply(table(stream_route("UDP", port, [upstream], idle_timeout=0.3)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        assert (yield deferToThread(ask, port, b"one", s)) == b"one"
        handler = listeners.listeners[("UDP", port)].handler
        assert len(handler.sessions) == 1
        yield until(lambda: not handler.sessions, what="session expiry")
        assert metric(metrics, "twingress_stream_active", route=ROUTE, protocol="UDP") == 0
        assert (yield deferToThread(ask, port, b"two", s)) == b"two"
    assert metric(metrics, "twingress_stream_connections_total", route=ROUTE, protocol="UDP") == 2
    assert len(protocol.peers) == 2  # the second session has its own upstream socket


@pytest_twisted.inlineCallbacks
def test_sessions_beyond_the_cap_are_dropped_and_counted(servers: list[Any], metrics: Metrics) -> Any:
    upstream, _ = echo(servers)
    manager = StreamListeners(reactor, UpstreamPool(reactor, ProxySettings()), metrics, interface="127.0.0.1", max_udp_sessions=2)
    port = free_port(kind=socket.SOCK_DGRAM)
    manager.apply(table(stream_route("UDP", port, [upstream])))
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    try:
        assert (yield deferToThread(ask, port, b"a", sockets[0])) == b"a"
        assert (yield deferToThread(ask, port, b"b", sockets[1])) == b"b"
        with pytest.raises(socket.timeout):
            yield deferToThread(ask, port, b"c", sockets[2], 0.5)
        assert metric(metrics, "twingress_stream_udp_dropped_total", route=ROUTE, reason="session-limit") == 1
        assert (yield deferToThread(ask, port, b"a2", sockets[0])) == b"a2"  # the admitted ones carry on
    finally:
        for s in sockets:
            s.close()
        manager.stop()


@pytest_twisted.inlineCallbacks
def test_new_sessions_go_round_robin_and_skip_a_refusing_endpoint(
    listeners: StreamListeners, servers: list[Any], metrics: Metrics
) -> Any:
    a, _ = echo(servers, b"a:")
    b, _ = echo(servers, b"b:", host="127.0.0.2")
    port = free_port(kind=socket.SOCK_DGRAM)
    listeners.apply(table(stream_route("UDP", port, [a, b])))
    first = []
    for n in range(4):
        first.append((yield deferToThread(ask, port, b"%d" % n))[:2])
    assert sorted(first) == [b"a:", b"a:", b"b:", b"b:"] and first[0] != first[1]

    dead = ("127.0.0.1", free_port(kind=socket.SOCK_DGRAM))
    moved = stream_route("UDP", port, [dead, b])
    listeners.apply(table(moved))

    def probe() -> list[bytes]:
        """New clients until one lands on the dead endpoint (ICMP refused, session ends), then more."""
        got = []
        for n in range(6):
            try:
                got.append(ask(port, b"x%d" % n, timeout=0.5)[:2])
            except TimeoutError:
                got.append(b"lost")
        return got

    answers = yield deferToThread(probe)
    assert answers.count(b"lost") <= 1, answers  # at most the one datagram that found the dead endpoint
    assert answers[-3:] == [b"b:"] * 3
    yield until(lambda: metric(metrics, "twingress_stream_upstream_errors_total", route=ROUTE, protocol="UDP", reason="refused") == 1)


@pytest_twisted.inlineCallbacks
def test_udp_listener_moves_and_closes_with_the_table(listeners: StreamListeners, servers: list[Any]) -> Any:
    a, _ = echo(servers, b"a:")
    b, _ = echo(servers, b"b:")
    port = free_port(kind=socket.SOCK_DGRAM)
    listeners.apply(table(stream_route("UDP", port, [a])))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        assert (yield deferToThread(ask, port, b"1", held)) == b"a:1"
        listeners.apply(table(stream_route("UDP", port, [b])))
        assert (yield deferToThread(ask, port, b"2")) == b"b:2"  # a new session follows the new route
        assert (yield deferToThread(ask, port, b"3", held)) == b"a:3"  # the open one keeps its endpoint
        listeners.apply(table())
        with pytest.raises(socket.timeout):
            yield deferToThread(ask, port, b"new", None, 0.3)  # no new sessions on a removed route
        assert (yield deferToThread(ask, port, b"4", held)) == b"a:4"  # draining
        handler = listeners._draining and next(iter(listeners._draining.values())).listener.handler
        yield until(lambda: not handler.sessions, what="drain end")
    assert listeners.to_json() == {"listening": {}, "failed": {}}


@pytest_twisted.inlineCallbacks
def test_udp_port_in_use_is_reported(listeners: StreamListeners, servers: list[Any], metrics: Metrics) -> Any:
    upstream, _ = echo(servers)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy_port, good_port = busy.getsockname()[1], free_port(kind=socket.SOCK_DGRAM)
        listeners.apply(table(stream_route("UDP", busy_port, [upstream]), stream_route("UDP", good_port, [upstream])))
        assert list(listeners.failures) == [("UDP", busy_port)]
        assert metric(metrics, "twingress_stream_listener_errors_total", protocol="UDP", port=str(busy_port)) == 1
        assert (yield deferToThread(ask, good_port, b"ok")) == b"ok"
