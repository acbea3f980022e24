# -*- test-case-name: tests.proxy.test_retry -*-
"""
What happens when the upstream exchange of a request fails: another endpoint
(L{ingress.proxy.http.retry} decides whether), an error answer while nothing
was sent to the client, a cut connection once something was.

A mixin of L{ingress.proxy.http.relay.UpstreamRelay}, kept apart from the
request path that every request runs: the state it shares is annotated, and
the other halves' methods it calls are declared for the type checker only.
It comes first among the relay's bases, because L{DeadlineSteps} and
L{PolicySteps} declare stubs of methods that are real here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from twisted.internet.interfaces import IConnector
from twisted.logger import Logger

from ingress.proxy.http import h1
from ingress.proxy.http.retry import may_retry
from ingress.proxy.http.states import AWAIT, BODY, CLOSED
from ingress.proxy.http.upstream import Address, UpstreamConnection

if TYPE_CHECKING:
    from ingress.proxy.http.factory import HTTPProxyFactory
    from ingress.proxy.transport import IConnectionTransport
    from ingress.routing.table import Route

log = Logger()


class FailureSteps:
    """Retry, error answer or cut-off for the request whose upstream exchange failed."""

    factory: HTTPProxyFactory
    transport: IConnectionTransport
    _upstream: Optional[UpstreamConnection]
    _connecting: Optional[IConnector]
    _state: int
    _status: int
    _attempts: int
    _started_at: float
    _client_full: bool
    _responded: bool
    _request_complete: bool
    _request: Optional[h1.Head]
    _route: Optional[Route]
    _tried: Optional[Address]
    _error_code: int
    _request_id: int

    if TYPE_CHECKING:  # real in the other halves, which come later in the method resolution order

        def _redispatch(self) -> None: ...

        def _error_page_taken(self, status: int, upstream_sent: bool) -> bool: ...

        def _answer_locally(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None: ...

        def _route_name(self) -> str: ...

        def _request_done(self, status: int) -> None: ...

    def upstream_failed(self, status: int, detail: str, responded: bool) -> None:
        upstream, self._upstream = self._upstream, None
        reused = upstream is not None and upstream.reused
        if self._state == CLOSED:
            return
        if upstream is not None and self._client_full:
            upstream.transport.resumeProducing()
        if not self._responded:
            if not responded:
                self.factory.metrics.upstream_failures.labels("reset").inc()
            if self._may_retry("invalid_header" if responded else "error", reused):
                self._tried = None if reused else self._tried
                self._redispatch()
                return
        self._fail_upstream(status, detail)

    def _may_retry(self, cause: str, reused: bool) -> bool:
        """Whether this failure passes the request to another endpoint (L{ingress.proxy.http.retry})."""
        request, route = self._request, self._route
        if request is None or route is None or self._error_code:
            return False
        policy = route.policies.retry if route.policies is not None else None
        elapsed = time.monotonic() - self._started_at
        return may_retry(policy, cause, request, self._attempts, len(route.upstream.targets), reused, elapsed)

    def _retry_after(self, cause: str) -> bool:
        """An attempt that failed after the request was sent (a timeout, a status): on to the next endpoint, if allowed."""
        if self._responded or not self._may_retry(cause, reused=False):
            return False
        self._drop_upstream()
        route = self._route
        policy = route.policies.retry if route is not None and route.policies is not None else None
        if policy is not None and policy.same_endpoint and route is not None and len(route.upstream.targets) < 2:
            self._tried = None  # a Gateway API retry with no other endpoint: the same one again
        if policy is not None and policy.backoff:
            self.factory.reactor.callLater(policy.backoff, self._retry_now, self._request_id, self._attempts)
        else:
            self._redispatch()
        return True

    def _retry_now(self, request_id: int, attempts: int) -> None:
        """A Gateway API retry's backoff is over: the attempt, unless the request ended or moved on meanwhile."""
        if request_id == self._request_id and attempts == self._attempts and self._state in (BODY, AWAIT) and not self._responded:
            if self._upstream is None and self._connecting is None:
                self._redispatch()

    def _drop_upstream(self) -> None:
        """Abort the upstream connection (or the attempt to open one) of the current request."""
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            upstream.owner = None
            upstream.transport.abortConnection()
        if self._connecting is not None:
            self._connecting.disconnect()
            self._connecting = None

    def _fail_upstream(self, status: int, detail: str) -> None:
        """An upstream problem: answer it if nothing was sent yet (or ask the error backend), else cut the client off."""
        if self._error_page_taken(status, upstream_sent=False):
            return
        self._drop_upstream()
        log.info("upstream error {status} for {route}: {detail}", status=status, route=self._route_name(), detail=detail)
        if self._responded:
            self._request_done(self._status)
            self._cut_off()
            return
        self._answer_locally(status, close=not self._request_complete)

    def _cut_off(self) -> None:
        """A response was started and cannot be finished: the client must see it cut (HTTP/2: its stream reset)."""
        self._state = CLOSED
        self.transport.abortConnection()
