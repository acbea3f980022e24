# -*- test-case-name: tests.proxy.test_fastwrite -*-
"""
The reactor's loop step, with work of ours before each poll and a cheaper dispatch after it.

The send batch (L{ingress.proxy.http.fastwrite}) must run after every write
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
connections (the only selectables with traffic) are dispatched directly;
listening ports, the waker and datagram ports keep Twisted's wrapper, so an
accept or datagram error is labelled as before.  What changes: an unexpected
exception in a connection's handler is logged with the system C{-} rather
than the connection's prefix (the traceback is the same).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Optional

from twisted.internet import tcp
from twisted.logger import Logger
from twisted.python import log as legacy_log

log = Logger()

_DIRECT = frozenset({tcp.Server, tcp.Client})  # connections: _doReadOrWrite catches and logs for them


_before_poll: weakref.WeakKeyDictionary[Any, list[Callable[[], None]]] = weakref.WeakKeyDictionary()


def run_before_each_poll(reactor: Any, before_poll: Callable[[], None]) -> None:
    """Call C{before_poll} before each of C{reactor}'s polls (the step is installed on its first call)."""
    calls = _before_poll.get(reactor)
    if calls is not None:
        calls.append(before_poll)
        return
    calls = _before_poll[reactor] = [before_poll]
    poller = getattr(reactor, "_poller", None)
    if poller is not None and hasattr(poller, "poll") and hasattr(reactor, "_selectables") and hasattr(reactor, "_doReadOrWrite"):
        reactor.doIteration = _epoll_step(reactor, calls)
        return
    iterate = reactor.doIteration

    def step(delay: Optional[float]) -> None:
        for call in calls:
            call()
        iterate(delay)

    reactor.doIteration = step


def _epoll_step(reactor: Any, calls: list[Callable[[], None]]) -> Callable[[Optional[float]], None]:
    """C{EPollReactor.doPoll}, after C{calls}, with connections' events dispatched directly."""
    poller = reactor._poller
    selectables: dict[int, Any] = reactor._selectables
    handle = reactor._doReadOrWrite
    direct = _DIRECT

    def step(timeout: Optional[float]) -> None:
        for call in calls:
            call()
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
