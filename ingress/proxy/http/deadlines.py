# -*- test-case-name: tests.proxy.test_gateway -*-
"""
A route's deadlines for one request (Gateway API timeouts, L{Deadlines}): the whole request,
and each attempt at a backend.  When one passes before the backend's response has begun the
client gets 504 (apis/v1/httproute_types.go HTTPRouteTimeouts: "MUST return a timeout
error"; the conformance tests HTTPRouteTimeoutRequest and HTTPRouteTimeoutBackendRequest
expect 504), and its connection serves on; a response under way is cut, as for any upstream
failure after the head.  A backend attempt that passes its deadline is retried only where
the route's retry policy allows it (Gateway routes: never).

They are totals, unlike the connection's L{Deadline} (one wait at a time, pushed out by
progress), so they have a timer of their own, made only for a request whose route has
deadlines: a request without them does no work for them.  An HTTP/1.1 connection keeps its
timer across requests and re-arms it (moving it later is an attribute store, as with
L{Deadline}); a request that ended before its deadline leaves it to fire once, for nothing
(the owner checks which request it was for).  An HTTP/2 stream's ends already cancel its
progress timer, and cancel these with it.  (Not by a subclass of L{Deadline}: that class is compiled in
the optional mypyc build, and an interpreted class cannot inherit from a compiled one.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from twisted.internet.interfaces import IDelayedCall

from ingress.routing.policies.limits import Deadlines

if TYPE_CHECKING:
    from ingress.proxy.http.factory import HTTPProxyFactory

REQUEST = "request"
BACKEND = "backendRequest"
_NEVER = math.inf


class RequestDeadlines:
    """
    The earlier of a request's deadline and its current backend attempt's, as one DelayedCall;
    C{on_expiry(kind, request_id)} when it passes (kind: L{REQUEST} or L{BACKEND}).
    """

    __slots__ = ("_reactor", "_on_expiry", "_call", "_at", "_kind", "_request_at", "_backend", "request_id")

    def __init__(self, reactor: Any, on_expiry: Callable[[str, int], None]) -> None:
        self._reactor = reactor
        self._on_expiry = on_expiry
        self._call: Optional[IDelayedCall] = None
        self._at = _NEVER
        self._kind = REQUEST
        self._request_at = _NEVER
        self._backend: Optional[float] = None
        self.request_id = 0

    def start(self, request_id: int, deadlines: Deadlines) -> None:
        """Request C{request_id} was routed to a route with C{deadlines}: they run from now (its first attempt starts now too)."""
        self.request_id = request_id
        self._request_at = self._reactor.seconds() + deadlines.request if deadlines.request is not None else _NEVER
        self._backend = deadlines.backend
        self.attempt()

    def attempt(self) -> None:
        """An attempt at a backend begins (the first, or a retry): its own deadline, never past the request's."""
        at = self._request_at
        kind = REQUEST
        if self._backend is not None:
            attempt_at = self._reactor.seconds() + self._backend
            if attempt_at < at:
                at, kind = attempt_at, BACKEND
        self._arm(at, kind)

    def cancel(self) -> None:
        self._at = _NEVER
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def _arm(self, at: float, kind: str) -> None:
        self._at, self._kind = at, kind
        if at == _NEVER:
            return  # a call still pending finds nothing due
        call = self._call
        delay = max(0.0, at - self._reactor.seconds())
        if call is None:
            self._call = self._reactor.callLater(delay, self._fired)
        elif at < call.getTime():
            call.reset(delay)

    def _fired(self) -> None:
        self._call = None
        if self._at == _NEVER:
            return
        remaining = self._at - self._reactor.seconds()
        if remaining > 0:
            self._call = self._reactor.callLater(remaining, self._fired)
            return
        self._at = _NEVER
        self._on_expiry(self._kind, self.request_id)


class DeadlineSteps:
    """
    The deadline half of a request's upstream exchange (a mixin of L{UpstreamRelay}, like
    L{ingress.proxy.http.steps.PolicySteps}): the state it shares is annotated, the methods
    of the other halves it calls are stubs.
    """

    factory: HTTPProxyFactory
    _request_id: int
    _request_complete: bool
    _read_timeout: float
    _send_timeout: float
    _deadlines: Optional[RequestDeadlines] = None  # made by the first request with deadlines

    def _dispatch(self) -> None: ...

    def _retry_after(self, cause: str) -> bool:
        raise NotImplementedError

    def _fail_upstream(self, status: int, detail: str) -> None: ...

    def _resume_reading(self, reason: str) -> None: ...

    def _deadline_applies(self) -> bool:
        raise NotImplementedError

    def _start_deadlines(self, deadlines: Deadlines) -> None:
        """
        This request's route has deadlines: they run from now.  The waits for the backend are
        raised to the longest deadline where they are shorter, so that C{--upstream-timeout}
        does not end a request sooner than the route allows (and are never lowered: the
        deadlines end the request themselves).
        """
        longest = deadlines.longest
        self._read_timeout = max(self._read_timeout, longest)
        self._send_timeout = max(self._send_timeout, longest)
        timer = self._deadlines
        if timer is None:
            timer = self._deadlines = RequestDeadlines(self.factory.reactor, self._deadline_passed)
        timer.start(self._request_id, deadlines)

    def _redispatch(self) -> None:
        """Another attempt at a backend (a retry): a backend deadline starts again."""
        timer = self._deadlines
        if timer is not None and timer.request_id == self._request_id:
            timer.attempt()
        self._dispatch()

    def _deadline_passed(self, kind: str, request_id: int) -> None:
        """504 if no response began (else the response is cut); a backend attempt may be retried if the route allows it."""
        if request_id != self._request_id or not self._deadline_applies():
            return  # that request ended before its deadline
        self._resume_reading("auth")  # a guard still deciding: its verdict will find the request answered
        self.factory.metrics.upstream_failures.labels("timeout").inc()
        if kind == BACKEND and self._request_complete and self._retry_after("timeout"):
            return
        self._fail_upstream(504, f"the route's {kind} timeout passed")
