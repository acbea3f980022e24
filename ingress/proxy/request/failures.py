# -*- test-case-name: tests.proxy.test_retry -*-
"""
What a failed or unwelcome upstream answer becomes for one exchange: another endpoint
(L{ingress.proxy.request.retry} decides whether), the error backend's answer (custom-http-errors),
an error answer while nothing was sent to the client, a cut response once something was.

Functions of an exchange (L{ingress.proxy.request.exchange.Exchange}), kept apart from the path
every request runs; L{Attempted} is what they read and call of it.
"""

from __future__ import annotations

import time
from typing import Optional, Protocol

from twisted.internet.interfaces import IConnector
from twisted.logger import Logger

from ingress.proxy.idle import Deadline
from ingress.proxy.message import h1
from ingress.proxy.request.client import ClientSide
from ingress.proxy.request.deadlines import BACKEND
from ingress.proxy.request.errorpages import error_request_head
from ingress.proxy.request.forwarding import ForwardedFor
from ingress.proxy.request.retry import may_retry
from ingress.proxy.request.shared import Shared
from ingress.proxy.request.states import AWAIT, BODY, CLOSED, TUNNEL
from ingress.proxy.request.upstream import Address, UpstreamConnection
from ingress.routing.table import Route

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from


class Attempted(Protocol):
    """The exchange as its failure steps see it: its request, its attempts, its answer so far."""

    client: ClientSide
    shared: Shared
    timer: Deadline
    state: int
    request: Optional[h1.Head]
    route: Optional[Route]
    forwarded: ForwardedFor
    upstream: Optional[UpstreamConnection]
    connecting: Optional[IConnector]
    attempts: int
    tried: Optional[Address]
    started_at: float
    sent_at: float
    responded: bool
    status: int
    request_complete: bool
    error_code: int
    head_bytes: bytes
    pending: list[bytes]
    pending_size: int

    def route_name(self) -> str: ...

    def dispatch(self) -> None: ...

    def redispatch(self) -> None: ...

    def drop_upstream(self) -> None: ...

    def answer(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None: ...

    def done(self, status: int) -> None: ...


def upstream_failed(exchange: Attempted, status: int, detail: str, responded: bool) -> None:
    """The upstream connection failed (C{responded}: it sent something that was not a response)."""
    upstream, exchange.upstream = exchange.upstream, None
    reused = upstream is not None and upstream.reused
    if exchange.state == CLOSED:
        return
    if upstream is not None and exchange.client.client_full:
        upstream.transport.resumeProducing()
    if not exchange.responded:
        if not responded:
            exchange.shared.metrics.upstream_failures.labels("reset").inc()
        if _may_retry(exchange, "invalid_header" if responded else "error", reused):
            exchange.tried = None if reused else exchange.tried
            exchange.redispatch()
            return
    fail_upstream(exchange, status, detail)


def connect_failed(exchange: Attempted, address: Address, detail: str, timed_out: bool) -> None:
    """No connection to C{address}: the next endpoint where allowed, else 502 (504 for a timeout); nothing once the request is over."""
    if exchange.state == CLOSED:
        return
    exchange.connecting = None
    shared = exchange.shared
    shared.pool.mark_down(address)
    shared.metrics.upstream_failures.labels("connect-timeout" if timed_out else "connect").inc()
    log.warn("upstream {address} failed: {detail}", address=f"{address[0]}:{address[1]}", detail=detail)
    if _may_retry(exchange, "connect-timeout" if timed_out else "connect-error", reused=False):
        exchange.redispatch()
        return
    fail_upstream(exchange, 504 if timed_out else 502, detail)


def declines_response(exchange: Attempted, head: h1.Head) -> bool:
    """
    A final response head arrived on a route with a retry policy or custom error pages: True if it is
    retried on another endpoint (its status is one the policy retries) or replaced by an error page.
    """
    route = exchange.route
    assert route is not None
    policies = route.policies
    if policies is None or exchange.error_code:
        return False
    if policies.retry is not None and head.status in policies.retry.statuses and _retry_after(exchange, f"http_{head.status}"):
        return True
    return policies.error_pages is not None and _error_page_taken(exchange, head.status, upstream_sent=True)


def no_endpoint(exchange: Attempted) -> None:
    """No endpoint to send the request to: 503, or 502 when the endpoints tried so far failed."""
    if exchange.tried is None:
        exchange.answer(503)
    else:
        fail_upstream(exchange, 502, "no other endpoint to retry on")


def timed_out(exchange: Attempted) -> None:
    """The upstream (or a request body the upstream held back) made no progress in time: retried, or 504."""
    exchange.shared.metrics.upstream_failures.labels("timeout").inc()
    if exchange.timer.kind == "upstream" and exchange.request_complete and _retry_after(exchange, "timeout"):
        return
    fail_upstream(exchange, 504, "upstream timed out")


def deadline_passed(exchange: Attempted, kind: str) -> None:
    """A route's deadline: 504 if no response began (else the response is cut); a backend attempt may be retried."""
    if exchange.state == CLOSED or exchange.state == TUNNEL:
        return
    exchange.client.resume_reading("auth")  # a guard still deciding: its verdict will find the request answered
    exchange.shared.metrics.upstream_failures.labels("timeout").inc()
    if kind == BACKEND and exchange.request_complete and _retry_after(exchange, "timeout"):
        return
    fail_upstream(exchange, 504, f"the route's {kind} timeout passed")


def fail_upstream(exchange: Attempted, status: int, detail: str) -> None:
    """An upstream problem: answer it if nothing was sent yet (or ask the error backend), else cut the client off."""
    if _error_page_taken(exchange, status, upstream_sent=False):
        return
    exchange.drop_upstream()
    log.info("upstream error {status} for {route}: {detail}", status=status, route=exchange.route_name(), detail=detail)
    if exchange.responded:
        exchange.done(exchange.status)
        exchange.client.cut_off()
        return
    exchange.answer(status, close=not exchange.request_complete)


def _may_retry(exchange: Attempted, cause: str, reused: bool) -> bool:
    """Whether this failure passes the request to another endpoint (L{ingress.proxy.request.retry})."""
    request, route = exchange.request, exchange.route
    if request is None or route is None or exchange.error_code:
        return False
    policy = route.policies.retry if route.policies is not None else None
    elapsed = time.monotonic() - exchange.started_at
    return may_retry(policy, cause, request, exchange.attempts, len(route.upstream.targets), reused, elapsed)


def _retry_after(exchange: Attempted, cause: str) -> bool:
    """An attempt that failed after the request was sent (a timeout, a status): on to the next endpoint, if allowed."""
    if exchange.responded or not _may_retry(exchange, cause, reused=False):
        return False
    exchange.drop_upstream()
    route = exchange.route
    policy = route.policies.retry if route is not None and route.policies is not None else None
    if policy is not None and policy.same_endpoint and route is not None and len(route.upstream.targets) < 2:
        exchange.tried = None  # a Gateway API retry with no other endpoint: the same one again
    if policy is not None and policy.backoff:
        exchange.shared.reactor.callLater(policy.backoff, _retry_now, exchange, exchange.attempts)
    else:
        exchange.redispatch()
    return True


def _retry_now(exchange: Attempted, attempts: int) -> None:
    """A Gateway API retry's backoff is over: the attempt, unless the request ended or moved on meanwhile."""
    if attempts == exchange.attempts and exchange.state in (BODY, AWAIT) and not exchange.responded:
        if exchange.upstream is None and exchange.connecting is None:
            exchange.redispatch()


def _error_page_taken(exchange: Attempted, status: int, upstream_sent: bool) -> bool:
    """
    custom-http-errors: a response of C{status} is replaced by the error backend's answer (or,
    without one, by this proxy's page for an upstream's response; True), else left alone (False).
    A request whose body has not all been sent upstream gets this proxy's page, and the connection closes.
    """
    route, request = exchange.route, exchange.request
    policies = route.policies if route is not None else None
    pages = policies.error_pages if policies is not None and not policies.backend_http2 else None  # gRPC keeps its statuses
    if pages is None or request is None or exchange.error_code or exchange.responded or not pages.replaces(status, upstream_sent):
        return False
    if pages.backend is None or not exchange.request_complete:
        if not upstream_sent:
            return False  # this proxy's own page is what the caller answers anyway
        exchange.drop_upstream()
        exchange.answer(status, close=not exchange.request_complete)
        return True
    exchange.drop_upstream()
    exchange.error_code = status
    exchange.head_bytes = error_request_head(pages, status, request, exchange.forwarded.ip)
    exchange.pending, exchange.pending_size, exchange.tried = [], 0, None
    exchange.dispatch()
    return True
