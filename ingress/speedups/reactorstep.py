# -*- test-case-name: tests.proxy.test_reactorstep -*-
"""
The reactor's loop step, with work of ours before each poll and a cheaper dispatch after it.

The send batch (L{ingress.speedups.fastwrite}) must run after every write
and before Twisted can write or close a socket, which it does only while it
handles a poll's events: so just before each poll.  Twisted has no public
hook there, so the reactor instance's C{doIteration} is replaced.

On the epoll reactor (Linux, what twingress runs on) the replacement also
dispatches the events itself.  Twisted wraps every event in
C{log.callWithLogger}, which copies a log-context dict and pushes it through
the context tracker so that legacy C{log.msg} calls made while a connection
reads are labelled with its C{logPrefix}: four Python frames and two dicts
per event, two events per proxied request, 9% of the keep-alive HTTP path
in py-spy.  twingress logs through C{twisted.logger}, whose events never read
that context, and Twisted's own C{_doReadOrWrite} already catches and logs
whatever a connection's handler raises and disconnects it.  So TCP
connections (where HTTP traffic is) are dispatched directly;
listening ports, the waker and datagram ports keep Twisted's wrapper, so an
accept or datagram error is labelled as before.  What changes: an unexpected
exception in a connection's handler is logged with the system C{-} rather
than the connection's prefix (the traceback is the same).

Measured: the direct dispatch took Twisted's per-event log context, 9% of the
keep-alive HTTP path, off every request (bench/README.md's table of what the
HTTP path is without).  The plain code, with the speed-ups off
(L{ingress.speedups.ENABLED}): Twisted's own C{doIteration}, never replaced;
L{run_before_next_poll} is then C{callLater(0, call)}, and nothing registers
L{run_before_each_poll} (the send batch, its one user, is not made).
"""

from __future__ import annotations

import select
import weakref
from collections.abc import Callable
from typing import Any, Optional

from twisted.internet import tcp
from twisted.logger import Logger
from twisted.python import log as legacy_log

from ingress.speedups import ENABLED

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

_DIRECT = frozenset({tcp.Server, tcp.Client})  # connections: _doReadOrWrite catches and logs for them


class _BeforePoll:
    """
    What runs before each poll of one reactor: the calls asked for once (an HTTP/2 connection's
    frames, which become ciphertext for the send batch) until none is left, then the calls of
    every poll (the send batch's flush), in the order they were registered.
    """

    __slots__ = ("once", "every")

    def __init__(self) -> None:
        self.once: list[Callable[[], None]] = []
        self.every: list[Callable[[], None]] = []

    def __call__(self) -> None:
        while self.once:
            calls, self.once = self.once, []
            for call in calls:
                try:
                    call()
                except Exception:
                    log.failure("a call made before the reactor's poll failed")
        for call in self.every:
            call()


_before_poll: weakref.WeakKeyDictionary[Any, _BeforePoll] = weakref.WeakKeyDictionary()


def run_before_each_poll(reactor: Any, call: Callable[[], None]) -> None:
    """Call C{call} before each of C{reactor}'s polls, for as long as the reactor runs."""
    _installed(reactor).every.append(call)


def run_before_next_poll(reactor: Any, call: Callable[[], None]) -> None:
    """
    Call C{call} once, before C{reactor}'s next poll (after the events and timers under way):
    what C{callLater(0, call)} does, without a delayed call to make, schedule and run
    (and that, with the speed-ups off).
    """
    if not ENABLED:
        reactor.callLater(0, call)
        return
    _installed(reactor).once.append(call)


def _installed(reactor: Any) -> _BeforePoll:
    """C{reactor}'s calls before the poll; its C{doIteration} is replaced the first time."""
    before = _before_poll.get(reactor)
    if before is None:
        before = _before_poll[reactor] = _BeforePoll()
        epoll = getattr(select, "epoll", None)  # Linux only
        if epoll is not None and isinstance(getattr(reactor, "_poller", None), epoll) and hasattr(reactor, "_selectables"):
            reactor.doIteration = _epoll_step(reactor, before)
        else:
            reactor.doIteration = _wrapped_step(reactor.doIteration, before)
    return before


def _wrapped_step(iterate: Callable[[Optional[float]], None], before: _BeforePoll) -> Callable[[Optional[float]], None]:
    """Another reactor's C{doIteration}, after C{before}."""

    def step(delay: Optional[float]) -> None:
        before()
        iterate(delay)

    return step


def _epoll_step(reactor: Any, before: _BeforePoll) -> Callable[[Optional[float]], None]:
    """C{EPollReactor.doPoll}, after C{before}, with connections' events dispatched directly."""
    poller = reactor._poller
    selectables: dict[int, Any] = reactor._selectables
    handle = reactor._doReadOrWrite
    direct = _DIRECT

    def step(timeout: Optional[float]) -> None:
        before()
        try:
            events = poller.poll(-1 if timeout is None else timeout, len(selectables))
        except InterruptedError:
            return  # a signal: the reactor runs its handlers and comes back
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is None:
                continue  # removed by an earlier event of this poll
            if type(selectable) in direct:
                try:
                    handle(selectable, fd, event)
                except Exception:
                    log.failure("dispatching an event of {selectable}", selectable=selectable)
            else:
                legacy_log.callWithLogger(selectable, handle, selectable, fd, event)

    return step
