"""
The floor of an HTTP/2-to-HTTP/1.1 proxy on Twisted, pyOpenSSL and h2: the conversion and nothing else.

L{bench.lib.h2floor} times the h2 library alone, out of any process that proxies; L{bench.lib.splicefloor}
times a proxy that parses nothing.  Issue 32's target 2 charges everything an h2 request costs
twingress beyond the first (and TLS's share) to twingress's own code.  This proxy measures what
part of that any proxy on these libraries pays: it terminates TLS with ALPN h2 on twingress's TLS
transport (L{ingress.speedups.tlsdirect}) and send batch, runs the h2 state machine configured as
twingress's, and for each request does only what a conversion must:

- writes ``GET <:path> HTTP/1.1`` with the ``:authority`` as Host on an idle keep-alive upstream
  connection of the client connection's own (a new one when none is idle);
- reads the upstream's head up to its blank line, takes the status and each field (names
  lower-cased, the connection-specific ones dropped, as RFC 9113 8.2.2 requires), and the body by
  its Content-Length;
- sends the response as HEADERS and one DATA frame that ends the stream, and writes what h2 made
  once per read, or just before the reactor's next poll (twingress's flush);
- drops hpack's DEBUG records at their call, and hashes h2's state-machine Enums by identity, as
  twingress's data plane does (any proxy can).

No routing, no request checks, no forwarding fields, no access log, no deadlines, no flow-control
bookkeeping beyond h2's own, no error handling beyond closing: no real proxy does less per request.
For a load such as ``h2load -c32 -m10 https://localhost:PORT/`` (floor-library runs it
under the same load as twingress's h2 row).

  .venv/bin/python -m bench.lib.h2proxyfloor PORT BACKEND_PORT CERT KEY
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, RequestReceived
from twisted.internet import protocol, reactor, ssl

from ingress.speedups.fastwrite import direct_writer
from ingress.speedups.librarylog import drop_hpack_debug
from ingress.speedups.reactorstep import run_before_next_poll
from ingress.speedups.statehash import hash_states_by_identity
from ingress.speedups.tlsdirect import DirectTLSFactory

# Fields that describe the HTTP/1.1 connection, not the message: never sent in HTTP/2 (RFC 9113 8.2.2).
HOP_BY_HOP = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"))


class Upstream(protocol.Protocol):
    """One keep-alive HTTP/1.1 connection to the backend, serving one stream at a time."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.stream_id = 0  # the stream whose response is being read; 0 when idle
        self.buffer = b""
        self.status = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.body_left = -1  # -1: the head is not complete yet
        self.queued: Optional[bytes] = None  # a request written before the connection was made

    def connectionMade(self) -> None:
        self.transport.setTcpNoDelay(True)  # type: ignore[union-attr]
        self.write: Callable[[bytes], None] = direct_writer(self.transport)
        if self.queued is not None:
            self.write(self.queued)
            self.queued = None

    def send(self, stream_id: int, request: bytes) -> None:
        self.stream_id, self.body_left = stream_id, -1
        if self.transport is None:
            self.queued = request
        else:
            self.write(request)

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        if self.body_left < 0 and not self._head():
            return
        if len(self.buffer) >= self.body_left:
            body, self.buffer = self.buffer[: self.body_left], self.buffer[self.body_left :]
            stream_id, self.stream_id = self.stream_id, 0
            self.client.respond(self, stream_id, self.status, self.fields, body)

    def _head(self) -> bool:
        """Take the head from the buffer once it is whole: the status, the fields to send, the body's length."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = self.buffer[:end].split(b"\r\n")
        self.buffer = self.buffer[end + 4 :]
        self.status = lines[0].split(b" ", 2)[1]
        self.fields, self.body_left = [], 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.lower(), value.strip()
            if name == b"content-length":
                self.body_left = int(value)
            if name not in HOP_BY_HOP:
                self.fields.append((name, value))
        return True

    def connectionLost(self, reason: object = None) -> None:
        self.client.upstream_lost(self)


class Client(protocol.Protocol):
    """One client's HTTP/2 connection: h2 configured as twingress's, a pool of idle upstreams."""

    def __init__(self, backend: tuple[str, int]) -> None:
        self.backend = backend
        self.h2 = H2Connection(H2Configuration(
            client_side=False, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False,
            validate_inbound_headers=False, normalize_inbound_headers=False,
        ))
        self.idle: list[Upstream] = []
        self.upstreams: set[Upstream] = set()
        self.receiving = False
        self.flush_due = False
        self.closed = False

    def connectionMade(self) -> None:
        self.transport.setTcpNoDelay(True)  # type: ignore[union-attr]
        self.h2.initiate_connection()
        self.transport.write(self.h2.data_to_send())  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self.receiving = True
        for event in self.h2.receive_data(data):
            if isinstance(event, RequestReceived):
                self.request(event)
            elif isinstance(event, ConnectionTerminated):
                self.transport.loseConnection()  # type: ignore[union-attr]
        self.receiving = False
        self.flush_now()

    def request(self, event: RequestReceived) -> None:
        path = authority = b""
        for name, value in event.headers:
            if name == b":path":
                path = value
            elif name == b":authority":
                authority = value
        upstream = self.idle.pop() if self.idle else self.connect()
        upstream.send(event.stream_id, b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, authority))

    def connect(self) -> Upstream:
        upstream = Upstream(self)
        self.upstreams.add(upstream)
        protocol.ClientCreator(reactor, lambda: upstream).connectTCP(*self.backend)
        return upstream

    def respond(self, upstream: Upstream, stream_id: int, status: bytes, fields: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.idle.append(upstream)
        if self.closed:
            return
        self.h2.send_headers(stream_id, [(b":status", status), *fields])
        self.h2.send_data(stream_id, body, end_stream=True)
        self.flush()

    def flush(self) -> None:
        if self.receiving or self.flush_due:
            return
        self.flush_due = True
        run_before_next_poll(reactor, self.flush_now)

    def flush_now(self) -> None:
        self.flush_due = False
        data = self.h2.data_to_send()
        if data and not self.closed:
            self.transport.write(data)  # type: ignore[union-attr]

    def upstream_lost(self, upstream: Upstream) -> None:
        self.upstreams.discard(upstream)
        if upstream in self.idle:
            self.idle.remove(upstream)
        if upstream.stream_id and not self.closed:
            self.transport.loseConnection()  # type: ignore[union-attr]

    def connectionLost(self, reason: object = None) -> None:
        self.closed = True
        for upstream in list(self.upstreams):
            if upstream.transport is not None:
                upstream.transport.loseConnection()


class Floor(protocol.Factory):
    def __init__(self, backend: tuple[str, int]) -> None:
        self.backend = backend

    def buildProtocol(self, addr: object) -> Client:
        return Client(self.backend)


def tls_options(cert_path: str, key_path: str) -> Any:
    """The certificate and key, h2 offered by ALPN (and nothing else: this floor speaks only HTTP/2)."""
    pem = Path(cert_path).read_bytes() + Path(key_path).read_bytes()
    certificate = ssl.PrivateCertificate.loadPEM(pem)
    return ssl.CertificateOptions(
        privateKey=certificate.privateKey.original, certificate=certificate.original, acceptableProtocols=[b"h2"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("backend_port", type=int)
    parser.add_argument("cert")
    parser.add_argument("key")
    args = parser.parse_args()
    drop_hpack_debug()  # as twingress's data plane does: hpack's DEBUG records, thrown away at their level check anyway
    hash_states_by_identity()  # as the data plane does: h2's state-machine Enums hashed by identity (any proxy can)
    factory = DirectTLSFactory(tls_options(args.cert, args.key), False, Floor(("127.0.0.1", args.backend_port)))
    reactor.listenTCP(args.port, factory, interface="127.0.0.1")  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
