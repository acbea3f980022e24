"""
L{ingress.proxy.tls.direct}: a write over TLS is encrypted and handed to the
TCP transport at once, never on a later reactor iteration (Twisted's default
TLS transport schedules a C{callLater(0)} per write), whole however large.

Driven in memory: the server protocol on a L{StringTransport} with a clock
that would hold any scheduled call, and a stdlib TLS client on memory BIOs.
The listener's real-socket behaviour is in test_tls.py and test_http2.py.
"""

from __future__ import annotations

import ssl

import pytest
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from zope.interface import implementer

from ingress.proxy.tls.direct import DirectTLSFactory, DirectTLSProtocol
from ingress.proxy.tls.termination import load_certificate, self_signed_certificate


class Answering(Protocol):
    """Answers every read with C{reply} at once, as the proxy answers a request."""

    reply = b""

    def dataReceived(self, data: bytes) -> None:
        self.transport.write(self.reply)  # type: ignore[union-attr]


@implementer(IOpenSSLServerConnectionCreator)
class OneContext:
    def __init__(self) -> None:
        self.context = load_certificate(*self_signed_certificate()).context

    def serverConnectionForTLS(self, protocol: object) -> object:
        from OpenSSL import SSL

        return SSL.Connection(self.context, None)


class Client:
    """A stdlib TLS client on memory BIOs, exchanging bytes with a StringTransport."""

    def __init__(self) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="direct.test")

    def pump(self, server: DirectTLSProtocol, wire: StringTransport) -> None:
        """Carry bytes both ways until neither side has any to send."""
        for _ in range(10):
            sent = self.outgoing.read()
            if sent:
                server.dataReceived(sent)
            received = wire.value()
            wire.clear()
            if received:
                self.incoming.write(received)
            if not sent and not received:
                return

    def handshake(self, server: DirectTLSProtocol, wire: StringTransport) -> None:
        for _ in range(10):
            try:
                self.tls.do_handshake()
                return
            except ssl.SSLWantReadError:
                self.pump(server, wire)
        raise AssertionError("no handshake")

    def read_all(self) -> bytes:
        chunks = []
        while True:
            try:
                chunks.append(self.tls.read(1 << 16))
            except ssl.SSLWantReadError:
                return b"".join(chunks)


@pytest.fixture
def connected() -> tuple[DirectTLSProtocol, StringTransport, Client, MemoryReactorClock]:
    clock = MemoryReactorClock()
    factory = DirectTLSFactory(OneContext(), False, Factory.forProtocol(Answering), clock)
    server = factory.buildProtocol(None)
    assert isinstance(server, DirectTLSProtocol)
    wire = StringTransport()
    server.makeConnection(wire)
    client = Client()
    client.handshake(server, wire)
    return server, wire, client, clock


def test_a_response_is_encrypted_and_sent_in_the_same_call(connected: tuple[DirectTLSProtocol, StringTransport, Client, MemoryReactorClock]) -> None:
    server, wire, client, clock = connected
    Answering.reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    client.pump(server, wire)  # the session tickets of TLS 1.3, read by the client
    client.read_all()
    client.tls.write(b"GET / HTTP/1.1\r\nHost: direct.test\r\n\r\n")
    server.dataReceived(client.outgoing.read())
    assert clock.getDelayedCalls() == []  # nothing left for a later iteration
    client.incoming.write(wire.value())
    assert client.read_all() == Answering.reply


def test_a_write_larger_than_the_bio_reads_goes_whole(connected: tuple[DirectTLSProtocol, StringTransport, Client, MemoryReactorClock]) -> None:
    server, wire, client, clock = connected
    Answering.reply = bytes(range(256)) * 1200  # 300 KiB: many records, several BIO reads
    client.pump(server, wire)
    client.read_all()
    wire.clear()
    client.tls.write(b"x")
    server.dataReceived(client.outgoing.read())
    assert clock.getDelayedCalls() == []
    client.incoming.write(wire.value())
    assert client.read_all() == Answering.reply


def test_close_sends_close_notify_at_once(connected: tuple[DirectTLSProtocol, StringTransport, Client, MemoryReactorClock]) -> None:
    server, wire, client, clock = connected
    client.pump(server, wire)
    client.read_all()
    wire.clear()
    server.loseConnection()
    assert wire.value()  # the alert, in this call (the TCP close waits for the client's own close_notify)
    client.incoming.write(wire.value())
    assert client.tls.read(1) == b""  # the stdlib's answer to a close_notify: the end of the stream, not an error
