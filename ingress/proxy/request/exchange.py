# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
One request, from its routing to its log line: an L{Exchange}, which holds all of its state (head,
route, limits, endpoint and connection, retries, deadlines, its policies' fields, the access log's
record) and runs its steps, the same for every framing.  Its client side (L{ClientSide}: an HTTP/1.1
connection, an HTTP/2 stream) hands it the head (L{Exchange.run}) and body, and frames the answer.
Only it and its collaborators write its fields (tests/unit/test_exchange_writers.py): admission
(L{route_for}), limits (L{RequestLimits}), deadlines (L{RequestDeadlines}), its policies' fields
(L{ResponseFields}), failures (L{ingress.proxy.request.failures}).  It is the L{ResponseSink} its
upstream connection reports to.  A request costs this one allocation (C{__slots__}; compiled: a C struct).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Final, Optional

from twisted.internet.interfaces import IConnector

from ingress.observe.metrics import NO_ROUTE
from ingress.proxy.message import h1
from ingress.proxy.request import failures
from ingress.proxy.request.admission import route_for
from ingress.proxy.request.client import DEPARTED, ClientSide
from ingress.proxy.request.deadlines import RequestDeadlines
from ingress.proxy.request.extauth import Verdict
from ingress.proxy.request.forwarding import ForwardedFor
from ingress.proxy.request.guards import Guards
from ingress.proxy.request.limits import RequestLimits
from ingress.proxy.request.mirror import MirrorCopy, start_copies
from ingress.proxy.request.policy import endpoint_for
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.shared import Shared
from ingress.proxy.request.sink import ResponseSink
from ingress.proxy.request.states import AUTH, AWAIT, BODY, CLOSED, HEAD, TUNNEL
from ingress.proxy.request.steps import ResponseFields
from ingress.proxy.request.trusted import trusted_forwarding
from ingress.proxy.request.upstream import Address, UpstreamConnection
from ingress.routing.policies import EWMA
from ingress.routing.table import Route

_PENDING_LIMIT: Final = 1 << 20  # request bytes held while the upstream connection is being opened


class Exchange(ResponseSink):
    """One request and its upstream exchange; C{state}: routing (HEAD), AUTH, BODY, AWAIT, TUNNEL, CLOSED once over."""

    __slots__ = (
        "client", "shared", "settings", "timer", "protocol", "request", "request_method", "forwarded", "state",
        "route", "head_bytes", "upstream", "connecting", "pending", "pending_size", "attempts", "tried",
        "started_at", "sent_at", "status", "responded", "request_complete", "body_sent",
        "limits", "fields", "error_code", "mirrors", "deadlines",
    )  # fmt: skip

    def __init__(self, client: ClientSide, shared: Shared, settings: ProxySettings, limits: RequestLimits, forwarded: ForwardedFor, protocol: str) -> None:
        self.client = client
        self.shared = shared
        self.settings = settings
        self.timer = client.timer
        self.protocol = protocol  # the metrics' label: "http/1.1" or "h2"
        self.request: Optional[h1.Head] = None  # the head L{run} was given; None: a request refused before its head could be read
        self.request_method = b""
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
        self.limits = limits  # its client connection's; a route's limits make the request its own
        self.fields: Optional[ResponseFields] = None  # made for a request whose policies add fields or hold a place
        self.error_code = 0  # the status an error backend is asked to answer for (custom-http-errors), else 0
        self.mirrors: tuple[MirrorCopy, ...] = ()  # RequestMirror copies of this request (usually none)
        self.deadlines: Optional[RequestDeadlines] = None  # the route's deadlines (Gateway API timeouts), if any


    def run(self, head: h1.Head, has_body: bool) -> None:
        """
        Its client side read a request's head (C{has_body}: a body follows): the table for the address it reached,
        who it is forwarded for, its admission (L{route_for}), then its guards or its forwarding.
        """
        self.request = head
        self.request_method = head.method
        self.request_complete = not has_body
        client = self.client
        table = self.shared.live.table
        if table.addresses:  # Gateways with addresses of their own: the address reached picks the table
            table = table.addresses.get(client.local_host(), table)
        forwarded = self.forwarded = client.peer() if table.trust is None else trusted_forwarding(table.trust, client.peer(), head, client.local_port())
        routed = route_for(table, head, forwarded, self.settings, client.transport)
        route = self.route = routed.route
        if routed.status:
            if routed.denied:
                self.shared.metrics.denied.labels(routed.denied, self.route_name()).inc()
            if routed.refused:
                client.refuse(routed.status, routed.detail)
            else:
                self.answer(routed.status, location=routed.location, fields=routed.fields)
            return
        limits = routed.limits
        if limits is not None:
            self.limits = self.limits.with_route(limits)
            if limits.deadlines is not None:
                self.deadlines = RequestDeadlines.started(self.shared.reactor, partial(failures.deadline_passed, self), limits.deadlines)
        self.head_bytes = routed.head_bytes
        self.fields = ResponseFields(routed.fields) if routed.fields else None
        policies = route.policies if route is not None else None
        if policies is not None and Guards.wanted(policies):  # rate limits, basic or external auth: the request waits for its verdict
            self.state = AUTH
            timeout = self.limits.connect_timeout + self.limits.read_timeout
            self.shared.guards.wait(policies, head, forwarded, timeout, client, self._guarded)
            return
        self._forward()

    def route_name(self) -> str:
        return self.route.name if self.route is not None else NO_ROUTE

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
            client.guarded(False)
            self.answer(verdict.status, fields=verdict.fields)
            return
        self.head_bytes = verdict.applied_to(self.head_bytes)
        if verdict.hold is not None or verdict.cookies:
            self._fields().take_verdict(verdict, self.route)
        self.state = HEAD
        self._forward()
        client.guarded(True)

    def _forward(self) -> None:
        """A routed request that passed its guards: relayed to an HTTP/2 endpoint, or its body (if any) read and sent upstream."""
        request, route = self.request, self.route
        assert request is not None and route is not None
        policies = route.policies
        if policies is not None and policies.backend_http2:
            self.state = AWAIT if self.request_complete else BODY
            self.timer.set(self.limits.read_timeout, "upstream")  # no frame either way for this long ends the exchange
            self.client.relay_http2()
            return
        framing = request.framing
        max_body = self.limits.max_body
        if framing.content_length and framing.content_length > max_body:
            self.client.refuse(413, "request body too large")
            return
        if self.request_complete:
            self.timer.set(self.limits.read_timeout, "upstream")
            self.state = AWAIT
        else:
            self.client.read_body(framing, max_body)
            self.state = BODY
            self.timer.set(self.limits.body_timeout, "body")  # the client's wait for its body
        if policies is not None and policies.mirror is not None:  # the mirrors' copies start with it
            shared = self.shared
            self.mirrors = start_copies(
                policies.mirror, self.head_bytes, shared.pool, shared.reactor, shared.metrics, route.name, self.limits.connect_timeout,
                self.limits.read_timeout, request, (self.forwarded.ip, self.forwarded.scheme),
            )  # fmt: skip
        self.dispatch()

    def _fields(self) -> ResponseFields:
        if self.fields is None:
            self.fields = ResponseFields(b"")
        return self.fields

    def body_done(self) -> None:
        """The whole request was read (or the client's half ended): the wait, if its body was read, is the upstream's now."""
        self.request_complete = True
        if self.state == BODY:
            self.state = AWAIT
            if self.timer.kind == "body":
                self.timer.set(self.limits.read_timeout, "upstream")

    def sent(self, size: int) -> None:
        """C{size} more bytes of the response's body went to the client side (an answer of its own, a body's last bytes)."""
        self.body_sent += size

    def responding(self, status: int) -> None:
        """A response of C{status} began for the client (an HTTP/2 endpoint's, or an answer of this proxy's own)."""
        self.responded = True
        self.status = status

    def attempt(self, address: Optional[Address], sent: bool) -> None:
        """An HTTP/2 endpoint's relay tries C{address}; C{sent}: it sent the request there, an attempt timed from now."""
        self.tried = address
        if sent:
            self.sent_at = time.monotonic()
            self.attempts += 1

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
        """Progress was made: the body or upstream wait starts again (L{RequestLimits.touch})."""
        self.limits.touch(self.timer)


    def dispatch(self) -> None:
        """Pick an endpoint and send the request there (pooled connection first)."""
        route = self.route
        assert route is not None
        pool = self.shared.pool
        policies = route.policies
        address = self.choose_endpoint(route) if policies is not None else pool.choose(route.upstream, exclude=self.tried)
        if address is None:
            failures.no_endpoint(self)
            return
        self.attempts += 1
        self.tried = address
        tls = policies.backend_tls if policies is not None and not self.error_code else None  # error pages: plain HTTP
        connection = pool.take_idle(address, tls)
        if connection is not None:
            self._bind(connection)
        else:
            self.connecting = pool.connect(address, self._connected, partial(failures.connect_failed, self), self.limits.connect_timeout, tls)

    def choose_endpoint(self, route: Route) -> Optional[Address]:
        """The endpoint the route's policies pick, never the one just tried (L{endpoint_for}); a sticky cookie is kept."""
        address, cookie = endpoint_for(route, self.request, self.forwarded.ip, self.shared, self.tried, self.error_code)
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

    def _bind(self, connection: UpstreamConnection) -> None:
        self.upstream = connection
        if self.client.client_full:
            connection.transport.pauseProducing()
        pending = self.pending
        self.sent_at = time.monotonic()
        if pending:
            data = self.head_bytes + b"".join(pending)
            self.pending, self.pending_size = [], 0
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
        self.body_sent = client.send_head(head, body, complete, fields.added(status) if fields is not None else b"")

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
        self.body_sent += self.client.send_body(data)
        self.limits.touch(self.timer)

    def upstream_tunnel_data(self, data: bytes) -> None:
        self.client.send_tunnel(data)

    def upstream_write_paused(self, paused: bool) -> None:
        """While the upstream takes none of the request we send, reading stops and the send timeout runs."""
        (self.client.pause_reading if paused else self.client.resume_reading)("upstream")
        self.limits.write_paused(self.timer, paused, self.state == BODY)

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
        """Its client side has ended (after L{done}, L{end}): no reference cycle outlives the request (L{ingress.proxy.request.client.Departed})."""
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
