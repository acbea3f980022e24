"""
L{ingress.speedups.fastwrite}: the messages written during one reactor
iteration are sent together when it ends, each connection's bytes in order,
with Twisted's queue taking over wherever a send cannot finish.

On real TCP connections of the running reactor (the thing under test is what
the kernel's sockets and Twisted's transports do), with a server protocol that
writes through the batch.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater

from ingress.speedups.fastwrite import SendBatch, direct_writer


class Writer(Protocol):
    """The server side: writes through the batch whatever the test asks."""

    def connectionMade(self) -> None:
        self.write = direct_writer(self.transport)
        self.factory.connected.callback(self)  # type: ignore[attr-defined]


@pytest.fixture
def server() -> Iterator[tuple[int, Factory]]:
    factory = Factory.forProtocol(Writer)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")  # type: ignore[attr-defined]
    yield port.getHost().port, factory
    port.stopListening()


def _connect(port: int, factory: Factory) -> tuple[socket.socket, defer.Deferred[Writer]]:
    factory.connected = defer.Deferred()  # type: ignore[attr-defined]
    client = socket.create_connection(("127.0.0.1", port))
    client.setblocking(False)
    return client, factory.connected  # type: ignore[attr-defined]


def _read(client: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = client.recv(1 << 20)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


@defer.inlineCallbacks
def _read_until_closed(client: socket.socket) -> Iterator[defer.Deferred[object]]:
    """What the client reads before the server's close (at most a second of waiting)."""
    received = b""
    for _ in range(100):
        yield deferLater(reactor, 0.01, lambda: None)
        try:
            chunk = client.recv(1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            break  # the close came after the bytes
        received += chunk
    return received  # type: ignore[return-value]


@pytest_twisted.inlineCallbacks
def test_writes_of_an_iteration_are_sent_when_it_ends_in_order(server: tuple[int, Factory]) -> Iterator[defer.Deferred[object]]:
    client, connected = _connect(*server)
    writer = yield connected
    writer.write(b"one ")
    writer.write(b"two ")
    writer.write(b"three")
    assert _read(client) == b""  # nothing sent yet: the iteration has not ended
    yield deferLater(reactor, 0.05, lambda: None)
    assert _read(client) == b"one two three"
    client.close()


@pytest_twisted.inlineCallbacks
def test_a_message_larger_than_the_socket_takes_is_finished_by_twisted_in_order(server: tuple[int, Factory]) -> Iterator[defer.Deferred[object]]:
    client, connected = _connect(*server)
    writer = yield connected
    big = bytes(range(256)) * 40_000  # 10 MB: far more than the socket buffers take at once
    writer.write(big)
    writer.write(b"tail")
    received = b""
    for _ in range(400):
        yield deferLater(reactor, 0.01, lambda: None)
        received += _read(client)
        if len(received) == len(big) + 4:
            break
    assert received == big + b"tail"
    client.close()


@pytest_twisted.inlineCallbacks
def test_a_message_before_a_close_is_sent_before_it(server: tuple[int, Factory]) -> Iterator[defer.Deferred[object]]:
    client, connected = _connect(*server)
    writer = yield connected
    writer.write(b"last words")
    writer.transport.loseConnection()
    received = yield _read_until_closed(client)
    assert received == b"last words"
    client.close()


@pytest_twisted.inlineCallbacks
def test_an_aborted_connection_drops_its_message(server: tuple[int, Factory]) -> Iterator[defer.Deferred[object]]:
    client, connected = _connect(*server)
    writer = yield connected
    writer.write(b"never sent")
    writer.transport.abortConnection()
    yield deferLater(reactor, 0.05, lambda: None)
    with pytest.raises(ConnectionResetError):
        client.recv(1 << 16)
    client.close()


@pytest_twisted.inlineCallbacks
def test_a_message_a_timer_writes_before_closing_is_sent_before_the_close(server: tuple[int, Factory]) -> Iterator[defer.Deferred[object]]:
    """A timed call (a header timeout's 408) writes and closes outside any poll's events: the close waits."""
    client, connected = _connect(*server)
    writer = yield connected

    def answer_and_close() -> None:
        writer.write(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
        writer.transport.loseConnection()

    reactor.callLater(0, answer_and_close)  # type: ignore[attr-defined]
    received = yield _read_until_closed(client)
    assert received == b"HTTP/1.1 408 Request Timeout\r\n\r\n"
    client.close()


def test_the_batch_is_sent_before_the_reactor_polls() -> None:
    polls: list[str] = []

    class Reactor:
        def doIteration(self, delay: float | None) -> None:
            polls.append(f"poll {delay}")

    class Idle:
        dataBuffer = b""
        _tempDataBuffer: list[bytes] = []
        disconnecting = False
        _aborting = False
        connected = True

    def send(data: bytes) -> int:
        polls.append(data.decode())
        return len(data)

    reactor_ = Reactor()
    batch = SendBatch()
    batch.install(reactor_)
    for n in range(3):
        batch.add(Idle(), send, b"%d" % n)
    assert polls == []
    reactor_.doIteration(0.5)
    reactor_.doIteration(None)  # nothing written since: nothing sent
    assert polls == ["0", "1", "2", "poll 0.5", "poll None"]
