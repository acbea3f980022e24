# -*- test-case-name: tests.proxy.test_gateway -*-
"""
A route's deadlines for one request (Gateway API timeouts, L{Deadlines}): the whole request,
and each attempt at a backend.  When one passes before the backend's response has begun the
client gets 504 (apis/v1/httproute_types.go HTTPRouteTimeouts: "MUST return a timeout
error"; the conformance tests HTTPRouteTimeoutRequest and HTTPRouteTimeoutBackendRequest
expect 504), and its connection serves on; a response under way is cut, as for any upstream
failure after the head.  A backend attempt that passes its deadline is retried only where
the route's retry policy allows it (Gateway routes: never).

They are totals, unlike the client side's L{Deadline} (one wait at a time, pushed out by
progress), so they have a timer of their own, a collaborator of the request's
L{ingress.proxy.request.exchange.Exchange} made only for a request whose route has deadlines: a
request without them does no work for them.  The exchange cancels it when it ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Optional

from twisted.internet.interfaces import IDelayedCall

from ingress.routing.policies.limits import Deadlines

REQUEST = "request"
BACKEND = "backendRequest"
_NEVER = math.inf


class RequestDeadlines:
    """
    The earlier of a request's deadline and its current backend attempt's, as one DelayedCall;
    C{on_expiry(kind)} when it passes (kind: L{REQUEST} or L{BACKEND}).
    """

    __slots__ = ("_reactor", "_on_expiry", "_call", "_at", "_kind", "_request_at", "_backend")

    def __init__(self, reactor: Any, on_expiry: Callable[[str], None]) -> None:
        self._reactor = reactor
        self._on_expiry = on_expiry
        self._call: Optional[IDelayedCall] = None
        self._at = _NEVER
        self._kind = REQUEST
        self._request_at = _NEVER
        self._backend: Optional[float] = None

    @staticmethod
    def started(reactor: Any, on_expiry: Callable[[str], None], deadlines: Deadlines) -> RequestDeadlines:
        """A request's deadlines, running from now."""
        running = RequestDeadlines(reactor, on_expiry)
        running.start(deadlines)
        return running

    def start(self, deadlines: Deadlines) -> None:
        """The request was routed to a route with C{deadlines}: they run from now (its first attempt starts now too)."""
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
        self._on_expiry(self._kind)
