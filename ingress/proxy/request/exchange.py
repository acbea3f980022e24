# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
One request, from its routing to its log line: an L{Exchange}.

An exchange holds everything one request is: its head and route, its limits, the
endpoint it was sent to and the connection it uses, its retries, its deadlines, the
fields its policies add, and the record the access log writes.  It is the
L{ingress.proxy.request.sink.ResponseSink} its upstream connection reports to, and it
talks to its client through a L{ClientSide} (an HTTP/1.1 connection or an HTTP/2 stream),
which frames the answer.  Its collaborators keep their own state: the route's deadlines
(L{RequestDeadlines}), the fields and place its policies hold (L{ResponseFields}); what
routing decided is applied by L{ingress.proxy.request.admission}, what a failure becomes is
L{ingress.proxy.request.failures}'.  A request costs this one allocation
(with C{__slots__}; in the optional mypyc build, a C struct).
"""

from __future__ import annotations

import time
from typing import Final, Optional

from twisted.internet.interfaces import IConnector

from ingress.observe.metrics import NO_ROUTE
from ingress.proxy.message import h1
from ingress.proxy.request import failures
from ingress.proxy.request.client import DEPARTED, ClientSide
from ingress.proxy.request.deadlines import RequestDeadlines
from ingress.proxy.request.extauth import Verdict
from ingress.proxy.request.forwarding import ForwardedFor
from ingress.proxy.request.mirror import MirrorCopy, start_copies
from ingress.proxy.request.policy import chosen_endpoint
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.shared import Shared
from ingress.proxy.request.sink import ResponseSink
from ingress.proxy.request.states import AUTH, AWAIT, BODY, CLOSED, HEAD, TUNNEL
from ingress.proxy.request.steps import ResponseFields
from ingress.proxy.request.upstream import Address, UpstreamConnection
from ingress.routing.policies import EWMA
from ingress.routing.route import Policies
from ingress.routing.table import Route

_PENDING_LIMIT: Final = 1 << 20  # request bytes held while the upstream connection is being opened


class Exchange(ResponseSink):
    """One request and its upstream exchange; C{state}: routing (HEAD), AUTH, BODY, AWAIT, TUNNEL, CLOSED once over."""

    __slots__ = (
        "client", "shared", "settings", "timer", "protocol", "request", "request_method", "forwarded", "state",
        "route", "head_bytes", "upstream", "connecting", "pending", "pending_size", "attempts", "tried",
        "started_at", "sent_at", "status", "responded", "request_complete", "body_sent",
        "max_body", "connect_timeout", "read_timeout", "send_timeout", "fields", "error_code", "mirrors", "deadlines",
    )  # fmt: skip

    def __init__(self, client: ClientSide, shared: Shared, settings: ProxySettings, request: Optional[h1.Head], forwarded: ForwardedFor, protocol: str) -> None:
        self.client = client
        self.shared = shared
        self.settings = settings
        self.timer = client.timer
        self.protocol = protocol  # the metrics' label: "http/1.1" or "h2"
        self.request = request  # None: a request refused before its head could be read
        self.request_method = request.method if request is not None else b""
        self.forwarded = forwarded  # the client as forwarded upstream and logged
        self.state = HEAD
        self.route: Optional[Route] = None
        self.head_bytes = b""  # the head sent upstream
        self.upstream: Optional[UpstreamConnection] = None
        self.connecting: Optional[IConnector] = None
        self.pending: list[bytes] = []  # request bytes held while the upstream connection is being opened
        self.pending_size = 0
        self.attempts = 0
        self.tried: Optional[Address] = None  # the endpoint of the latest attempt
        self.started_at = time.monotonic()
        self.sent_at = 0.0
        self.status = 0
        self.responded = False  # the response head went to the client
        self.request_complete = False  # the whole request was read
        self.body_sent = 0  # response body bytes sent (counted by the client side)
        self.max_body = settings.max_body_bytes  # the route's limits may change these
        self.connect_timeout = settings.connect_timeout
        self.read_timeout = settings.upstream_timeout
        self.send_timeout = settings.upstream_timeout
        self.fields: Optional[ResponseFields] = None  # made for a request whose policies add fields or hold a place
        self.error_code = 0  # the status an error backend is asked to answer for (custom-http-errors), else 0
        self.mirrors: tuple[MirrorCopy, ...] = ()  # RequestMirror copies of this request (usually none)
        self.deadlines: Optional[RequestDeadlines] = None  # the route's deadlines (Gateway API timeouts), if any

    # -- routing, guards, the request ---------------------------------------------------

    def route_name(self) -> str:
        return self.route.name if self.route is not None else NO_ROUTE

    def guard(self, policies: Policies) -> None:
        """
        Rate limits, basic or external auth: the request waits (reading paused) for its verdict; one known at
        once pauses nothing (a pause and a resume are two changes of the reactor's interest in the socket).
        """
        self.state = AUTH
        request = self.request
        assert request is not None
        timeout = self.connect_timeout + self.read_timeout
        checking = self.shared.guards.check(policies, request, self.forwarded.ip, self.forwarded.scheme, timeout)
        if not checking.called:
            self.client.pause_reading("auth")
        checking.addCallback(self._guarded)

    def _guarded(self, verdict: Verdict) -> None:
        if self.state != AUTH:  # answered meanwhile (a deadline), or the client went away
            if verdict.hold is not None:
                self.shared.guards.leave(verdict.hold)
            return
        self.client.resume_reading("auth")
        if verdict.status:
            self.shared.metrics.denied.labels(verdict.reason, self.route_name()).inc()
        else:
            self.head_bytes = verdict.applied_to(self.head_bytes)
            if verdict.hold is not None or verdict.cookies:
                self._fields().take_verdict(verdict, self.route)
        self.client.guarded(verdict)

    def _fields(self) -> ResponseFields:
        if self.fields is None:
            self.fields = ResponseFields(b"")
        return self.fields

    def reading_body(self) -> None:
        """The request's body is being read: the client's wait for it runs."""
        self.state = BODY
        self.timer.set(self.settings.client_body_timeout, "body")

    def body_done(self) -> None:
        """The whole request was read: the wait is the upstream's now."""
        self.request_complete = True
        self.state = AWAIT
        if self.timer.kind == "body":
            self.timer.set(self.read_timeout, "upstream")

    def start_upstream(self) -> None:
        """A routed request that passed its guards: its mirrors' copies (if any) start, and it is sent."""
        route = self.route
        assert route is not None
        policies = route.policies
        if policies is not None and policies.mirror is not None:
            shared = self.shared
            self.mirrors = start_copies(
                policies.mirror, self.head_bytes, shared.pool, shared.reactor, shared.metrics, route.name, self.connect_timeout,
                self.read_timeout, self.request, (self.forwarded.ip, self.forwarded.scheme),
            )  # fmt: skip
        self.dispatch()

    def send_upstream(self, data: bytes) -> None:
        """Request bytes: to the upstream connection, or held (up to a limit) while it is being opened."""
        if self.mirrors:
            for copy in self.mirrors:
                copy.send(data)
        upstream = self.upstream
        if upstream is not None:
            upstream.write(data)
            return
        self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size > _PENDING_LIMIT:
            self.client.pause_reading("connecting")

    def touch_timer(self) -> None:
        """Progress was made: push the body or upstream deadline out by its full length again."""
        kind = self.timer.kind
        if kind == "upstream":
            self.timer.push(self.read_timeout)
        elif kind == "body":
            self.timer.push(self.settings.client_body_timeout)

    # -- the upstream exchange ------------------------------------------------------------

    def dispatch(self) -> None:
        """Pick an endpoint and send the request there (pooled connection first)."""
        route = self.route
        assert route is not None
        pool = self.shared.pool
        policies = route.policies
        address = self.choose_endpoint(route) if policies is not None else pool.choose(route.upstream, exclude=self.tried)
        if address is None:
            if self.tried is None:
                self.answer(503)
            else:
                failures.fail_upstream(self, 502, "no other endpoint to retry on")
            return
        self.attempts += 1
        self.tried = address
        tls = policies.backend_tls if policies is not None and not self.error_code else None  # error pages: plain HTTP
        connection = pool.take_idle(address, tls)
        if connection is not None:
            self._bind(connection)
        else:
            self.connecting = pool.connect(address, self._connected, self._connect_failed, self.connect_timeout, tls)

    def choose_endpoint(self, route: Route) -> Optional[Address]:
        """The endpoint the route's policies pick, never the one just tried (L{chosen_endpoint}); a sticky cookie is kept."""
        if self.error_code:
            pages = route.policies.error_pages if route.policies is not None else None
            assert pages is not None and pages.backend is not None
            return self.shared.pool.choose(pages.backend, exclude=self.tried)
        https = self.shared.scheme == b"https"
        address, cookie = chosen_endpoint(route, self.request, self.forwarded.ip, self.shared.pool, self.tried, https)
        if cookie is not None:
            self._fields().set_cookie = cookie
        return address

    def _connected(self, connection: UpstreamConnection) -> None:
        if self.state == CLOSED:
            connection.transport.loseConnection()  # the request was answered meanwhile
            return
        self.connecting = None
        self.shared.pool.mark_up(connection.address)
        self._bind(connection)

    def _connect_failed(self, address: Address, detail: str, timed_out: bool) -> None:
        if self.state == CLOSED:
            return
        self.connecting = None
        failures.connect_failed(self, address, detail, timed_out)

    def _bind(self, connection: UpstreamConnection) -> None:
        self.upstream = connection
        if self.client.client_full:
            connection.transport.pauseProducing()
        pending = self.pending
        self.sent_at = time.monotonic()
        if pending:
            data = self.head_bytes + b"".join(pending)
            self.pending = []
            self.pending_size = 0
            self.client.resume_reading("connecting")
        else:
            data = self.head_bytes
        connection.start(self, data)

    def redispatch(self) -> None:
        """Another attempt at a backend (a retry): a backend deadline starts again."""
        if self.deadlines is not None:
            self.deadlines.attempt()
        self.dispatch()

    def drop_upstream(self) -> None:
        """Abort the upstream connection (or the attempt to open one)."""
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.owner = None
            upstream.transport.abortConnection()
        if self.connecting is not None:
            self.connecting.disconnect()
            self.connecting = None

    # -- ResponseSink: what the upstream connection reports ------------------------------

    def upstream_head(self, head: h1.Head, body: bytes, complete: bool) -> None:
        status = head.status
        if status < 200 and status != 101:
            self.client.send_interim(head)
            return
        client = self.client
        if status == 101 and not client.tunnels:
            failures.fail_upstream(self, 502, "101 for an HTTP/2 request")
            return
        if not self._accept_response(head):
            return
        if status == 101:
            self._switch_to_tunnel(head, body)
            return
        fields = self.fields
        client.send_head(head, body, complete, fields.added(status) if fields is not None else b"")

    def _accept_response(self, head: h1.Head) -> bool:
        """A final response head: retried or replaced where the route's policies say so (False), or taken, timed and scored for ewma."""
        route = self.route
        assert route is not None
        policies = route.policies
        if policies is not None and (policies.retry is not None or policies.error_pages is not None) and failures.declines_response(self, head):
            return False
        if not self.responded:
            waited = time.monotonic() - self.sent_at
            self.shared.metrics.upstream_answered(route.name, waited)
            if policies is not None and policies.load_balance == EWMA and self.tried is not None:
                self.shared.pool.ewma.observe(self.tried, waited)
        self.responded = True
        self.status = head.status
        return True

    def upstream_data(self, data: bytes) -> None:
        self.client.send_body(data)
        self.touch_timer()

    def upstream_tunnel_data(self, data: bytes) -> None:
        self.client.send_tunnel(data)

    def upstream_write_paused(self, paused: bool) -> None:
        """While the upstream takes none of the request we send, the send timeout runs (nginx's proxy_send_timeout)."""
        if paused:
            self.client.pause_reading("upstream")
            self.timer.set(self.send_timeout, "send")
        else:
            self.client.resume_reading("upstream")
            if self.state == BODY:
                self.timer.set(self.settings.client_body_timeout, "body")
            elif self.timer.kind == "send":
                self.timer.set(self.read_timeout, "upstream")

    def upstream_done(self) -> None:
        if self.state == TUNNEL:
            self.upstream = None
            self.client.close()
            return
        self._release_upstream()
        self.client.end_response()

    def upstream_failed(self, status: int, detail: str, responded: bool) -> None:
        failures.upstream_failed(self, status, detail, responded)

    def _switch_to_tunnel(self, head: h1.Head, body: bytes) -> None:
        request = self.request
        if not request or not request.upgrade or self.upstream is None:
            failures.fail_upstream(self, 502, "101 for a request that asked for no upgrade")
            return
        self.state = TUNNEL
        self.timer.cancel()
        self.client.open_tunnel(head, body)
        self.done(101)

    def _release_upstream(self) -> None:
        """The exchange is over: its connection goes back to the pool, or closes if the request was cut short."""
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            if self.client.client_full:
                upstream.transport.resumeProducing()
            if self.request_complete:
                self.shared.pool.release(upstream)
            else:
                upstream.transport.loseConnection()

    def timed_out(self) -> None:
        """The client side's timer passed while the upstream (or a body it held back) made no progress."""
        failures.timed_out(self)

    def deadline_passed(self, kind: str) -> None:
        """A route's deadline (Gateway API timeouts) passed."""
        failures.deadline_passed(self, kind)

    def answer(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None:
        """An answer of this proxy's own (404, 503, 502...; a CORS preflight's 204 with C{fields})."""
        self.client.answer(status, close, location, fields)

    def done(self, status: int) -> None:
        """The response is complete (or cut): counted, and logged when the access log is on."""
        if self.fields is not None:
            self.fields.release(self.shared.guards)
        shared = self.shared
        shared.metrics.request_done(self.route_name(), status, self.protocol)
        if shared.access_log is not None:
            shared.access_log.record(self, status)

    def let_go(self) -> None:
        """
        Its client side has ended and is done with it (after L{done} and L{end}): the exchange
        stops holding it (L{ingress.proxy.request.client.Departed}: no reference cycle outlives the
        request), and anything that still reaches the exchange late speaks to no one.
        """
        self.client = DEPARTED

    def end(self) -> bool:
        """The exchange is over (answered, cut, or its client gone): False if it already was."""
        if self.state == CLOSED:
            return False
        self.state = CLOSED
        if self.deadlines is not None:
            self.deadlines.cancel()
        if self.fields is not None:
            self.fields.release(self.shared.guards)
        return True
