# -*- test-case-name: tests.proxy.test_tls,tests.proxy.test_tls_direct,tests.unit.test_tls_records -*-
"""
TLS over a TCP connection, its ciphertext sent with the iteration's other messages,
its plaintext read without asking OpenSSL for more than it holds.

Twisted's default TLS transport (C{BufferingTLSTransport}) gathers each
connection's writes and encrypts them on the next reactor iteration through a
C{callLater(0)} of its own: a delayed call per response, after which the
ciphertext waits once more in the TCP transport's queue (two changes of the
socket's epoll interest).  Here each write is encrypted at once and its
ciphertext joins L{ingress.speedups.fastwrite}'s batch, sent with every
other message of the iteration just before the reactor polls again: no
delayed call, and no queue.

On the receiving side, L{TLSMemoryBIOProtocol} reads plaintext until OpenSSL
says it wants more bytes, then asks whether reading made anything to send: on a
keep-alive connection that is, for every request, one C{recv} that ends in a
C{WantReadError} and one C{bio_read} that ends in another, two exceptions
built, raised and caught in Python (11.5 us of the ~85 us TLS added per
HTTPS/1.1 request in twingress, 9 of the 47 in splice_floor.py:
bench/README.md).  Here the record layer's framing (RFC 8446 5.1, RFC 5246
6.2: a 5-byte header whose last two bytes are the length) says how many
whole records a read brought; a read of application data takes one record
(OpenSSL's SSL_read returns data from one record at a time), so when every whole
record has given plaintext and OpenSSL holds none back (C{pending}), nothing
is left to read and nothing was made to send (only records that are not
application data make an answer: a TLS 1.3 KeyUpdate, a TLS 1.2 renegotiation,
an alert).  Whatever else happens (a record that gave no data, a close, an
error, the handshake, the connection's end) takes Twisted's own path.

The four calls of every request after the handshake (the ciphertext into OpenSSL, the
plaintext out, the response in, its ciphertext out) go to OpenSSL's C{BIO_write},
C{SSL_read}, C{SSL_write} and C{BIO_read} through the binding pyOpenSSL itself uses
(cryptography's), into buffers allocated once: pyOpenSSL's own methods wrap each in Python
that checks its arguments, allocates a buffer per call (32 KiB per C{recv}, 64 KiB per
C{bio_read}), asks its callbacks' helpers and then OpenSSL whether the call failed, and copies
the result out twice; the four cost 5.9 us alone against 2.2 called directly (bench/README.md,
sixteenth session).  Only a call that does not simply succeed goes back to pyOpenSSL, for its
exact exceptions.

A new connection, finally, declares the interfaces its TCP transport provides
as Twisted's does, but from a cache per declaration: Twisted calls
C{directlyProvides} once per interface (nine for a TCP server) and once more
for them all, about 55 us per connection measured alone, 5% of twingress's CPU
in a handshake-heavy mix (bench/README.md); the result is the same
declaration every time.

Everything else (the handshake, the close_notify exchange, buffering while
OpenSSL waits to read, producers, aborts) is L{TLSMemoryBIOProtocol}'s own.

The plain code, with the speed-ups off (L{ingress.speedups.ENABLED}): L{tls_factory} makes
Twisted's own L{TLSMemoryBIOFactory}, its connections Twisted's buffering TLS transport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from cryptography.hazmat.bindings.openssl.binding import Binding
from OpenSSL.SSL import Connection, Error, WantReadError, ZeroReturnError
from twisted.internet.interfaces import IProtocolFactory
from twisted.internet.protocol import Protocol
from twisted.protocols.policies import ProtocolWrapper
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from zope.interface import directlyProvides, providedBy

from ingress.speedups import ENABLED
from ingress.speedups.fastwrite import direct_writer

_BIO_READ = 1 << 16  # OpenSSL's memory BIO hands out what it holds up to this at a time
_RECV = 1 << 15  # Twisted's read size: more than a record's plaintext (2**14), so one read empties a record
_HEADER = 5  # a TLS record's header: type, version (2 bytes), length (2 bytes)
_RECORD = 1 << 14  # a TLS record's most plaintext: a write up to this is one SSL_write

# OpenSSL through the binding pyOpenSSL itself calls (cryptography's), for the four calls of every
# request (the module docstring), each into one buffer of the process's: its bytes are copied out
# before anything else runs, so no connection sees another's.
_lib: Any = Binding.lib
_ffi: Any = Binding.ffi
_PLAINTEXT = _ffi.new("char[]", _RECV)
_CIPHERTEXT = _ffi.new("char[]", _BIO_READ)


# A transport's interface declaration -> the declaration a TLS transport over it gets (zope's own
# object, shared by every instance that provides the same interfaces).  A handful of entries: one per
# kind of transport (a TCP server, a UNIX one).
_PROVIDES: dict[Any, Any] = {}


class RecordCounter:
    """Counts the whole TLS records in a byte stream that arrives in pieces of any size."""

    __slots__ = ("_header", "_body_left")

    def __init__(self) -> None:
        self._header = b""  # a header split across reads: its first bytes
        self._body_left = 0  # bytes of the current record's body still to come

    def feed(self, data: bytes) -> int:
        """The number of records that C{data} completes."""
        if not self._header and not self._body_left and len(data) >= _HEADER and _HEADER + (data[3] << 8 | data[4]) == len(data):
            return 1  # the usual read: exactly one record
        complete = 0
        at, end = 0, len(data)
        while at < end:
            if self._body_left:
                taken = min(self._body_left, end - at)
                self._body_left -= taken
                at += taken
                complete += not self._body_left
                continue
            missing = _HEADER - len(self._header)
            self._header += data[at : at + missing]
            at += missing
            if len(self._header) == _HEADER:
                self._body_left = self._header[3] << 8 | self._header[4]
                self._header = b""
                complete += not self._body_left  # an empty record is whole with its header
        return complete


class DirectTLSProtocol(TLSMemoryBIOProtocol):
    """A TLS transport that encrypts each write at once and sends it with the iteration's batch."""

    _send: Callable[[bytes], None]
    __provides__: Any  # zope's declaration of what this instance provides (set by directlyProvides, or from the cache)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._records = RecordCounter()
        self._unread_records = 0  # whole records given to OpenSSL and not yet read back
        self._reading_records = False  # this read came after the handshake: the record count may shortcut it
        self._ssl: Any = None  # the connection's SSL, and its memory BIOs (pyOpenSSL's, set by makeConnection)
        self._receive_bio: Any = None
        self._send_bio: Any = None

    def makeConnection(self, transport: Any) -> None:
        """L{TLSMemoryBIOProtocol.makeConnection}'s steps, the interfaces declared once (the module docstring)."""
        self._send = direct_writer(transport)
        self._tlsConnection = connection = self.factory._creatorCallable(self)
        self._ssl, self._receive_bio, self._send_bio = connection._ssl, connection._into_ssl, connection._from_ssl
        self._appSendBuffer = []
        self._declare_like(transport)
        Protocol.makeConnection(self, transport)
        self.factory.registerProtocol(self)
        if self._connectWrapped:
            self.wrappedProtocol.makeConnection(self)
        self._checkHandshakeStatus()

    def _declare_like(self, transport: Any) -> None:
        """Provide what C{transport} provides (what Twisted's makeConnection leaves declared), from the cache."""
        declaration = providedBy(transport)
        provides = _PROVIDES.get(declaration)
        if provides is None:
            directlyProvides(self, declaration)
            _PROVIDES[declaration] = self.__provides__
        else:
            self.__provides__ = provides

    def dataReceived(self, data: bytes) -> None:
        """L{TLSMemoryBIOProtocol.dataReceived}, its steps after the handshake with OpenSSL's own BIO_write."""
        self._unread_records += self._records.feed(data)
        self._reading_records = self._handshakeDone
        if not self._handshakeDone or self._appSendBuffer:
            super().dataReceived(data)
            return
        written = _lib.BIO_write(self._receive_bio, data, len(data))
        if written <= 0:
            self._tlsConnection._handle_bio_errors(self._receive_bio, written)
        self._flushReceiveBIO()

    def _read_record(self, connection: Connection) -> bytes:
        """
        A record's plaintext from OpenSSL's SSL_read; when it gives none, pyOpenSSL's own
        exception for its answer.  pyOpenSSL's C{recv} also asks its callbacks' helpers whether a
        callback failed during the call: after the handshake none can run, since the contexts
        refuse renegotiation (termination.py) and never ask for a certificate after it.
        """
        read = _lib.SSL_read(self._ssl, _PLAINTEXT, _RECV)
        if read <= 0:
            connection._raise_ssl_error(self._ssl, read)
        plaintext: bytes = _ffi.unpack(_PLAINTEXT, read)
        return plaintext

    def _flushReceiveBIO(self) -> None:
        """Read each whole record's plaintext; only if one gave none, OpenSSL's word decides the rest (Twisted's loop)."""
        records, self._unread_records = self._unread_records, 0
        counted, self._reading_records = self._reading_records, False
        if not counted:
            super()._flushReceiveBIO()
            return
        connection = self._tlsConnection
        while records and not self._lostTLSConnection:
            try:
                plaintext = self._read_record(connection)
            except WantReadError:
                break  # a record without application data: it may need an answer
            except ZeroReturnError:
                self._shutdownTLS()  # the peer's close_notify, as Twisted's loop answers it
                self._tlsShutdownFinished(None)
                break
            except Error:
                self._tlsShutdownFinished(Failure())
                break
            records -= 1
            if not self._aborted:
                ProtocolWrapper.dataReceived(self, plaintext)
        else:
            if not self._lostTLSConnection and not _lib.SSL_pending(self._ssl):
                return  # every whole record was application data, all of it read
        super()._flushReceiveBIO()

    def _tlsShutdownFinished(self, reason: Optional[Failure]) -> None:
        """
        Twisted's own, with the failure's traceback dropped first: the failure Twisted's
        C{_flushReceiveBIO} makes when a peer goes away without close_notify holds its
        traceback, whose frame holds the failure (a reference cycle per such connection, and
        Twisted replaces an EOF's failure with one of its own, so nothing reads the traceback).
        """
        if reason is not None:
            reason.cleanFailure()
        super()._tlsShutdownFinished(reason)

    def _write(self, data: bytes) -> None:
        """
        Encrypt a write of up to one record's plaintext with OpenSSL's SSL_write, and send it;
        any other write, or an answer other than all of it written, takes Twisted's way.
        """
        if type(data) is not bytes or not 0 < len(data) <= _RECORD or self._lostTLSConnection:
            super()._write(data)
            return
        written = _lib.SSL_write(self._ssl, data, len(data))
        if written > 0:
            self._flushSendBIO()
            if written < len(data):  # a partial write (pyOpenSSL's contexts allow them): the rest as Twisted would
                super()._write(data[written:])
            return
        try:
            self._tlsConnection._raise_ssl_error(self._ssl, written)
        except WantReadError:
            self._bufferedWrite(data)
        except Error:
            self._tlsShutdownFinished(Failure())

    def _flushSendBIO(self) -> None:
        """Hand all the ciphertext OpenSSL made (BIO_read's, up to a buffer at a time) to the send batch."""
        pieces: list[bytes] = []
        while not pieces or len(pieces[-1]) == _BIO_READ:  # a full piece: there may be more
            read = _lib.BIO_read(self._send_bio, _CIPHERTEXT, _BIO_READ)
            if read <= 0:
                try:
                    self._tlsConnection._handle_bio_errors(self._send_bio, read)
                except WantReadError:
                    break  # nothing (more) made
            pieces.append(_ffi.unpack(_CIPHERTEXT, read))
        if pieces:
            self._send(b"".join(pieces))


class DirectTLSFactory(TLSMemoryBIOFactory):
    """L{TLSMemoryBIOFactory} whose connections are L{DirectTLSProtocol}s."""

    protocol = DirectTLSProtocol


def tls_factory(creator: Any, is_client: bool, wrapped: IProtocolFactory) -> TLSMemoryBIOFactory:
    """TLS in front of C{wrapped}'s protocols: L{DirectTLSFactory}'s, or Twisted's own with the speed-ups off."""
    if not ENABLED:
        return TLSMemoryBIOFactory(creator, is_client, wrapped)
    return DirectTLSFactory(creator, is_client, wrapped)
