"""
L{ingress.speedups.tlsdirect}: a write over TLS is encrypted and handed to the
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

from ingress.proxy.tls.termination import load_certificate, self_signed_certificate
from ingress.speedups.tlsdirect import DirectTLSFactory, DirectTLSProtocol


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


def tls_server(application: type[Protocol], clock: MemoryReactorClock) -> tuple[DirectTLSProtocol, StringTransport]:
    """A DirectTLSProtocol in front of C{application}, connected to a StringTransport."""
    factory = DirectTLSFactory(OneContext(), False, Factory.forProtocol(application), clock)
    server = factory.buildProtocol(None)
    assert isinstance(server, DirectTLSProtocol)
    wire = StringTransport()
    server.makeConnection(wire)
    return server, wire


@pytest.fixture
def connected() -> tuple[DirectTLSProtocol, StringTransport, Client, MemoryReactorClock]:
    clock = MemoryReactorClock()
    server, wire = tls_server(Answering, clock)
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


class Recording(Protocol):
    """Keeps every read, and answers each with C{b"ok"}."""

    def connectionMade(self) -> None:
        self.reads: list[bytes] = []

    def dataReceived(self, data: bytes) -> None:
        self.reads.append(data)
        self.transport.write(b"ok")  # type: ignore[union-attr]


def recording_connection() -> tuple[DirectTLSProtocol, StringTransport, Client]:
    """A handshaken connection to a L{Recording}, the session tickets read: the wire empty."""
    server, wire = tls_server(Recording, MemoryReactorClock())
    client = Client()
    client.handshake(server, wire)
    client.pump(server, wire)
    client.read_all()
    wire.clear()
    return server, wire, client


def test_records_in_one_read_and_records_cut_across_reads_all_arrive() -> None:
    """The record count that ends a read early (direct.py) must never leave a whole record unread."""
    server, wire, client = recording_connection()
    for message in (b"one", b"two", b"three"):
        client.tls.write(message)  # a record each
    server.dataReceived(client.outgoing.read())
    for message in (b"four", b"five"):
        client.tls.write(message)
    for byte in client.outgoing.read():  # every record cut into single bytes
        server.dataReceived(bytes([byte]))
    assert server.wrappedProtocol.reads == [b"one", b"two", b"three", b"four", b"five"]
    client.incoming.write(wire.value())
    assert client.read_all() == b"ok" * 5


def test_a_request_and_the_close_notify_in_one_read() -> None:
    """The second record gives no data but the end of TLS: answered with the server's close_notify, as Twisted does."""
    server, wire, client = recording_connection()
    client.tls.write(b"last request")
    try:
        client.tls.unwrap()
    except ssl.SSLWantReadError:
        pass  # the client's close_notify is out; it waits for ours
    server.dataReceived(client.outgoing.read())
    assert server.wrappedProtocol.reads == [b"last request"]
    client.incoming.write(wire.value())
    assert client.tls.read(1024) == b"ok"
    with pytest.raises(ssl.SSLZeroReturnError):
        client.tls.read(1024)  # then the server's close_notify


def test_a_record_without_application_data_gets_its_answer() -> None:
    """A TLS 1.2 client's renegotiation (a ClientHello inside the session) gives no data and needs an
    answer: the read takes Twisted's way (OpenSSL is asked, and what it made is sent at once)."""
    from OpenSSL import SSL

    server, wire = tls_server(Recording, MemoryReactorClock())
    context = SSL.Context(SSL.TLS_METHOD)
    context.set_max_proto_version(SSL.TLS1_2_VERSION)
    client = SSL.Connection(context, None)
    client.set_connect_state()

    def exchange() -> None:
        for _ in range(10):
            try:
                client.do_handshake()
            except SSL.WantReadError:
                pass
            sent = b""
            try:
                sent = client.bio_read(1 << 16)
            except SSL.WantReadError:
                pass
            if sent:
                server.dataReceived(sent)
            received = wire.value()
            wire.clear()
            if received:
                client.bio_write(received)
            if not sent and not received:
                return

    exchange()
    assert client.get_protocol_version_name() == "TLSv1.2"
    assert client.renegotiate()
    with pytest.raises(SSL.WantReadError):
        client.do_handshake()  # the ClientHello, encrypted in the session; then it waits for the answer
    hello = client.bio_read(1 << 16)
    server.dataReceived(hello)
    assert wire.value(), "the server made no answer to a record without application data"
    client.bio_write(wire.value())
    with pytest.raises(SSL.Error, match="no renegotiation"):
        client.recv(1024)  # OpenSSL 3 refuses a client's renegotiation: a no_renegotiation alert, sent in that same call


def test_the_tls_transport_provides_what_twisteds_would() -> None:
    """makeConnection declares the transport's interfaces from a cache (direct.py): the same declaration as Twisted's
    TLSMemoryBIOProtocol makes, for the first connection and for the next ones, each its own."""
    from twisted.protocols.tls import TLSMemoryBIOFactory
    from zope.interface import providedBy

    twisteds = TLSMemoryBIOFactory(OneContext(), False, Factory.forProtocol(Recording)).buildProtocol(None)
    assert twisteds is not None
    twisteds.makeConnection(StringTransport())
    expected = set(providedBy(twisteds))
    assert expected > set(providedBy(StringTransport()))  # the transport's, and the TLS transport's own
    first, _ = tls_server(Recording, MemoryReactorClock())
    second, _ = tls_server(Recording, MemoryReactorClock())
    assert set(providedBy(first)) == set(providedBy(second)) == expected


def test_the_usual_request_and_response_take_openssls_own_calls() -> None:
    """After the handshake, a request's read and its response's write call OpenSSL through the binding
    (direct.py), never pyOpenSSL's wrappers: this fails if a pyOpenSSL release moves what they rely on."""
    server, wire, client = recording_connection()
    connection = server._tlsConnection

    def wrapper_called(*args: object) -> None:
        raise AssertionError("a pyOpenSSL wrapper on the usual path")

    for name in ("recv", "send", "bio_read", "bio_write", "pending"):
        setattr(connection, name, wrapper_called)
    client.tls.write(b"GET / HTTP/1.1\r\nHost: direct.test\r\n\r\n")
    server.dataReceived(client.outgoing.read())
    assert server.wrappedProtocol.reads == [b"GET / HTTP/1.1\r\nHost: direct.test\r\n\r\n"]
    client.incoming.write(wire.value())
    assert client.read_all() == b"ok"


@pytest.mark.parametrize(
    "reply",
    [
        b"r" * (1 << 14),  # the most one SSL_write takes here
        b"r" * ((1 << 14) + 1),  # Twisted's way: cut into records
        bytearray(b"a bytearray"),  # Twisted's way: pyOpenSSL takes any buffer
        memoryview(b"a memoryview"),
        b"",  # nothing to encrypt: nothing sent
    ],
    ids=["one-record", "one-byte-more", "bytearray", "memoryview", "empty"],
)
def test_a_write_of_any_size_and_buffer_arrives_whole(connected: tuple[DirectTLSProtocol, StringTransport, Client, MemoryReactorClock], reply: bytes) -> None:
    server, wire, client, clock = connected
    client.pump(server, wire)
    client.read_all()
    wire.clear()
    server.write(reply)
    assert bool(wire.value()) == bool(reply)
    client.incoming.write(wire.value())
    assert client.read_all() == bytes(reply)


def test_a_write_openssl_refuses_ends_the_connection_with_its_error() -> None:
    """A write OpenSSL refuses (here: after the server's close_notify went out, as a producer's late write
    can be) fails the connection with pyOpenSSL's error and raises nothing, as Twisted's C{_write} does:
    direct.py's own SSL_write answers through pyOpenSSL's error translation."""
    from OpenSSL import SSL

    server, wire, client = recording_connection()
    server._tlsConnection.shutdown()  # the close_notify made behind the transport's back: SSL_write now fails
    server._write(b"late")
    assert wire.disconnecting
    assert isinstance(server._reason.value, SSL.Error)
