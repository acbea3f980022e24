# -*- test-case-name: tests.proxy.test_malformed -*-
"""
A client connection's steps off the keep-alive path: a timer's expiry, waiting
for a guard's verdict, refusing a request.

A mixin of L{ingress.proxy.http.server.HTTPProxyProtocol}, in a module of its
own so that the server module stays the request path that the compiled build
compiles (setup.py; this one stays interpreted: a compiled mixin could not
sit beside the protocol's interpreted bases).  It comes first among the
protocol's bases, because L{UpstreamRelay} declares a stub of C{_refuse}; the
state it shares is annotated, and the other halves' methods it calls are
declared for the type checker only, so none can shadow a real one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.logger import Logger

from ingress.proxy.http import h1
from ingress.proxy.http.extauth import Verdict
from ingress.proxy.http.forwarding import UNKNOWN_PEER, ForwardedFor
from ingress.proxy.http.responses import error_response
from ingress.proxy.http.settings import ProxySettings
from ingress.proxy.http.states import AUTH, AWAIT, CLOSED
from ingress.proxy.idle import Deadline
from ingress.proxy.transport import IConnectionTransport
from ingress.routing.policies import Policies

if TYPE_CHECKING:
    from ingress.proxy.http.factory import HTTPProxyFactory

log = Logger()


class ConnectionSteps:
    """Timer expiry, guard wait and refusal for L{HTTPProxyProtocol}."""

    factory: HTTPProxyFactory
    transport: IConnectionTransport
    settings: ProxySettings
    _state: int
    _buffer: bytes
    _timer: Deadline
    _read_pauses: set[str]
    _request_id: int
    _request_complete: bool
    _responded: bool
    _driving: bool
    _connect_timeout: float
    _read_timeout: float
    _peer: ForwardedFor
    _forwarded: ForwardedFor

    if TYPE_CHECKING:  # real in the protocol and the relay's halves, which the type checker cannot see from here

        def _close(self) -> None: ...

        def _drive(self) -> None: ...

        def _forward(self, head: h1.Head) -> None: ...

        def _learn_peer(self) -> None: ...

        def _write_local(self, response: bytes) -> None: ...

        def _request_done(self, status: int) -> None: ...

        def _answer_locally(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None: ...

        def _route_name(self) -> str: ...

        def _pause_reading(self, reason: str) -> None: ...

        def _resume_reading(self, reason: str) -> None: ...

        def _take_verdict(self, verdict: Verdict) -> None: ...

        def _retry_after(self, cause: str) -> bool: ...

        def _fail_upstream(self, status: int, detail: str) -> None: ...

    def _timed_out(self, kind: str) -> None:
        if kind == "idle":
            self._close()
        elif kind == "header":
            self._refuse(408, "request head not received in time")
        elif kind == "body" and not self._read_pauses:
            # The client stalled, not the upstream: 408, and the upstream connection
            # (holding half a request) is aborted with ours, never pooled.  While we
            # were not reading (the upstream pushed back), the upstream is to blame.
            self._refuse(408, "request body not received in time")
        else:
            self.factory.metrics.upstream_failures.labels("timeout").inc()
            if kind == "upstream" and self._request_complete and self._retry_after("timeout"):
                return
            self._fail_upstream(504, "upstream timed out")

    def _guard(self, policies: Policies, head: h1.Head) -> None:
        """
        Rate limits, basic or external auth: the request waits (reading paused) for its verdict.  A
        verdict known at once (a remembered password, a limit counted in this process) pauses nothing:
        a pause and a resume are two changes of the reactor's interest in the socket per request.
        """
        self._state = AUTH
        request_id = self._request_id
        timeout = self._connect_timeout + self._read_timeout
        checking = self.factory.guards.check(policies, head, self._forwarded.ip, self._forwarded.scheme, timeout)
        if not checking.called:
            self._pause_reading("auth")
        checking.addCallback(self._guarded, head, request_id)

    def _guarded(self, verdict: Verdict, head: h1.Head, request_id: int) -> None:
        if request_id != self._request_id or self._state == CLOSED:
            if verdict.hold is not None:
                self.factory.guards.leave(verdict.hold)
            return
        self._resume_reading("auth")
        if verdict.status:
            self.factory.metrics.denied.labels(verdict.reason, self._route_name()).inc()
            self._state = AWAIT
            self._answer_locally(verdict.status, fields=verdict.fields)
            return
        self._take_verdict(verdict)
        self._forward(head)
        if self._buffer and not self._driving and self._state != CLOSED:
            self._drive()

    def _refuse(self, status: int, detail: str) -> None:
        """A request we will not parse further: answer and close (RFC 9112 requires it)."""
        if self._peer is UNKNOWN_PEER:
            self._learn_peer()
        self.factory.metrics.malformed_requests.labels(str(status)).inc()
        log.info("refused request from {peer}: {status} {detail}", peer=self._forwarded.ip or "?", status=status, detail=detail)
        if self._responded:
            self._state = CLOSED
            self.transport.abortConnection()
            return
        self._write_local(error_response(status, self.settings.server_name, True))
        self._request_done(status)
        self._close()
