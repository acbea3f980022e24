# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
The HTTP/1.1 reverse proxy: one protocol instance per client connection.

A connection serves one request at a time, each an L{Exchange} it owns while the request
lasts, and is that exchange's L{ingress.proxy.request.client.ClientSide}: it reads the request
(heads parsed strictly by L{ingress.proxy.message.h1}, bodies passed through as raw bytes with
their own framing) and frames the response.  Pipelined requests wait in the buffer
(responses stay in order) and reading pauses when too many wait; backpressure works both ways.
"""

from __future__ import annotations

from typing import Final, Optional

from twisted.internet.interfaces import IHandshakeListener, IPushProducer
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import classImplements

from ingress.proxy.http1.h1response import Transform, body_length, body_transform, final_head, keeps_alive, local_answer, transformed
from ingress.proxy.http2.connection import PREFACE, take_over
from ingress.proxy.idle import Deadline
from ingress.proxy.message import h1, headend
from ingress.proxy.message.chunked import ChunkedFramer, RequestBody
from ingress.proxy.message.compression import GzipBody
from ingress.proxy.message.responses import error_response
from ingress.proxy.request.exchange import Exchange
from ingress.proxy.request.forwarding import UNKNOWN_PEER, ForwardedFor, response_head_bytes
from ingress.proxy.request.limits import RequestLimits
from ingress.proxy.request.shared import Shared
from ingress.proxy.request.states import AUTH, AWAIT, BODY, TUNNEL
from ingress.speedups.fastwrite import direct_writer
from ingress.speedups.nativeprotocol import NativeProtocol

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

_IN_FLIGHT: Final = frozenset({BODY, AWAIT, AUTH})  # a request read (or being read) and not yet answered in full
FIRST_REQUEST_GRACE: Final = 1.0  # seconds a connection drained before its first request is given for it
PROTOCOL: Final = "http/1.1"


class HTTPProxyProtocol(NativeProtocol):
    """A client's connection, the client side of each exchange it serves, and its transport's producer."""

    tunnels = True  # a 101 the client asked for becomes a tunnel

    def __init__(self, factory: Shared) -> None:
        self.factory = factory
        self.settings = factory.settings
        self.limits = RequestLimits.of(self.settings)  # every request's on a route without limits of its own
        self.timer = Deadline(factory.reactor, self._timed_out)  # idle or header; the exchange's body, upstream or send wait
        self.client_full = False
        self._buffer = b""
        self._closed = False
        self._exchange: Optional[Exchange] = None  # the request being served; None while waiting for a head
        self._read_pauses: set[str] = set()
        self._forwarded = UNKNOWN_PEER  # what the requests forward (the connection's, or from a trusted proxy)
        self._peer = UNKNOWN_PEER  # what the connection itself says
        self._driving = False
        self._requests = 0  # requests begun on this connection
        self._keep_alive = True  # False: the response under way is the connection's last
        self._body: Optional[RequestBody] = None  # the request body, while it is read
        self._transform: Optional[Transform] = None  # the response body's: chunks decoded (HTTP/1.0), or gzip

    # -- connection lifecycle -------------------------------------------------

    def connectionMade(self) -> None:
        self.factory.opened(self)
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)  # responses are written whole; never wait for an ACK
        self.transport.registerProducer(self, True)
        self._write = direct_writer(self.transport)
        self.timer.set(self.settings.header_timeout, "idle")

    def handshakeCompleted(self) -> None:
        """TLS is up: if ALPN chose h2, the connection is HTTP/2's from its first byte."""
        if getattr(self.transport, "negotiatedProtocol", None) == b"h2":
            self._switch_to_http2(b"")

    def _switch_to_http2(self, data: bytes) -> None:
        """Hand the connection (and what was read of it) to the HTTP/2 protocol."""
        self._closed = True
        self._buffer = b""
        self.timer.retire()
        self.factory.closed(self)
        self.transport.unregisterProducer()
        take_over(self.transport, self.factory, data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        exchange = self._exchange
        self._closed = True
        self.timer.retire()
        self.factory.closed(self)
        if exchange is not None:
            if exchange.state in _IN_FLIGHT and exchange.request is not None:
                # The client went away during its request: logged as nginx does, 499 ("client closed request") if unanswered.
                exchange.done(exchange.status if exchange.responded else 499)
            exchange.drop_upstream()
            exchange.end()
            exchange.let_go()
        self._exchange = None
        self.transport.unregisterProducer()  # a TLS transport holds its producer until told: a reference cycle

    # IPushProducer for our transport: a slow client pauses the upstream's reads.
    def pauseProducing(self) -> None:
        self.client_full = True
        exchange = self._exchange
        if exchange is not None and exchange.upstream is not None:
            exchange.upstream.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self.client_full = False
        exchange = self._exchange
        if exchange is not None and exchange.upstream is not None:
            exchange.upstream.transport.resumeProducing()

    def stopProducing(self) -> None:
        pass

    def drain(self) -> None:
        """Shutdown: close now if idle, else after the response under way; a connection without a request yet gets
        a moment for it (its client may have sent it: closing at once lost requests across a pod deletion)."""
        self._keep_alive = False  # the next response head says Connection: close
        if self._exchange is None and not self._buffer and not self._closed:
            if self._requests:
                self.close()
            else:
                self.factory.reactor.callLater(FIRST_REQUEST_GRACE, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self._exchange is None and not self._buffer and not self._closed:
            self.close()

    def pause_reading(self, reason: str) -> None:
        if not self._read_pauses:
            self.transport.pauseProducing()
        self._read_pauses.add(reason)

    def resume_reading(self, reason: str) -> None:
        if reason in self._read_pauses:
            self._read_pauses.discard(reason)
            if not self._read_pauses and not self._closed:
                self.transport.resumeProducing()

    def _timed_out(self, kind: str) -> None:
        if kind == "idle":
            self.close()
        elif kind == "header":
            self.refuse(408, "request head not received in time")
        elif kind == "body" and not self._read_pauses:
            # The client stalled (not the upstream, which is to blame while it pushes back): 408, and the
            # upstream connection (holding half a request) is aborted with ours, never pooled.
            self.refuse(408, "request body not received in time")
        elif self._exchange is not None:
            self._exchange.timed_out()

    # -- reading requests -----------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        exchange = self._exchange
        if exchange is not None and exchange.state == TUNNEL:
            if exchange.upstream is not None:
                exchange.upstream.write(data)
            return
        if self._closed:
            return
        self._buffer = self._buffer + data if self._buffer else data
        self._drive()

    def _drive(self) -> None:
        """Advance through heads and bodies as far as the buffer allows (never re-entered)."""
        self._driving = True
        try:
            while self._buffer:
                exchange = self._exchange
                if exchange is None:
                    if not self._read_head():
                        return
                elif exchange.state == BODY:
                    self._read_body(exchange)
                else:
                    if exchange.state == AWAIT and len(self._buffer) > self.settings.max_head_bytes:
                        self.pause_reading("pipeline")
                    return
        finally:
            self._driving = False

    def _read_head(self) -> bool:
        buffer = self._buffer
        if buffer[:2] == h1.CRLF:
            self._buffer = buffer.lstrip(b"\r\n")  # RFC 9112 2.2: ignore empty lines before a request
            return bool(self._buffer)
        settings = self.settings
        try:
            end = headend.complete_head(buffer, settings.max_request_line, settings.max_head_bytes)
            if end < 0:
                if self.timer.kind != "header":
                    self.timer.set(settings.header_timeout, "header")
                return False
            self._buffer = buffer[end:]
            head = h1.parse_request_head(buffer[:end], settings.max_header_fields)
        except h1.HTTPError as error:
            if error.status == 505 and not self._requests and self.factory.http2.cleartext and buffer.startswith(PREFACE[:16]):
                self._switch_to_http2(buffer)  # the HTTP/2 preface, with prior knowledge
                return False
            self.refuse(error.status, error.detail)
            return False
        self._begin(head)
        return not self._closed

    def _begin(self, head: h1.Head) -> None:
        """A parsed head: its exchange begins, and runs it."""
        self._requests += 1
        factory = self.factory
        exchange = self._exchange = Exchange(self, factory, self.settings, self.limits, self._forwarded, PROTOCOL)
        self._keep_alive = keeps_alive(head, self._requests, factory.draining, factory.settings)  # the settings of the table live now
        framing = head.framing
        exchange.run(head, bool(framing.chunked or framing.content_length))
        self._forwarded = exchange.forwarded

    def guarded(self, passed: bool) -> None:
        """A guard let the request on: any requests pipelined after it are read now."""
        if passed and self._buffer and not self._driving and not self._closed:
            self._drive()

    def read_body(self, framing: h1.Framing, max_body: int) -> None:
        self._body = RequestBody(framing, max_body)

    def relay_http2(self) -> None:
        raise AssertionError("an HTTP/1.1 request is not relayed to an HTTP/2 endpoint")  # routing answers it 426

    def local_host(self) -> str:
        return str(getattr(self.transport.getHost(), "host", ""))

    def local_port(self) -> bytes:
        return b"%d" % (getattr(self.transport.getHost(), "port", 0) or 0)

    def _read_body(self, exchange: Exchange) -> None:
        assert self._body is not None
        try:
            chunk, self._buffer = self._body.take(self._buffer)
        except h1.HTTPError as error:
            self.refuse(error.status, error.detail)
            return
        exchange.touch_timer()
        exchange.send_upstream(chunk)
        if self._body.done:
            exchange.body_done()

    def peer(self) -> ForwardedFor:
        if self._peer is UNKNOWN_PEER:
            self._learn_peer()
        return self._peer

    def _learn_peer(self) -> None:
        """Who the client is (read at the first request: behind a PROXY-protocol listener, its header tells)."""
        self._peer = self._forwarded = ForwardedFor.for_transport(self.transport, self.factory.scheme)

    # -- the response (ClientSide) -----------------------------------------------

    def send_interim(self, head: h1.Head) -> None:
        request = self._exchange.request if self._exchange is not None else None
        if request is not None and request.version >= (1, 1):
            self._write(response_head_bytes(head, request, self.settings.server_name, True, False))

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> int:
        exchange = self._exchange
        assert exchange is not None and exchange.request is not None
        transform = self._transform = body_transform(exchange.request, head, self.settings.gzip)
        keep = self._keep_alive = (
            self._keep_alive and exchange.request_complete and not head.framing.until_close and type(transform) is not ChunkedFramer
        )  # a body without its chunks (HTTP/1.0) ends with the connection
        out = final_head(exchange, head, keep, transform, added, self.factory.scheme == b"https")
        if body:
            body = transformed(transform, body) if transform is not None else body
            out += body
        self._write(out)
        return len(body)

    def send_body(self, data: bytes) -> int:
        if self._transform is not None:
            data = transformed(self._transform, data)
        self._write(data)
        return len(data)

    def end_response(self) -> None:
        exchange = self._exchange
        assert exchange is not None
        if type(self._transform) is GzipBody:
            tail = self._transform.finish()
            exchange.sent(len(tail))
            self._write(tail)
        self._finish(exchange, exchange.status)

    def open_tunnel(self, head: h1.Head, body: bytes) -> None:
        exchange = self._exchange
        assert exchange is not None and exchange.request is not None and exchange.upstream is not None
        self._write(response_head_bytes(head, exchange.request, self.settings.server_name, True, False) + body)
        leftover, self._buffer = self._buffer, b""
        if leftover:
            exchange.upstream.write(leftover)

    def send_tunnel(self, data: bytes) -> None:
        self._write(data)

    def answer(self, status: int, close: bool, location: bytes, fields: bytes) -> None:
        """Answer without an upstream (404, 503, 502...; a CORS preflight's 204 with C{fields}); close if the body was not read."""
        exchange = self._exchange
        assert exchange is not None
        request = exchange.request
        unread_body = request is not None and not exchange.request_complete and request.framing.has_body
        close = close or unread_body or not self._keep_alive or (request is not None and not request.keep_alive)
        self._keep_alive = not close
        response = local_answer(status, self.settings.server_name, close, location, fields)
        exchange.sent(body_length(response))
        self._write(response)
        self._finish(exchange, status)

    def refuse(self, status: int, detail: str) -> None:
        """A request we will not parse further: answer and close (RFC 9112 requires it)."""
        if self._peer is UNKNOWN_PEER:
            self._learn_peer()
        self.factory.metrics.malformed_requests.labels(str(status)).inc()
        exchange = self._exchange
        forwarded = exchange.forwarded if exchange is not None else self._forwarded
        log.info("refused request from {peer}: {status} {detail}", peer=forwarded.ip or "?", status=status, detail=detail)
        if exchange is not None and exchange.responded:
            exchange.end()
            self._closed = True
            self.transport.abortConnection()
            return
        if exchange is None:  # no head was read: the log line has none
            exchange = self._exchange = Exchange(self, self.factory, self.settings, self.limits, self._forwarded, PROTOCOL)
        response = error_response(status, self.settings.server_name, True)
        exchange.sent(body_length(response))
        self._write(response)
        exchange.done(status)
        exchange.end()
        self.close()

    def cut_off(self) -> None:
        if self._exchange is not None:
            self._exchange.end()
        self._closed = True
        self.transport.abortConnection()

    def _finish(self, exchange: Exchange, status: int) -> None:
        """A response is complete: keep the connection for the next request, or close it."""
        exchange.done(status)
        exchange.end()
        if not self._keep_alive or not exchange.request_complete:
            self.close()
            return
        self._exchange = None
        self.timer.set(self.factory.settings.keepalive_timeout, "idle")
        self.resume_reading("pipeline")
        if self._buffer and not self._driving:
            self._drive()

    def close(self) -> None:
        self._closed = True
        self._buffer = b""
        self.timer.cancel()
        self.transport.unregisterProducer()
        self.transport.loseConnection()


classImplements(HTTPProxyProtocol, IPushProducer, IHandshakeListener)
