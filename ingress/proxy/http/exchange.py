# -*- test-case-name: tests.unit.test_exchange_direct -*-
"""
One request, from its routing to its log line: an L{Exchange}.

An exchange holds everything one request is: its head and route, its limits, the
endpoint it was sent to and the connection it uses, its retries, its deadlines, the
fields its policies add, and the record the access log writes; it runs the request's
steps itself (L{Exchange.run}: the table, forwarding, routing and admission, the guards,
the body limit, upstream) and is the only writer of its state.  It is the
L{ingress.proxy.http.sink.ResponseSink} its upstream connection reports to, and it
talks to its client through a L{ClientSide} (an HTTP/1.1 connection or an HTTP/2 stream),
which frames the answer and reports what it sent.  Its collaborators keep their own state:
its L{Attempts} (which decide what a failure becomes), the route's deadlines
(L{RequestDeadlines}), the fields and place its policies hold (L{ResponseFields}).  A request
costs this allocation and its L{Attempts} (with C{__slots__}; in the optional mypyc build, C structs).
"""

from __future__ import annotations

import time
from typing import Final, Optional

from twisted.internet.interfaces import IConnector

from ingress.observe.metrics import NO_ROUTE
from ingress.proxy.http import h1
from ingress.proxy.http.admission import admitted, limited
from ingress.proxy.http.attempts import Attempts
from ingress.proxy.http.client import DEPARTED, ClientSide
from ingress.proxy.http.deadlines import RequestDeadlines
from ingress.proxy.http.errorpages import error_request_head
from ingress.proxy.http.extauth import Verdict
from ingress.proxy.http.forwarding import ForwardedFor
from ingress.proxy.http.guards import GuardRequest, Guards
from ingress.proxy.http.mirror import MirrorCopy, start_copies
from ingress.proxy.http.policy import chosen_endpoint
from ingress.proxy.http.routed import Routed
from ingress.proxy.http.settings import ProxySettings
from ingress.proxy.http.shared import Shared
from ingress.proxy.http.sink import ResponseSink
from ingress.proxy.http.states import AUTH, AWAIT, BODY, CLOSED, HEAD, TUNNEL
from ingress.proxy.http.steps import ResponseFields
from ingress.proxy.http.trusted import trusted_forwarding
from ingress.proxy.http.upstream import Address, UpstreamConnection
from ingress.routing.policies import EWMA
from ingress.routing.route import Policies
from ingress.routing.table import Route

_PENDING_LIMIT: Final = 1 << 20  # request bytes held while the upstream connection is being opened


class Exchange(ResponseSink):
    """One request and its upstream exchange; C{state}: routing (HEAD), AUTH, BODY, AWAIT, TUNNEL, CLOSED once over."""

    __slots__ = (
        "client", "shared", "settings", "timer", "protocol", "request", "request_method", "forwarded", "state",
        "route", "head_bytes", "upstream", "connecting", "pending", "pending_size", "attempts",
        "sent_at", "status", "responded", "request_complete", "body_sent",
        "max_body", "connect_timeout", "read_timeout", "send_timeout", "fields", "mirrors", "deadlines",
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
        self.pending: Optional[list[bytes]] = None  # request bytes held while the upstream connection is being opened
        self.pending_size = 0
        self.attempts = Attempts()
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
        self.mirrors: tuple[MirrorCopy, ...] = ()  # RequestMirror copies of this request (usually none)
        self.deadlines: Optional[RequestDeadlines] = None  # the route's deadlines (Gateway API timeouts), if any

    # -- the request's steps, once for every framing ---------------------------------------

    def run(self, head: h1.Head, has_body: bool) -> None:
        """
        The request's head was read (C{has_body}: a body follows): the table its local address picks,
        who it is for (trusted forwarding), routing and admission, the guards, then on upstream.
        """
        self.request = head
        self.request_method = head.method
        client = self.client
        table = self.shared.live.table
        if table.addresses:  # Gateways with addresses of their own: the address reached picks the table
            table = table.addresses.get(client.local_host(), table)
        peer = client.peer()  # the connection's peer, unless it is a proxy the table trusts to forward for another
        self.forwarded = forwarded = trusted_forwarding(table.trust, peer, head, client.local_port()) if table.trust is not None else peer
        if not has_body:
            self.request_complete = True
        if not self._admit(admitted(table, head, forwarded, self.settings, client.transport, self.shared.metrics)):
            return
        route = self.route
        policies = route.policies if route is not None else None
        if policies is not None and Guards.wanted(policies):
            self._guard(policies)
            return
        self._forward(has_body)

    def _admit(self, routed: Routed) -> bool:
        """What routing decided (L{admitted}), applied: False when the request was answered (or refused) here."""
        self.route = routed.route
        if routed.status:
            if routed.refused:
                self.client.refuse(routed.status, routed.detail)
            else:
                self.answer(routed.status, location=routed.location, fields=routed.fields)
            return False
        limits = routed.limits
        if limits is not None:
            self.max_body, self.connect_timeout, self.read_timeout, self.send_timeout = limited(
                limits, self.max_body, self.connect_timeout, self.read_timeout, self.send_timeout
            )
            if limits.deadlines is not None:
                self.deadlines = RequestDeadlines(self.shared.reactor, self.deadline_passed)
                self.deadlines.start(limits.deadlines)
        self.head_bytes = routed.head_bytes
        self.fields = ResponseFields(routed.fields) if routed.fields else None
        return True

    def _guard(self, policies: Policies) -> None:
        """
        Rate limits, basic or external auth: the request waits (reading paused) for its verdict; one known at
        once pauses nothing (a pause and a resume are two changes of the reactor's interest in the socket).
        """
        self.state = AUTH
        request = self.request
        assert request is not None
        asked = GuardRequest(policies, request, self.forwarded.ip, self.forwarded.scheme, self.connect_timeout + self.read_timeout)
        checking = self.shared.guards.check(asked)
        if not checking.called:
            self.client.pause_reading("auth")
        checking.addCallback(self._guarded)

    def _guarded(self, verdict: Verdict) -> None:
        if self.state != AUTH:  # answered meanwhile (a deadline), or the client went away
            if verdict.hold is not None:
                self.shared.guards.leave(verdict.hold)
            return
        client = self.client
        client.resume_reading("auth")
        if verdict.status:
            self.shared.metrics.denied.labels(verdict.reason, self.route_name()).inc()
            self.state = AWAIT
            client.guard_decided(False)
            self.answer(verdict.status, fields=verdict.fields)
            return
        self.head_bytes = verdict.applied_to(self.head_bytes)
        if verdict.hold is not None or verdict.cookies:
            self._fields().take_verdict(verdict, self.route)
        self.state = HEAD
        self._forward(not self.request_complete)  # a body's end that came meanwhile is held by the client side
        client.guard_decided(True)

    def _forward(self, has_body: bool) -> None:
        """A routed request that passed its guards: to an HTTP/2 endpoint's stream, or its body read (within the limit) and sent upstream."""
        route, request = self.route, self.request
        assert route is not None and request is not None
        policies = route.policies
        if policies is not None and policies.backend_http2:
            self.state = BODY if has_body else AWAIT
            self.timer.set(self.read_timeout, "upstream")  # no frame either way for this long ends the exchange
            self.client.relay_http2()
            return
        framing = request.framing
        if framing.content_length and framing.content_length > self.max_body:
            self.client.refuse(413, "request body too large")
            return
        if has_body:
            self.client.expect_body(framing)
            self.reading_body()
        else:
            self.timer.set(self.read_timeout, "upstream")
            self.body_done()
        self.start_upstream()

    def route_name(self) -> str:
        return self.route.name if self.route is not None else NO_ROUTE

    def _fields(self) -> ResponseFields:
        if self.fields is None:
            self.fields = ResponseFields(b"")
        return self.fields

    # -- what the client side reports -------------------------------------------------------

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

    def request_ended(self) -> None:
        """The client sent all of its request (an answer came first; what the client side held of it is dropped)."""
        self.request_complete = True

    def sent(self, size: int) -> None:
        """C{size} bytes of the response body went to the client (the access log's body_bytes_sent)."""
        self.body_sent += size

    def responding(self, status: int, upstream: bool) -> None:
        """A response of C{status} begins (C{upstream}: an HTTP/2 endpoint's, timed; else this proxy's own)."""
        if upstream and not self.responded and self.route is not None:
            self.shared.metrics.upstream_answered(self.route.name, time.monotonic() - self.sent_at)
        self.responded = True
        self.status = status

    def sending(self) -> None:
        """The request goes to an endpoint now (an HTTP/2 endpoint's stream opened)."""
        self.sent_at = time.monotonic()

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
        if self.pending is None:
            self.pending = [data]
        else:
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
        attempts = self.attempts
        address = self.choose_endpoint(route) if policies is not None else pool.choose(route.upstream, exclude=attempts.tried)
        if address is None:
            if attempts.tried is None:
                self.answer(503)
            else:
                self.fail(502, "no other endpoint to retry on")
            return
        attempts.begin(address)
        tls = policies.backend_tls if policies is not None and not attempts.error_code else None  # error pages: plain HTTP
        connection = pool.take_idle(address, tls)
        if connection is not None:
            self._bind(connection)
        else:
            self.connecting = pool.connect(address, self._connected, self._connect_failed, self.connect_timeout, tls)

    def choose_endpoint(self, route: Route) -> Optional[Address]:
        """The endpoint the route's policies pick, never the one just tried (L{chosen_endpoint}); a sticky cookie is kept."""
        tried = self.attempts.tried
        if self.attempts.error_code:
            pages = route.policies.error_pages if route.policies is not None else None
            assert pages is not None and pages.backend is not None
            return self.shared.pool.choose(pages.backend, exclude=tried)
        https = self.shared.scheme == b"https"
        address, cookie = chosen_endpoint(route, self.request, self.forwarded.ip, self.shared.pool, tried, https)
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
        self.attempts.connect_failed(self, address, detail, timed_out)

    def _bind(self, connection: UpstreamConnection) -> None:
        self.upstream = connection
        if self.client.client_full:
            connection.transport.pauseProducing()
        pending = self.pending
        self.sent_at = time.monotonic()
        if pending:
            data = self.head_bytes + b"".join(pending)
            self.pending = None
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

    def ask_error_backend(self) -> None:
        """custom-http-errors: the error backend is asked for its answer to the attempts' error code."""
        route, request = self.route, self.request
        pages = route.policies.error_pages if route is not None and route.policies is not None else None
        assert pages is not None and request is not None
        self.head_bytes = error_request_head(pages, self.attempts.error_code, request, self.forwarded.ip)
        self.pending, self.pending_size = None, 0
        self.dispatch()

    def fail(self, status: int, detail: str) -> None:
        """An upstream problem: answered if nothing was sent yet (or by the error backend), else the client is cut off."""
        self.attempts.fail(self, status, detail)

    def timed_out(self) -> None:
        """The client side's timer passed while the upstream (or a body it held back) made no progress."""
        self.attempts.timed_out(self)

    def deadline_passed(self, kind: str) -> None:
        """A route's deadline (Gateway API timeouts) passed."""
        self.attempts.deadline_passed(self, kind)

    # -- ResponseSink: what the upstream connection reports ------------------------------

    def upstream_head(self, head: h1.Head, body: bytes, complete: bool) -> None:
        status = head.status
        if status < 200 and status != 101:
            self.client.send_interim(head)
            return
        client = self.client
        if status == 101 and not client.tunnels:
            self.fail(502, "101 for an HTTP/2 request")
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
        if policies is not None and (policies.retry is not None or policies.error_pages is not None) and self.attempts.declined(self, head.status):
            return False
        if not self.responded:
            waited = time.monotonic() - self.sent_at
            self.shared.metrics.upstream_answered(route.name, waited)
            tried = self.attempts.tried
            if policies is not None and policies.load_balance == EWMA and tried is not None:
                self.shared.pool.ewma.observe(tried, waited)
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
        """The upstream connection failed (C{responded}: it sent something that was not a response)."""
        upstream, self.upstream = self.upstream, None
        reused = upstream is not None and upstream.reused
        if self.state == CLOSED:
            return
        if upstream is not None and self.client.client_full:
            upstream.transport.resumeProducing()
        self.attempts.upstream_failed(self, status, detail, responded, reused)

    def _switch_to_tunnel(self, head: h1.Head, body: bytes) -> None:
        request = self.request
        if not request or not request.upgrade or self.upstream is None:
            self.fail(502, "101 for a request that asked for no upgrade")
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

    # -- the end ------------------------------------------------------------------------------

    def answer(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None:
        """An answer of this proxy's own (404, 503, 502...; a CORS preflight's 204 with C{fields})."""
        self.client.answer(status, close, location, fields)

    def cut(self) -> None:
        """A response that began cannot be finished: counted and logged with its status, and the client sees it cut."""
        self.done(self.status)
        self.client.cut_off()

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
        stops holding it (L{ingress.proxy.http.client.Departed}: no reference cycle outlives the
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
