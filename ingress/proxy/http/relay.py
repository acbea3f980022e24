# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
The upstream half of a client connection: choosing an endpoint, connecting or
reusing a pooled connection, and relaying the response back (a failed exchange
is L{ingress.proxy.http.failures}' part).

L{UpstreamRelay} is a mixin of L{ingress.proxy.http.HTTPProxyProtocol}: the
two halves share one request's state, so they stay one object per
connection (no extra allocation per request), split in two files by what
they talk to.  It is the L{ingress.proxy.http.upstream.ResponseSink} the upstream
connection reports to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from twisted.internet.interfaces import IConnector
from twisted.logger import Logger

from ingress.proxy.http import h1
from ingress.proxy.http.chunked import ChunkedFramer
from ingress.proxy.http.compression import ADDED_FIELDS, GzipBody, compressed_block, should_compress
from ingress.proxy.http.deadlines import DeadlineSteps
from ingress.proxy.http.failures import FailureSteps
from ingress.proxy.http.forwarding import response_head_bytes
from ingress.proxy.http.mirror import MirrorCopy, start_copies
from ingress.proxy.http.policy import chosen_endpoint
from ingress.proxy.http.states import BODY, CLOSED, TUNNEL
from ingress.proxy.http.steps import PolicySteps
from ingress.proxy.http.upstream import Address, UpstreamConnection
from ingress.routing.policies import EWMA, Limits, Mirror

if TYPE_CHECKING:
    from ingress.proxy.http.routed import Routed
    from ingress.proxy.http.settings import ProxySettings
    from ingress.proxy.idle import Deadline
    from ingress.proxy.transport import IConnectionTransport
    from ingress.routing.table import Route

log = Logger()

_PENDING_LIMIT = 1 << 20  # request bytes held while the upstream connection is being opened

class UpstreamRelay(FailureSteps, DeadlineSteps, PolicySteps):
    """
    Dispatch, retry and response relay for the request a connection is serving.

    The annotations below (and L{PolicySteps}', L{DeadlineSteps}' and L{FailureSteps}') are the state both halves share
    (set by the connection half, L{ingress.proxy.http.server.HTTPProxyProtocol}),
    and the stubs are the connection half's methods this half calls: the real
    ones come first in the method resolution order, so the stubs never run.
    """

    transport: IConnectionTransport
    request_method: bytes
    settings: ProxySettings
    _timer: Deadline
    _write: Callable[[bytes], None]
    _buffer: bytes
    _state: int
    _upstream: Optional[UpstreamConnection]
    _connecting: Optional[IConnector]
    _request_id: int
    _attempts: int
    _client_full: bool
    _sent_at: float
    _status: int
    _keep_alive: bool
    _decode: Optional[ChunkedFramer | GzipBody]  # the response body's transform: chunked to plain (HTTP/1.0), or gzip
    _body_sent: int
    _connect_timeout: float
    _read_timeout: float
    _send_timeout: float
    _max_body: int
    _started_at: float
    _mirrors: tuple[MirrorCopy, ...]  # RequestMirror copies of the request being served (usually none)

    def _refuse(self, status: int, detail: str) -> None: ...

    def _pause_reading(self, reason: str) -> None: ...

    def _resume_reading(self, reason: str) -> None: ...

    def _touch_timer(self) -> None:
        """Progress was made: push the body or upstream deadline out by its full length again."""
        kind = self._timer.kind
        if kind == "upstream":
            self._timer.push(self._read_timeout)
        elif kind == "body":
            self._timer.push(self.settings.client_body_timeout)

    def _finish(self, status: int) -> None: ...

    def _close(self) -> None: ...

    def _request_done(self, status: int) -> None: ...

    def _accept_response(self, head: h1.Head) -> bool:
        """
        A final response head arrived: retry on another endpoint if the route's retry policy
        says so for its status (False), or take it (timed, and scored for ewma).
        """
        route = self._route
        assert route is not None
        policies = route.policies
        if policies is not None and not self._error_code:
            if policies.retry is not None and head.status in policies.retry.statuses and self._retry_after(f"http_{head.status}"):
                return False
            if policies.error_pages is not None and self._error_page_taken(head.status, upstream_sent=True):
                return False
        if not self._responded:
            waited = time.monotonic() - self._sent_at
            self.factory.metrics.upstream_answered(route.name, waited)
            if policies is not None and policies.load_balance == EWMA and self._tried is not None:
                self.factory.pool.ewma.observe(self._tried, waited)
        self._responded = True
        self._status = head.status
        return True

    def _take_routing(self, routed: Routed) -> bool:
        """What routing decided, taken on: False when the request was answered (or refused) here."""
        self._route = routed.route
        if routed.status:
            if routed.denied:
                self.factory.metrics.denied.labels(routed.denied, self._route_name()).inc()
            if routed.refused:
                self._refuse(routed.status, routed.detail)
            else:
                self._answer_locally(routed.status, location=routed.location, fields=routed.fields)
            return False
        if routed.limits is not None:
            self._apply_limits(routed.limits)
        self._head_bytes = routed.head_bytes
        self._response_fields = routed.fields
        return True

    def _apply_limits(self, limits: Limits) -> None:
        """This request's timeouts and body limit are its route's where the route sets them."""
        if limits.max_body_bytes is not None:
            self._max_body = limits.max_body_bytes
        if limits.connect_timeout is not None:
            self._connect_timeout = limits.connect_timeout
        if limits.read_timeout is not None:
            self._read_timeout = limits.read_timeout
        if limits.send_timeout is not None:
            self._send_timeout = limits.send_timeout
        if limits.deadlines is not None:
            self._start_deadlines(limits.deadlines)

    def _deadline_applies(self) -> bool:
        """A deadline may still end the request (not once it is over or a tunnel)."""
        return self._state != CLOSED and self._state != TUNNEL

    def _dispatch(self) -> None:
        """Pick an endpoint and send the request there (pooled connection first)."""
        route = self._route
        assert route is not None
        pool = self.factory.pool
        policies = route.policies
        address = self._choose_endpoint(route) if policies is not None else pool.choose(route.upstream, exclude=self._tried)
        if address is None:
            if self._tried is None:
                self._answer_locally(503)
            else:
                self._fail_upstream(502, "no other endpoint to retry on")
            return
        self._attempts += 1
        self._tried = address
        tls = policies.backend_tls if policies is not None and not self._error_code else None  # error pages: plain HTTP
        connection = pool.take_idle(address, tls)
        if connection is not None:
            self._bind(connection)
        else:
            request_id = self._request_id
            self._connecting = pool.connect(
                address,
                lambda connection: self._connected(connection, request_id),
                lambda address, detail, timed_out: self._connect_failed(address, detail, timed_out, request_id),
                self._connect_timeout,
                tls,
            )

    def _choose_endpoint(self, route: Route) -> Optional[Address]:
        """The endpoint the route's policies pick, never the one just tried (L{chosen_endpoint}); a sticky cookie is kept."""
        if self._error_code:
            pages = route.policies.error_pages if route.policies is not None else None
            assert pages is not None and pages.backend is not None
            return self.factory.pool.choose(pages.backend, exclude=self._tried)
        https = self.factory.scheme == b"https"
        address, cookie = chosen_endpoint(route, self._request, self._forwarded.ip, self.factory.pool, self._tried, https)
        if cookie is not None:
            self._set_cookie = cookie
        return address

    def _connected(self, connection: UpstreamConnection, request_id: int) -> None:
        if request_id != self._request_id or self._state == CLOSED:
            connection.transport.loseConnection()  # the request was answered meanwhile
            return
        self._connecting = None
        self.factory.pool.mark_up(connection.address)
        self._bind(connection)

    def _connect_failed(self, address: Address, detail: str, timed_out: bool, request_id: int) -> None:
        if request_id != self._request_id or self._state == CLOSED:
            return
        self._connecting = None
        pool = self.factory.pool
        pool.mark_down(address)
        self.factory.metrics.upstream_failures.labels("connect-timeout" if timed_out else "connect").inc()
        log.warn("upstream {address} failed: {detail}", address=f"{address[0]}:{address[1]}", detail=detail)
        if self._may_retry("connect-timeout" if timed_out else "connect-error", reused=False):
            self._redispatch()
            return
        self._fail_upstream(504 if timed_out else 502, detail)

    def _bind(self, connection: UpstreamConnection) -> None:
        self._upstream = connection
        if self._client_full:
            connection.transport.pauseProducing()
        pending = self._pending
        self._sent_at = time.monotonic()
        if pending:
            data = self._head_bytes + b"".join(pending)
            self._pending = []
            self._pending_size = 0
            self._resume_reading("connecting")
        else:
            data = self._head_bytes
        connection.start(self, data)

    # ResponseSink: what the upstream connection reports.

    def upstream_head(self, head: h1.Head, body: bytes, complete: bool) -> None:
        request = self._request
        assert request is not None and self._route is not None
        if head.status < 200 and head.status != 101:
            if request.version >= (1, 1):
                self._write(response_head_bytes(head, request, self.settings.server_name, True, False))
            return
        if not self._accept_response(head):
            return
        policies = self._route.policies
        if head.status == 101:
            self._switch_to_tunnel(head, body)
            return
        decode = head.framing.chunked and request.version < (1, 1)
        keep = (
            self._keep_alive
            and self._request_complete
            and not head.framing.until_close
            and not decode
        )
        self._keep_alive = keep
        added = self._added_fields(head.status)
        gzip = self.settings.gzip
        if decode:
            self._decode = ChunkedFramer(decode=True)
        elif gzip is not None and should_compress(gzip, request.method, request.version, request.block, head.status, head.block, head.framing.content_length):
            self._decode = GzipBody(gzip.level, head.framing.chunked, length=head.framing.content_length)
            head = replace(head, block=compressed_block(head.block))
            decode, added = True, added + ADDED_FIELDS + b"Transfer-Encoding: chunked\r\n"
        hsts = self._route.hsts if self.factory.scheme == b"https" else ""
        changes = policies.response_headers if policies is not None else None
        out = response_head_bytes(head, request, self.settings.server_name, keep, decode, hsts, added, changes, self._forwarded)
        if body:
            body = self._decoded(body) if decode else body
            out += body
        self._body_sent = len(body)
        self._write(out)

    def upstream_data(self, data: bytes) -> None:
        if self._decode is not None:
            data = self._decoded(data)
        self._body_sent += len(data)
        self._write(data)
        self._touch_timer()

    def _decoded(self, data: bytes) -> bytes:
        framer = self._decode
        assert framer is not None
        framer.feed(data)
        payload = b"".join(framer.payload)
        framer.payload.clear()
        return payload

    def upstream_tunnel_data(self, data: bytes) -> None:
        self._write(data)

    def upstream_write_paused(self, paused: bool) -> None:
        """While the upstream takes none of the request we send, the send timeout runs (nginx's proxy_send_timeout)."""
        if paused:
            self._pause_reading("upstream")
            self._timer.set(self._send_timeout, "send")
        else:
            self._resume_reading("upstream")
            if self._state == BODY:
                self._timer.set(self.settings.client_body_timeout, "body")
            elif self._timer.kind == "send":
                self._timer.set(self._read_timeout, "upstream")

    def upstream_done(self) -> None:
        if self._state == TUNNEL:
            self._upstream = None
            self._close()
            return
        self._release_upstream()
        if type(self._decode) is GzipBody:
            tail = self._decode.finish()
            self._body_sent += len(tail)
            self._write(tail)
        self._finish(self._status)

    def _release_upstream(self) -> None:
        """The exchange is over: its connection goes back to the pool, or closes if the request was cut short."""
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            if self._client_full:
                upstream.transport.resumeProducing()
            if self._request_complete:
                self.factory.pool.release(upstream)
            else:
                upstream.transport.loseConnection()

    def _start_mirrors(self, mirror: Mirror) -> None:
        """RequestMirror: copies of this request (its head now, its body as it is sent upstream) to the route's mirrors."""
        factory = self.factory
        self._mirrors = start_copies(
            mirror, self._head_bytes, factory.pool, factory.reactor, factory.metrics, self._route_name(), self._connect_timeout, self._read_timeout,
            self._request, (self._forwarded.ip, self._forwarded.scheme),
        )

    def _send_upstream(self, data: bytes) -> None:
        """Request bytes: to the upstream connection, or held (up to a limit) while it is being opened."""
        if self._mirrors:
            for copy in self._mirrors:
                copy.send(data)
        upstream = self._upstream
        if upstream is not None:
            upstream.write(data)
            return
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size > _PENDING_LIMIT:
            self._pause_reading("connecting")

    def _switch_to_tunnel(self, head: h1.Head, body: bytes) -> None:
        request = self._request
        if not request or not request.upgrade or self._upstream is None:
            self._fail_upstream(502, "101 for a request that asked for no upgrade")
            return
        self._state = TUNNEL
        self._timer.cancel()
        self._write(response_head_bytes(head, request, self.settings.server_name, True, False) + body)
        self._request_done(101)
        leftover, self._buffer = self._buffer, b""
        if leftover:
            self._upstream.write(leftover)
