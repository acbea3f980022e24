# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
The HTTP/1.1 reverse proxy: one protocol instance per client connection.

A connection handles one request at a time: pipelined requests wait in the
buffer (responses stay in order) and reading pauses when too many wait.  A
request's head is parsed strictly (L{ingress.proxy.http.h1}), routed once against
the table live at that moment, and forwarded with its Host unchanged; bodies
in both directions are passed through as raw bytes with their own framing,
with backpressure both ways.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from twisted.internet.interfaces import IConnector, IHandshakeListener, IPushProducer
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from zope.interface import implementer

from ingress.observe.metrics import NO_ROUTE
from ingress.proxy.http import h1
from ingress.proxy.http.chunked import ChunkedFramer
from ingress.proxy.http.compression import GzipBody
from ingress.proxy.http.connection_steps import ConnectionSteps
from ingress.proxy.http.fastwrite import direct_writer
from ingress.proxy.http.forwarding import UNKNOWN_PEER, ForwardedFor
from ingress.proxy.http.guards import Guards
from ingress.proxy.http.relay import UpstreamRelay
from ingress.proxy.http.responses import error_response, fields_response
from ingress.proxy.http.routed import route_request
from ingress.proxy.http.states import AUTH, AWAIT, BODY, CLOSED, HEAD, TUNNEL
from ingress.proxy.http.trusted import trusted_forwarding
from ingress.proxy.http.upstream import Address, UpstreamConnection
from ingress.proxy.http2.connection import PREFACE, take_over
from ingress.proxy.idle import Deadline
from ingress.proxy.tls.sni import tls_server_name
from ingress.proxy.transport import IConnectionTransport
from ingress.routing.table import Route

if TYPE_CHECKING:
    from ingress.proxy.http.factory import HTTPProxyFactory

_IN_FLIGHT = frozenset({BODY, AWAIT, AUTH})  # a request read (or being read) and not yet answered in full
FIRST_REQUEST_GRACE = 1.0  # seconds a connection drained before its first request is given for it


@implementer(IPushProducer, IHandshakeListener)
class HTTPProxyProtocol(ConnectionSteps, UpstreamRelay, Protocol):
    """
    The client side of the proxy.

    It is its transport's producer (a slow client pauses the upstream
    connection) and the upstream connection's sink (L{upstream.ResponseSink}).
    """

    transport: IConnectionTransport

    def __init__(self, factory: HTTPProxyFactory) -> None:
        self.factory = factory
        self.settings = factory.settings
        self._buffer = b""
        self._state = HEAD
        self._timer = Deadline(factory.reactor, self._timed_out)  # idle, header or upstream progress
        self._read_pauses: set[str] = set()
        self._client_full = False
        self._forwarded = UNKNOWN_PEER  # what this request forwards (the connection's, or from a trusted proxy)
        self._peer = UNKNOWN_PEER  # what the connection itself says
        self._driving = False
        self._request_id = 0
        self._reset_request()

    def _reset_request(self) -> None:
        self.request_method = b""
        self._request: Optional[h1.Head] = None
        self._route: Optional[Route] = None
        self._upstream: Optional[UpstreamConnection] = None
        self._connecting: Optional[IConnector] = None
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._body_remaining = 0
        self._body_framer: Optional[ChunkedFramer] = None
        self._request_complete = False
        self._responded = False
        self._keep_alive = True
        self._decode: Optional[ChunkedFramer | GzipBody] = None
        self._attempts = 0
        self._tried: Optional[Address] = None
        self._head_bytes = b""
        self._sent_at = 0.0
        self._started_at = 0.0
        self._body_sent = 0
        self._status = 0
        self._request_id += 1
        settings = self.settings  # a route's limits (policies) may change these for its requests
        self._max_body = settings.max_body_bytes
        self._connect_timeout = settings.connect_timeout
        self._read_timeout = settings.upstream_timeout
        self._send_timeout = settings.upstream_timeout
        self._set_cookie = b""
        self._response_fields = b""  # fields the route's policies add to the response (CORS)
        self._auth_cookies = b""  # an auth service's Set-Cookie fields, for the responses nginx's add_header reaches
        self._conn_hold = None  # limit-connections: the place this request holds
        self._error_code = 0
        self._mirrors = ()

    # -- connection lifecycle -------------------------------------------------

    def connectionMade(self) -> None:
        self.factory.opened(self)
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)  # responses are written whole; never wait for an ACK
        self.transport.registerProducer(self, True)
        self._write = direct_writer(self.transport)
        self._timer.set(self.settings.header_timeout, "idle")

    def handshakeCompleted(self) -> None:
        """TLS is up: if ALPN chose h2, the connection is HTTP/2's from its first byte."""
        if getattr(self.transport, "negotiatedProtocol", None) == b"h2":
            self._switch_to_http2(b"")

    def _switch_to_http2(self, data: bytes) -> None:
        """Hand the connection (and what was read of it) to the HTTP/2 protocol."""
        self._state = CLOSED
        self._buffer = b""
        self._timer.cancel()
        self.factory.closed(self)
        self.transport.unregisterProducer()
        take_over(self.transport, self.factory, data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._state in _IN_FLIGHT and self._request is not None:
            # The client went away during its request: logged and counted as nginx does, 499
            # ("client closed request") before the answer began, else the answer's status.
            self._request_done(self._status if self._responded else 499)
        self._state = CLOSED
        self._timer.cancel()
        self.factory.closed(self)
        self._drop_upstream()
        if self._conn_hold is not None:
            self._release_hold()
        if self._deadlines is not None:  # a route's deadlines, armed by some request on this connection
            self._deadlines.cancel()

    # IPushProducer for our transport: a slow client pauses the upstream's reads.
    def pauseProducing(self) -> None:
        self._client_full = True
        if self._upstream is not None:
            self._upstream.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self._client_full = False
        if self._upstream is not None:
            self._upstream.transport.resumeProducing()

    def stopProducing(self) -> None:
        pass

    def drain(self) -> None:
        """
        Shutdown: close now if idle between requests, else after the response under way. A
        connection that has not sent its first request yet was accepted in the last moments before
        the listener closed: its client may have sent the request already, so it gets a moment for
        it to arrive (closing it lost requests across a pod deletion on the test node).
        """
        self._keep_alive = False  # the next response head says Connection: close
        if self._state == HEAD and not self._buffer:
            if self._request_id > 1:
                self._close()
            else:
                self.factory.reactor.callLater(FIRST_REQUEST_GRACE, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self._state == HEAD and not self._buffer:
            self._close()

    def _pause_reading(self, reason: str) -> None:
        if not self._read_pauses:
            self.transport.pauseProducing()
        self._read_pauses.add(reason)

    def _resume_reading(self, reason: str) -> None:
        if reason in self._read_pauses:
            self._read_pauses.discard(reason)
            if not self._read_pauses and self._state != CLOSED:
                self.transport.resumeProducing()

    # -- reading requests -----------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        state = self._state
        if state == TUNNEL:
            if self._upstream is not None:
                self._upstream.write(data)
            return
        if state == CLOSED:
            return
        self._buffer = self._buffer + data if self._buffer else data
        self._drive()

    def _drive(self) -> None:
        """Advance through heads and bodies as far as the buffer allows (never re-entered)."""
        self._driving = True
        try:
            self._drive_once()
        finally:
            self._driving = False

    def _drive_once(self) -> None:
        while self._buffer:
            state = self._state
            if state == HEAD:
                if not self._read_head():
                    return
            elif state == BODY:
                self._read_body()
            else:
                if state == AWAIT and len(self._buffer) > self.settings.max_head_bytes:
                    self._pause_reading("pipeline")
                return

    def _read_head(self) -> bool:
        buffer = self._buffer
        if buffer[:2] == h1.CRLF:
            self._buffer = buffer.lstrip(b"\r\n")  # RFC 9112 2.2: ignore empty lines before a request
            return bool(self._buffer)
        end = h1.find_head_end(buffer)
        if end < 0:
            try:
                h1.check_incomplete_head(buffer, self.settings.max_request_line, self.settings.max_head_bytes)
            except h1.HTTPError as error:
                self._refuse(error.status, error.detail)
                return False
            if self._timer.kind != "header":
                self._timer.set(self.settings.header_timeout, "header")
            return False
        if end > self.settings.max_head_bytes:
            self._refuse(431, "header section too large")
            return False
        if buffer.find(h1.CRLF, 0, end) > self.settings.max_request_line:
            self._refuse(414, "request line too long")
            return False
        self._buffer = buffer[end:]
        try:
            head = h1.parse_request_head(buffer[:end], self.settings.max_header_fields)
        except h1.HTTPError as error:
            if error.status == 505 and self._request_id == 1 and self.factory.http2.cleartext and buffer.startswith(PREFACE[:16]):
                self._switch_to_http2(buffer)  # the HTTP/2 preface, with prior knowledge
                return False
            self._refuse(error.status, error.detail)
            return False
        self._begin(head)
        return self._state != CLOSED

    def _begin(self, head: h1.Head) -> None:
        """Route a parsed head and start forwarding it."""
        self._request = head
        self.request_method = head.method
        if self._peer is UNKNOWN_PEER:
            self._learn_peer()
        table = self.factory.live.table
        if table.addresses:  # Gateways with addresses of their own: the address reached picks the table
            table = table.addresses.get(self._local_host(), table)
        if table.trust is not None:
            self._forwarded = trusted_forwarding(table.trust, self._peer, head, b"%d" % self._local_port())
        elif self._forwarded is not self._peer:
            self._forwarded = self._peer  # the trust was dropped by a new table
        self._started_at = time.monotonic()
        live_settings = self.factory.settings  # the keep-alive settings of the table live now
        self._keep_alive = head.keep_alive and not self.factory.draining and live_settings.keepalive_timeout > 0
        if live_settings.keepalive_requests and self._request_id >= live_settings.keepalive_requests:
            self._keep_alive = False  # nginx's keepalive_requests: this response is the connection's last
        routed = route_request(table, head, self._forwarded, self.settings.https_redirect_port, tls_server_name(self.transport) if table.https_listeners is not None else None)
        if not self._take_routing(routed):
            return
        policies = self._route.policies if self._route is not None else None
        if policies is not None:
            if policies.client_auth is not None and not self._client_certificate_passes(policies.client_auth):
                return
            if Guards.wanted(policies):
                self._guard(policies, head)
                return
        self._forward(head)

    def _client_transport(self) -> IConnectionTransport:
        return self.transport

    def _forward(self, head: h1.Head) -> None:
        """A routed request that passed its guards: read its body (if any) and send it upstream."""
        framing = head.framing
        if framing.content_length and framing.content_length > self._max_body:
            self._refuse(413, "request body too large")
            return
        self._timer.set(self._read_timeout, "upstream")
        if framing.chunked:
            self._body_framer = ChunkedFramer()
            self._state = BODY
            self._timer.set(self.settings.client_body_timeout, "body")
        elif framing.content_length:
            self._body_remaining = framing.content_length
            self._state = BODY
            self._timer.set(self.settings.client_body_timeout, "body")
        else:
            self._request_complete = True
            self._state = AWAIT
        policies = self._route.policies if self._route is not None else None
        if policies is not None and policies.mirror is not None:
            self._start_mirrors(policies.mirror)
        self._dispatch()

    def _read_body(self) -> None:
        data = self._buffer
        framer = self._body_framer
        if framer is not None:
            try:
                used = framer.feed(data)
            except h1.HTTPError as error:
                self._refuse(error.status, error.detail)
                return
            if framer.total > self._max_body:
                self._refuse(413, "request body too large")
                return
            chunk, self._buffer = (data, b"") if used == len(data) else (data[:used], data[used:])
            done = framer.done
        else:
            take = self._body_remaining
            chunk, self._buffer = (data, b"") if take >= len(data) else (data[:take], data[take:])
            self._body_remaining -= len(chunk)
            done = self._body_remaining == 0
        self._touch_timer()
        self._send_upstream(chunk)
        if done:
            self._request_complete = True
            self._state = AWAIT
            if self._timer.kind == "body":
                self._timer.set(self._read_timeout, "upstream")

    # -- finishing ------------------------------------------------------------

    def _route_name(self) -> str:
        return self._route.name if self._route is not None else NO_ROUTE

    def _finish(self, status: int) -> None:
        """A response is complete: keep the connection for the next request, or close it."""
        self._request_done(status)
        if not self._keep_alive or not self._request_complete:
            self._close()
            return
        self._reset_request()
        self._state = HEAD
        self._timer.set(self.factory.settings.keepalive_timeout, "idle")
        self._resume_reading("pipeline")
        if self._buffer and not self._driving:
            self._drive()

    def _answer_locally(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None:
        """Answer without an upstream (404, 503, 502...; a CORS preflight's 204 with C{fields}); close if the body was not read."""
        request = self._request
        unread_body = request is not None and not self._request_complete and request.framing.has_body
        close = close or unread_body or not self._keep_alive or (request is not None and not request.keep_alive)
        self._keep_alive = not close
        self._request_complete = self._request_complete or not unread_body
        if fields:
            self._write_local(fields_response(status, self.settings.server_name, close, fields))
        else:
            extra = ((b"Location", location),) if location else ()
            self._write_local(error_response(status, self.settings.server_name, close, extra))
        self._finish(status)

    def _learn_peer(self) -> None:
        """
        Who the client is, for X-Forwarded-For, X-Real-IP and the access log.

        Read at the first request, not at connectionMade: behind a PROXY-protocol
        listener the client's address is known only once the PROXY header is read.
        """
        self._peer = self._forwarded = ForwardedFor.for_transport(self.transport, self.factory.scheme)

    def _local_port(self) -> int:
        return getattr(self.transport.getHost(), "port", 0) or 0

    def _local_host(self) -> str:
        return str(getattr(self.transport.getHost(), "host", ""))

    def _write_local(self, response: bytes) -> None:
        self._body_sent = len(response) - response.find(b"\r\n\r\n") - 4
        self._write(response)

    def _request_done(self, status: int) -> None:
        """A response is complete (or cut): count it, and log it when the access log is on."""
        if self._conn_hold is not None:
            self._release_hold()
        self.factory.metrics.request_done(self._route_name(), status)
        if self.factory.access_log is not None:
            self.factory.access_log.record(self, status)

    def _close(self) -> None:
        self._state = CLOSED
        self._buffer = b""
        self._timer.cancel()
        self.transport.unregisterProducer()
        self.transport.loseConnection()


