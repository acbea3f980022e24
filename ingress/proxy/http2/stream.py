# -*- test-case-name: tests.proxy.test_http2 -*-
"""
One HTTP/2 request: its routing, its guards, its request body, and its end.

L{H2Stream} is an L{UpstreamRelay} like the HTTP/1.1 connection: endpoint
choice, pooled connections, retries and the ewma scores are the same code.
What differs is the client side: the request body arrives in DATA frames and
is acknowledged (WINDOW_UPDATE) only while the upstream takes it; the response
side is L{ingress.proxy.http2.response.StreamResponse}.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from h2.errors import ErrorCodes
from h2.exceptions import StreamClosedError
from twisted.logger import Logger

from ingress.observe.metrics import NO_ROUTE
from ingress.proxy.http import h1
from ingress.proxy.http.chunked import ChunkedFramer
from ingress.proxy.http.extauth import Verdict
from ingress.proxy.http.forwarding import UNKNOWN_PEER
from ingress.proxy.http.guards import Guards
from ingress.proxy.http.routed import Routed, route_request
from ingress.proxy.http.states import AUTH, AWAIT, BODY, CLOSED, HEAD
from ingress.proxy.http.trusted import trusted_forwarding
from ingress.proxy.http.upstream import Address, UpstreamConnection
from ingress.proxy.http2.exchange import H2Exchange
from ingress.proxy.http2.fields import Headers, local_response, request_head
from ingress.proxy.http2.response import StreamResponse
from ingress.proxy.idle import Deadline
from ingress.proxy.tls.sni import tls_server_name
from ingress.routing.policies import Policies

if TYPE_CHECKING:
    from ingress.proxy.http2.connection import H2ServerProtocol

log = Logger()



class H2Stream(StreamResponse):
    """A request on an HTTP/2 connection, relayed to an HTTP/1.1 upstream."""

    # A stream's state starts as these values, read from the class until the stream writes its own:
    # a stream per request, and 37 attribute stores in __init__ were 3% of the HTTP/2 bench.
    _buffer = b""
    _state = HEAD
    _request: Optional[h1.Head] = None
    request_method = b""
    _route = None
    _upstream: Optional[UpstreamConnection] = None
    _connecting = None
    _request_id = 1
    _attempts = 0
    _tried: Optional[Address] = None
    _pending_size = 0
    _client_full = False
    _head_bytes = b""
    _sent_at = 0.0
    _responded = False
    _status = 0
    _keep_alive = True
    _request_complete = False
    _decode: Optional[ChunkedFramer] = None
    _body_sent = 0
    _set_cookie = b""
    _response_fields = b""
    _auth_cookies = b""
    _conn_hold: Optional[tuple[str, str]] = None  # limit-connections: the place this request holds
    _error_code = 0
    _mirrors = ()
    _forwarded = UNKNOWN_PEER
    _unacknowledged = 0  # request bytes received while the upstream pushed back
    _body_received = 0
    _chunked_upstream = False
    _out_size = 0
    _end_pending = False
    _ended_with_headers = False
    _trailers: Optional[Headers] = None  # sent after the last DATA, ending the stream
    _exchange: Optional[H2Exchange] = None  # an HTTP/2 endpoint's stream (backend-protocol GRPC, GRPCS, H2C)
    _on_sent: Optional[Callable[[int], None]] = None
    _held_end = False

    def __init__(self, connection: H2ServerProtocol, stream_id: int) -> None:
        self.connection = connection
        self.stream_id = stream_id
        self.factory = factory = connection.factory
        self.settings = settings = factory.settings
        self.transport = connection.transport
        self._timer = Deadline(factory.reactor, self._timed_out)
        self._pending: list[bytes] = []
        self._started_at = time.monotonic()
        self._max_body = settings.max_body_bytes
        self._connect_timeout = settings.connect_timeout
        self._read_timeout = settings.upstream_timeout
        self._send_timeout = settings.upstream_timeout
        self._read_pauses: set[str] = set()
        self._out: deque[bytes] = deque()
        self._held: list[tuple[bytes, int]] = []  # request DATA while a guard decides (basic or external auth)

    # -- the request ------------------------------------------------------------

    def begin(self, headers: Headers, has_body: bool) -> None:
        """The request's HEADERS arrived: route it and start forwarding."""
        try:
            head = request_head(headers, has_body, self.settings.max_header_fields)
        except h1.HTTPError as error:
            self._request_complete = not has_body
            self._refuse(error.status, error.detail)
            return
        self._request = head
        self.request_method = head.method
        connection = self.connection
        table = self.factory.live.table
        if table.addresses:  # Gateways with addresses of their own: the address reached picks the table
            table = table.addresses.get(connection.local_host(), table)
        peer = connection.peer()
        self._forwarded = trusted_forwarding(table.trust, peer, head, connection.local_port()) if table.trust is not None else peer
        routed = route_request(table, head, self._forwarded, self.settings.https_redirect_port, tls_server_name(connection.transport) if table.https_listeners is not None else None)
        self._request_complete = not has_body
        if not self._take_routing(routed):
            return
        policies = self._route.policies if self._route is not None else None
        if policies is not None:
            if policies.client_auth is not None:
                if not self._client_certificate_passes(policies.client_auth):
                    return
                routed.head_bytes = self._head_bytes  # an HTTP/2 endpoint's request is made from it too
            if Guards.wanted(policies):
                self._guard(policies, head, headers, has_body, routed)
                return
        self._forward(head, headers, has_body, routed)

    def _client_transport(self) -> Any:
        return self.connection.transport

    def _stop_timers(self) -> None:
        """The stream's ends: its progress timer and its route's deadlines (Gateway API timeouts), if any."""
        self._timer.cancel()
        if self._deadlines is not None:
            self._deadlines.cancel()

    def _guard(self, policies: Policies, head: h1.Head, headers: Headers, has_body: bool, routed: Routed) -> None:
        """Basic or external auth: the request's DATA is held (not acknowledged) until the verdict."""
        self._state = AUTH
        timeout = self._connect_timeout + self._read_timeout
        checking = self.factory.guards.check(policies, head, self._forwarded.ip, self._forwarded.scheme, timeout)
        checking.addCallback(self._guarded, head, headers, has_body, routed)

    def _guarded(self, verdict: Verdict, head: h1.Head, headers: Headers, has_body: bool, routed: Routed) -> None:
        if self._state != AUTH:
            if verdict.hold is not None:
                self.factory.guards.leave(verdict.hold)
            return  # reset meanwhile
        if verdict.status:
            self.factory.metrics.denied.labels(verdict.reason, self._route_name()).inc()
            self._state = AWAIT
            for _, flow_length in self._held:
                self._acknowledge(flow_length)
            self._request_complete = self._held_end
            self._answer_locally(verdict.status, fields=verdict.fields)
            return
        self._state = HEAD
        self._take_verdict(verdict)
        routed.head_bytes = self._head_bytes  # an HTTP/2 endpoint's request is made from it too
        self._forward(head, headers, has_body, routed)
        held, self._held = self._held, []
        for data, flow_length in held:
            self.receive_body(data, flow_length)
        if self._held_end:
            self.end_of_body()

    def _forward(self, head: h1.Head, headers: Headers, has_body: bool, routed: Routed) -> None:
        """A routed request that passed its guards: to an HTTP/2 endpoint's stream, or the HTTP/1.1 pools."""
        policies = self._route.policies if self._route is not None else None
        if policies is not None and policies.backend_http2:
            self._state = BODY if has_body else AWAIT
            self._timer.set(self._read_timeout, "upstream")  # no frame either way for this long ends the exchange
            self._exchange = H2Exchange(self, headers, routed, not has_body)
            self._exchange.start()
            return
        framing = head.framing
        if framing.content_length and framing.content_length > self._max_body:
            self._answer_locally(413)
            return
        if has_body:
            self._chunked_upstream = framing.chunked
            self._state = BODY
            self._timer.set(self.settings.client_body_timeout, "body")
        else:
            self._state = AWAIT
            self._timer.set(self._read_timeout, "upstream")
        if policies is not None and policies.mirror is not None:
            self._start_mirrors(policies.mirror)
        self._dispatch()

    def receive_body(self, data: bytes, flow_length: int) -> None:
        """A DATA frame of the request: on upstream, acknowledged now or once the upstream takes more."""
        if self._state == AUTH:
            self._held.append((data, flow_length))
            return
        if self._exchange is not None and self._state == BODY:
            self._exchange.client_data(data, flow_length)
            return
        if self._state != BODY:  # answered already: the bytes are dropped, the window kept open
            self._acknowledge(flow_length)
            return
        self._body_received += len(data)
        if self._body_received > self._max_body:
            self._acknowledge(flow_length)
            self._refuse(413, "request body too large")
            return
        if self._read_pauses:
            self._unacknowledged += flow_length
        else:
            self._acknowledge(flow_length)
        if data:
            self._touch_timer()
            self._send_upstream(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked_upstream else data)

    def end_of_body(self) -> None:
        """The client's half is closed (END_STREAM)."""
        if self._state == AUTH:
            self._held_end = True
            return
        self._request_complete = True
        if self._state != BODY:
            return
        if self._exchange is not None:
            self._state = AWAIT
            self._exchange.client_end()
            return
        if self._chunked_upstream:
            self._send_upstream(b"0\r\n\r\n")
        self._state = AWAIT
        if self._timer.kind == "body":
            self._timer.set(self._read_timeout, "upstream")

    def trailers(self, headers: Headers) -> None:
        """The request's trailers: an HTTP/2 endpoint gets them; an HTTP/1.1 one does not (not forwarded)."""
        if self._exchange is not None and self._state == BODY:
            self._exchange.client_trailers(headers)

    def acknowledge(self, size: int) -> None:
        """An HTTP/2 endpoint took C{size} bytes of the request: the client may send as many more."""
        if self._state != CLOSED:
            self._acknowledge(size)

    def _acknowledge(self, size: int) -> None:
        if size:
            self.connection.h2.acknowledge_received_data(size, self.stream_id)
            self.connection.flush()

    def _pause_reading(self, reason: str) -> None:
        self._read_pauses.add(reason)

    def _resume_reading(self, reason: str) -> None:
        self._read_pauses.discard(reason)
        if not self._read_pauses and self._unacknowledged and self._state != CLOSED:
            size, self._unacknowledged = self._unacknowledged, 0
            self._acknowledge(size)

    # -- answers of our own, failures and the end --------------------------------

    def _answer_locally(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None:
        headers, body = local_response(status, self.settings.server_name, location, fields)
        if self.request_method == b"HEAD":
            body = b""
        self._status = status
        self._responded = True
        self.connection.h2.send_headers(self.stream_id, headers, end_stream=not body)
        if not body:
            self.connection.flush()  # answered outside a read too (a guard's verdict)
            self._finish(status)
            return
        self._body_sent = len(body)
        self._out.append(body)
        self._out_size += len(body)
        self._end_pending = True
        self.pump()

    def _refuse(self, status: int, detail: str) -> None:
        """A request that cannot mean anything: a 4xx on its stream; the connection serves on."""
        self.factory.metrics.malformed_requests.labels(str(status)).inc()
        log.info("refused HTTP/2 request from {peer}: {status} {detail}", peer=self.connection.peer().ip or "?", status=status, detail=detail)
        self._drop_upstream()
        if self._responded:
            self._request_done(status)
            self._reset(ErrorCodes.PROTOCOL_ERROR)
            return
        self._answer_locally(status)

    def _cut_off(self) -> None:
        self._reset(ErrorCodes.INTERNAL_ERROR)

    def _reset(self, code: ErrorCodes) -> None:
        if self._state == CLOSED:
            return
        if self._conn_hold is not None:
            self._release_hold()
        self._state = CLOSED
        self._stop_timers()
        self.connection.h2.reset_stream(self.stream_id, code)
        self.connection.flush()
        self.connection.stream_closed(self)

    def _timed_out(self, kind: str) -> None:
        if self._exchange is not None:
            self.factory.metrics.upstream_failures.labels("timeout").inc()
            self._exchange.timed_out()
            return
        if kind == "body" and not self._read_pauses:
            self._refuse(408, "request body not received in time")
            return
        self.factory.metrics.upstream_failures.labels("timeout").inc()
        if kind == "upstream" and self._request_complete and self._retry_after("timeout"):
            return
        self._fail_upstream(504, "upstream timed out")

    def _finish(self, status: int) -> None:
        """The response is sent whole; a request body still coming is declined (RFC 9113 8.1: RST_STREAM NO_ERROR)."""
        if self._state == CLOSED:
            return
        self._request_done(status)
        self._state = CLOSED
        self._stop_timers()
        if not self._request_complete:
            self._drop_upstream()
            try:
                self.connection.h2.reset_stream(self.stream_id, ErrorCodes.NO_ERROR)
            except StreamClosedError:
                pass  # the client's END_STREAM came in the same read, its event not handled yet: closed both ways already
            self.connection.flush()
        self.connection.stream_closed(self)

    def abandon(self) -> None:
        """The client reset the stream, or the connection is gone: the upstream exchange is cut too."""
        if self._state == CLOSED:
            return
        if self._exchange is not None:
            self._exchange.cancel()
        self._state = CLOSED
        self._stop_timers()
        self._drop_upstream()
        self._request_done(499)  # nginx's code for a request the client gave up on

    def _close(self) -> None:
        self._reset(ErrorCodes.CANCEL)

    def _request_done(self, status: int) -> None:
        if self._conn_hold is not None:
            self._release_hold()
        self.factory.metrics.request_done(self._route_name(), status, "h2")
        if self.factory.access_log is not None:
            self.factory.access_log.record(self, status)

    def _route_name(self) -> str:
        return self._route.name if self._route is not None else NO_ROUTE
