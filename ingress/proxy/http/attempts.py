# -*- test-case-name: tests.unit.test_exchange_attempts -*-
"""
One request's attempts at its endpoints, and what a failed or unwelcome answer becomes.

An L{Attempts} owns what the attempts leave behind (how many, the endpoint of the latest,
the status an error backend is asked to answer for, when the request began) and gives a
decision for each failure: L{RETRY} (another endpoint, now), L{RETRY_LATER} (after the
route's backoff), L{ERROR_PAGE} (the route's error backend, custom-http-errors), L{CUT} (a
response began: the client sees it cut), or the status to answer.  Whether a failure may go
to another endpoint is L{ingress.proxy.http.retry}'s rule.  Its failure methods then act on
that decision through what its exchange (L{ingress.proxy.http.exchange.Exchange}) offers as
L{Attempting}: its methods, and what it says of its request; the attempts write none of it.
Compiled with the exchange (setup.py): its attempt count and endpoint are read on every request.
"""

from __future__ import annotations

import time
from typing import Final, Optional, Protocol

from twisted.internet.interfaces import IConnector
from twisted.logger import Logger

from ingress.proxy.http import h1
from ingress.proxy.http.client import ClientSide
from ingress.proxy.http.deadlines import BACKEND
from ingress.proxy.http.retry import may_retry
from ingress.proxy.http.shared import Shared
from ingress.proxy.http.states import AWAIT, BODY, CLOSED, TUNNEL
from ingress.proxy.http.upstream import Address, UpstreamConnection
from ingress.proxy.idle import Deadline
from ingress.routing.table import Route

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

RETRY: Final = -1  # another attempt, now
RETRY_LATER: Final = -2  # another attempt, after the route's retry backoff
ERROR_PAGE: Final = -3  # the error backend's answer for Attempts.error_code
CUT: Final = -4  # a response began and cannot be finished
TAKEN: Final = 0  # (a response head) taken as it is


class Attempting(Protocol):
    """What an exchange offers its attempts to act on a decision: what it says of its request, and what it does."""

    @property
    def shared(self) -> Shared: ...
    @property
    def client(self) -> ClientSide: ...
    @property
    def timer(self) -> Deadline: ...
    @property
    def state(self) -> int: ...
    @property
    def request(self) -> Optional[h1.Head]: ...
    @property
    def route(self) -> Optional[Route]: ...
    @property
    def responded(self) -> bool: ...
    @property
    def request_complete(self) -> bool: ...
    @property
    def upstream(self) -> Optional[UpstreamConnection]: ...
    @property
    def connecting(self) -> Optional[IConnector]: ...

    def route_name(self) -> str: ...

    def redispatch(self) -> None: ...

    def drop_upstream(self) -> None: ...

    def ask_error_backend(self) -> None: ...

    def answer(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None: ...

    def cut(self) -> None: ...


class Attempts:
    """The attempts of one request; decisions for its failures (a negative constant above, or a status)."""

    __slots__ = ("count", "tried", "error_code", "started_at")

    def __init__(self) -> None:
        self.count = 0
        self.tried: Optional[Address] = None  # the endpoint of the latest attempt
        self.error_code = 0  # the status an error backend is asked to answer for (custom-http-errors), else 0
        self.started_at = time.monotonic()

    def begin(self, address: Address) -> None:
        """An attempt at C{address} begins."""
        self.count += 1
        self.tried = address

    def failed(self, cause: str, status: int, request: Optional[h1.Head], route: Optional[Route], reused: bool, responded: bool, complete: bool) -> int:
        """
        An attempt failed before the upstream sent a response (C{cause}: "error", "invalid_header",
        "connect-error" or "connect-timeout"): another endpoint where allowed (a reused connection
        closed under us: the same one may be tried again), else what L{failing} says of C{status}.
        """
        if not responded and self._may_retry(cause, request, route, reused):
            if reused:
                self.tried = None
            return RETRY
        return self.failing(status, request, route, responded, complete)

    def sent_and_failed(self, cause: str, request: Optional[h1.Head], route: Optional[Route], responded: bool) -> bool:
        """An attempt failed after the request was sent (a timeout, a retried status): True if another one is allowed."""
        if responded or not self._may_retry(cause, request, route, reused=False):
            return False
        policy = route.policies.retry if route is not None and route.policies is not None else None
        if policy is not None and policy.same_endpoint and route is not None and len(route.upstream.targets) < 2:
            self.tried = None  # a Gateway API retry with no other endpoint: the same one again
        return True

    def retry_after(self, cause: str, request: Optional[h1.Head], route: Optional[Route], responded: bool) -> int:
        """L{sent_and_failed} as a decision: L{RETRY} or L{RETRY_LATER} (the route's backoff), or L{TAKEN} for none."""
        if not self.sent_and_failed(cause, request, route, responded):
            return TAKEN
        policy = route.policies.retry if route is not None and route.policies is not None else None
        return RETRY_LATER if policy is not None and policy.backoff else RETRY

    def failing(self, status: int, request: Optional[h1.Head], route: Optional[Route], responded: bool, complete: bool) -> int:
        """An upstream problem: the error backend's answer, a cut response once one began, else C{status}."""
        if self.error_page(status, request, route, responded, complete, upstream_sent=False) == ERROR_PAGE:
            return ERROR_PAGE
        return CUT if responded else status

    def declines(self, status: int, request: Optional[h1.Head], route: Optional[Route], responded: bool, complete: bool) -> int:
        """
        A final response head of C{status}, on a route with a retry policy or custom error pages: L{TAKEN},
        a retry (its status is one the policy retries), or replaced (L{ERROR_PAGE}, or this proxy's page: its status).
        """
        policies = route.policies if route is not None else None
        if policies is None or self.error_code:
            return TAKEN
        if policies.retry is not None and status in policies.retry.statuses:
            decision = self.retry_after(f"http_{status}", request, route, responded)
            if decision != TAKEN:
                return decision
        if policies.error_pages is None:
            return TAKEN
        return self.error_page(status, request, route, responded, complete, upstream_sent=True)

    def error_page(self, status: int, request: Optional[h1.Head], route: Optional[Route], responded: bool, complete: bool, upstream_sent: bool) -> int:
        """
        custom-http-errors: a response of C{status} is replaced by the error backend's answer (L{ERROR_PAGE}:
        this is the attempt's error code now, and any endpoint may answer it) or, without one, by this proxy's
        page for an upstream's response (C{status}); else left alone (L{TAKEN}).  A request whose body has not
        all been sent upstream gets this proxy's page, and the connection closes.
        """
        policies = route.policies if route is not None else None
        pages = policies.error_pages if policies is not None and not policies.backend_http2 else None  # gRPC keeps its statuses
        if pages is None or request is None or self.error_code or responded or not pages.replaces(status, upstream_sent):
            return TAKEN
        if pages.backend is None or not complete:
            return status if upstream_sent else TAKEN  # without an upstream response, this proxy's page is the answer anyway
        self.error_code = status
        self.tried = None
        return ERROR_PAGE

    def _may_retry(self, cause: str, request: Optional[h1.Head], route: Optional[Route], reused: bool) -> bool:
        """Whether this failure passes the request to another endpoint (L{ingress.proxy.http.retry})."""
        if request is None or route is None or self.error_code:
            return False
        policy = route.policies.retry if route.policies is not None else None
        elapsed = time.monotonic() - self.started_at
        return may_retry(policy, cause, request, self.count, len(route.upstream.targets), reused, elapsed)

    # -- acting on the decisions, for an exchange (the paths off the keep-alive one) ----------

    def connect_failed(self, exchange: Attempting, address: Address, detail: str, timed_out: bool) -> None:
        """No connection to C{address}: the next endpoint where allowed, else 502 (504 for a timeout)."""
        shared = exchange.shared
        shared.pool.mark_down(address)
        shared.metrics.upstream_failures.labels("connect-timeout" if timed_out else "connect").inc()
        log.warn("upstream {address} failed: {detail}", address=f"{address[0]}:{address[1]}", detail=detail)
        cause, status = ("connect-timeout", 504) if timed_out else ("connect-error", 502)
        self.settle(exchange, self.failed(cause, status, exchange.request, exchange.route, False, exchange.responded, exchange.request_complete), status, detail)

    def upstream_failed(self, exchange: Attempting, status: int, detail: str, responded: bool, reused: bool) -> None:
        """The upstream connection failed (C{responded}: it sent something that was not a response; C{reused}: it was pooled)."""
        if not exchange.responded and not responded:
            exchange.shared.metrics.upstream_failures.labels("reset").inc()
        cause = "invalid_header" if responded else "error"
        self.settle(exchange, self.failed(cause, status, exchange.request, exchange.route, reused, exchange.responded, exchange.request_complete), status, detail)

    def declined(self, exchange: Attempting, status: int) -> bool:
        """A final response head of C{status} on a route with a retry policy or error pages: True if it was retried or replaced."""
        decision = self.declines(status, exchange.request, exchange.route, exchange.responded, exchange.request_complete)
        if decision == TAKEN:
            return False
        if decision > 0:  # this proxy's page for the upstream's response (no error backend)
            exchange.drop_upstream()
            exchange.answer(decision, close=not exchange.request_complete)
        else:
            self.settle(exchange, decision, status, "")
        return True

    def timed_out(self, exchange: Attempting) -> None:
        """The upstream (or a request body the upstream held back) made no progress in time: retried, or 504."""
        exchange.shared.metrics.upstream_failures.labels("timeout").inc()
        if exchange.timer.kind == "upstream" and exchange.request_complete and self._retry_after(exchange):
            return
        self.fail(exchange, 504, "upstream timed out")

    def deadline_passed(self, exchange: Attempting, kind: str) -> None:
        """A route's deadline: 504 if no response began (else the response is cut); a backend attempt may be retried."""
        if exchange.state == CLOSED or exchange.state == TUNNEL:
            return
        exchange.client.resume_reading("auth")  # a guard still deciding: its verdict will find the request answered
        exchange.shared.metrics.upstream_failures.labels("timeout").inc()
        if kind == BACKEND and exchange.request_complete and self._retry_after(exchange):
            return
        self.fail(exchange, 504, f"the route's {kind} timeout passed")

    def fail(self, exchange: Attempting, status: int, detail: str) -> None:
        """An upstream problem: answered if nothing was sent yet (or by the error backend), else the client is cut off."""
        self.settle(exchange, self.failing(status, exchange.request, exchange.route, exchange.responded, exchange.request_complete), status, detail)

    def settle(self, exchange: Attempting, decision: int, status: int, detail: str) -> None:
        """Act on a decision for a failure of C{status}: retry, ask the error backend, answer, or cut."""
        exchange.drop_upstream()
        if decision == RETRY:
            exchange.redispatch()
        elif decision == RETRY_LATER:
            route = exchange.route
            policy = route.policies.retry if route is not None and route.policies is not None else None
            assert policy is not None
            exchange.shared.reactor.callLater(policy.backoff, self._retry_now, exchange, self.count)
        elif decision == ERROR_PAGE:
            exchange.ask_error_backend()
        else:
            log.info("upstream error {status} for {route}: {detail}", status=status, route=exchange.route_name(), detail=detail)
            if decision == CUT:
                exchange.cut()
            else:
                exchange.answer(decision, close=not exchange.request_complete)

    def _retry_after(self, exchange: Attempting) -> bool:
        """An attempt timed out after the request was sent: on to the next endpoint, if allowed."""
        decision = self.retry_after("timeout", exchange.request, exchange.route, exchange.responded)
        if decision == TAKEN:
            return False
        self.settle(exchange, decision, 504, "timeout")
        return True

    def _retry_now(self, exchange: Attempting, count: int) -> None:
        """A Gateway API retry's backoff is over: the attempt, unless the request ended or moved on meanwhile."""
        if count == self.count and (exchange.state == BODY or exchange.state == AWAIT) and not exchange.responded:
            if exchange.upstream is None and exchange.connecting is None:
                exchange.redispatch()
