# -*- test-case-name: tests.proxy.test_tcp_streams -*-
"""
An idle timeout for streams that does not cost a timer operation per packet.

Resetting a C{DelayedCall} on every read would move it in the reactor's heap
each time; instead the stream stores the time of its last activity (one
attribute write per read) and the one timer, when it fires, either closes
the stream or sleeps for the rest of the timeout.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from twisted.internet.interfaces import IDelayedCall


class IdleTimer:
    """Calls C{on_idle} once C{last_active()} is C{timeout} seconds old (reactor time)."""

    def __init__(self, reactor: Any, timeout: float, last_active: Callable[[], float], on_idle: Callable[[], None]) -> None:
        self.reactor = reactor
        self.timeout = timeout
        self.last_active = last_active
        self.on_idle = on_idle
        self._call: Optional[IDelayedCall] = reactor.callLater(timeout, self._check)

    def _check(self) -> None:
        left = self.last_active() + self.timeout - self.reactor.seconds()
        if left > 0:
            self._call = self.reactor.callLater(left, self._check)
            return
        self._call = None
        self.on_idle()

    def cancel(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
