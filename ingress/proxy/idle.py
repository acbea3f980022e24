# -*- test-case-name: tests.proxy.test_tcp_streams -*-
"""
Timeouts that do not cost a timer operation per packet or per request.

Resetting a C{DelayedCall} on every read would move it in the reactor's heap
each time; instead the time that matters is stored (one attribute write) and
the one timer, when it fires early, sleeps for the rest.  L{IdleTimer} serves
streams (time since the last activity); L{Deadline} serves HTTP client
connections (one deadline at a time: idle, header or upstream progress), and
L{GroupDeadline} an HTTP/2 connection's streams, whose deadlines share the
connection's one DelayedCall (L{DeadlineGroup}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

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


class Deadline:
    """
    A connection's one deadline, of a named C{kind}; C{on_expiry(kind)} is
    called when it passes.

    Moving the deadline later (every request does) is an attribute store; the
    DelayedCall, when it fires early, re-arms for the rest.  Only an earlier
    deadline moves the DelayedCall itself.
    """

    def __init__(self, reactor: Any, on_expiry: Callable[[str], None]) -> None:
        self.reactor = reactor
        self.on_expiry = on_expiry
        self.kind = ""
        self.at = 0.0  # when it passes (reactor time)
        self._call: Optional[IDelayedCall] = None

    def set(self, seconds: float, kind: str) -> None:
        self.kind = kind
        self.at = at = self.reactor.seconds() + seconds
        call = self._call
        if call is None:
            self._call = self.reactor.callLater(seconds, self._fired)
        elif at < call.getTime():
            call.reset(seconds)

    def push(self, seconds: float) -> None:
        """Progress: the same kind of deadline, C{seconds} from now."""
        self.at = self.reactor.seconds() + seconds

    def cancel(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def retire(self) -> None:
        """
        Its owner is done with it: cancelled, and C{on_expiry} (a method of the owner, which holds
        this deadline: a reference cycle) let go, so that reference counting frees both at once.  A
        late C{set} (an exchange's last bytes) arms nothing that calls back.
        """
        self.cancel()
        self.on_expiry = retired

    def _fired(self) -> None:
        self._call = None
        remaining = self.at - self.reactor.seconds()
        if remaining > 0:
            self._call = self.reactor.callLater(remaining, self._fired)
            return
        self.on_expiry(self.kind)


def retired(kind: str) -> None:
    """The expiry of a deadline whose owner is gone (retired, or never to be set): nothing is left to time out."""


class DeadlineGroup:
    """
    One DelayedCall for the deadlines of many: an HTTP/2 connection's streams.

    A stream per request would otherwise create a DelayedCall (a heap push) and
    cancel it (a heap entry the reactor skips or rebuilds away later) for every
    request.  Here arming a member is a dict store and disarming a dict pop; the
    one DelayedCall, set for the earliest deadline asked of it, checks the armed
    members when it fires, expires those whose time passed and sleeps until the
    earliest one left.
    """

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.armed: dict[GroupDeadline, None] = {}
        self._call: Optional[IDelayedCall] = None
        self._cancelled = False

    def arm(self, member: GroupDeadline, seconds: float, at: float) -> None:
        if self._cancelled:  # a stream's timer set as its closed connection's streams wind up
            return
        self.armed[member] = None
        call = self._call
        if call is None:
            self._call = self.reactor.callLater(seconds, self._fired)
        elif at < call.getTime():
            call.reset(seconds)

    def cancel(self) -> None:
        """The connection is gone: no member expires any more."""
        self._cancelled = True
        self.armed.clear()
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def _fired(self) -> None:
        self._call = None
        now = self.reactor.seconds()
        armed = self.armed
        expired = [member for member in armed if member.at <= now]
        for member in expired:
            del armed[member]
        if armed:
            self._call = self.reactor.callLater(min(member.at for member in armed) - now, self._fired)
        for member in expired:
            if self._cancelled:  # an expiry before this one ended the connection
                return
            member.on_expiry(member.kind)


class GroupDeadline(Deadline):
    """A L{Deadline} (same interface: the exchange sets, pushes and cancels it) kept by a L{DeadlineGroup}."""

    def __init__(self, group: DeadlineGroup, on_expiry: Callable[[str], None]) -> None:
        super().__init__(group.reactor, on_expiry)
        self.group = group

    def set(self, seconds: float, kind: str) -> None:
        self.kind = kind
        self.at = at = self.reactor.seconds() + seconds
        self.group.arm(self, seconds, at)

    def cancel(self) -> None:
        self.group.armed.pop(self, None)
