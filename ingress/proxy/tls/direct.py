# -*- test-case-name: tests.proxy.test_tls -*-
"""
TLS over a TCP connection, its ciphertext sent with the iteration's other messages.

Twisted's default TLS transport (C{BufferingTLSTransport}) gathers each
connection's writes and encrypts them on the next reactor iteration through a
C{callLater(0)} of its own: a delayed call per response, after which the
ciphertext waits once more in the TCP transport's queue (two changes of the
socket's epoll interest).  Here each write is encrypted at once and its
ciphertext joins L{ingress.proxy.http.fastwrite}'s batch, sent with every
other message of the iteration just before the reactor polls again: no
delayed call, and no queue.

Everything else (the handshake, the close_notify exchange, buffering while
OpenSSL waits to read, producers, aborts) is L{TLSMemoryBIOProtocol}'s own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from OpenSSL.SSL import WantReadError
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol

from ingress.proxy.http.fastwrite import direct_writer

_BIO_READ = 1 << 16  # OpenSSL's memory BIO hands out what it holds up to this at a time


class DirectTLSProtocol(TLSMemoryBIOProtocol):
    """A TLS transport that encrypts each write at once and sends it with the iteration's batch."""

    _send: Callable[[bytes], None]

    def makeConnection(self, transport: Any) -> None:
        self._send = direct_writer(transport)
        super().makeConnection(transport)

    def _flushSendBIO(self) -> None:
        """Hand all the ciphertext OpenSSL made to the send batch (or the transport's own write)."""
        connection = self._tlsConnection
        pieces: list[bytes] = []
        while not pieces or len(pieces[-1]) == _BIO_READ:  # a full piece: there may be more
            try:
                pieces.append(connection.bio_read(_BIO_READ))
            except WantReadError:
                break  # nothing (more) made
        if pieces:
            self._send(b"".join(pieces))


class DirectTLSFactory(TLSMemoryBIOFactory):
    """L{TLSMemoryBIOFactory} whose connections are L{DirectTLSProtocol}s."""

    protocol = DirectTLSProtocol
