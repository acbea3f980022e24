"""Tests for L{ingress.runtime.sockets}: which listeners worker processes can share, and a listener that takes no new connections."""

from __future__ import annotations

import select
import socket

import pytest
from twisted.python import usage

from ingress.runtime.sockets import parse_listener, refuse_new_connections


@pytest.mark.parametrize(
    ("description", "family", "interface", "port", "proxy"),
    [
        ("tcp:80", socket.AF_INET, "", 80, False),
        ("tcp:8080:interface=127.0.0.1", socket.AF_INET, "127.0.0.1", 8080, False),
        ("tcp:port=443:interface=10.0.0.1:backlog=1024", socket.AF_INET, "10.0.0.1", 443, False),
        ("tcp6:443", socket.AF_INET6, "::", 443, False),
        ("tcp:80:interface=fd00\\:\\:1", socket.AF_INET6, "fd00::1", 80, False),
        ("haproxy:tcp:80", socket.AF_INET, "", 80, True),
    ],
)
def test_shareable_listeners(description: str, family: int, interface: str, port: int, proxy: bool) -> None:
    spec = parse_listener("http", description)
    assert (spec.family, spec.interface, spec.port, spec.proxy_protocol) == (family, interface, port, proxy)


@pytest.mark.parametrize("description", ["unix:/run/t.sock", "ssl:443", "systemd:domain=INET:index=0", "tcp:", "tcp:interface=1.2.3.4"])
def test_other_listeners_are_refused_with_workers(description: str) -> None:
    with pytest.raises(usage.UsageError, match="--http"):
        parse_listener("http", description)


class _Port:
    """What L{refuse_new_connections} reads of a Twisted listening port: its socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock


@pytest.mark.parametrize(("family", "address"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_a_refusing_listener_drops_new_attempts_and_completes_what_it_queued(family: int, address: str) -> None:
    """
    The drain's first step (drain.py): SYNs are dropped (the attempt neither connects nor is reset:
    its client retries later, towards whatever listens then), while a connection made before keeps
    its place in the queue and the request its client sends afterwards reaches the accept.
    """
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((address, 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        with socket.create_connection((address, port), timeout=2) as queued:
            assert refuse_new_connections(_Port(listener))
            queued.sendall(b"GET / HTTP/1.1\r\n\r\n")
            with socket.socket(family, socket.SOCK_STREAM) as late:
                late.setblocking(False)
                late.connect_ex((address, port))
                _, writable, _ = select.select([], [late], [], 0.5)
                assert not writable, "a new connection attempt was answered"
                accepted, _ = listener.accept()
                with accepted:
                    accepted.settimeout(2)
                    assert accepted.recv(100) == b"GET / HTTP/1.1\r\n\r\n"
                listener.settimeout(0.2)
                with pytest.raises(socket.timeout):
                    listener.accept()  # the dropped attempt was never queued


def test_a_closing_listener_accepts_what_is_queued_first() -> None:
    """
    L{DrainableListener.accept_queued}: the connections the kernel completed and nobody accepted yet
    (the reactor did not get to them: a busy worker) are accepted before the port closes, all of
    them, however few Twisted's Port accepts per read after a quiet spell.
    """
    from twisted.internet import reactor
    from twisted.internet.protocol import Factory, Protocol

    from ingress.runtime.sockets import DrainableListener

    built: list[Protocol] = []

    class Recording(Factory):
        def buildProtocol(self, addr: object) -> Protocol:
            protocol = Protocol()
            built.append(protocol)
            return protocol

    factory = Recording()
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")  # type: ignore[attr-defined]
    try:
        port.numberAccepts = 1  # as after a quiet spell
        clients = [socket.create_connection(("127.0.0.1", port.getHost().port), timeout=2) for _ in range(5)]
        listener = DrainableListener(None, factory)
        listener.port = port
        listener.accept_queued()
        assert len(built) == 5
        for protocol in built:
            protocol.transport.abortConnection()  # type: ignore[union-attr]
        for client in clients:
            client.close()
    finally:
        port.stopListening()
