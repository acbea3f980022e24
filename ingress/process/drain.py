# -*- test-case-name: tests.proxy.test_drain -*-
"""
Graceful shutdown on SIGTERM (and SIGINT): drain, then stop with exit status 0.

The order is the one a load balancer in front of a DaemonSet needs:

 1. at once, /readyz answers 503 (C{"draining": true}) and the listeners
    still accept, so traffic arriving before the balancer notices is served;
 2. after C{shutdown_delay}, the listeners stop listening, idle keep-alive
    connections are closed, and busy ones answer their current request with
    C{Connection: close} and close after it; TCP streams go on, UDP ports close
    with their sessions (nothing there to finish);
 3. when nothing is open any more, or C{drain_timeout} after step 2 (the
    rest is then aborted and counted in the log; meanwhile the log says what
    is open, every L{REPORT_SECONDS}), C{reactor.stop()}: the
    services stop as usual (the controllers release their Lease) and twistd
    exits 0.

Why the handlers are ours: the reactor's SIGTERM handler stops at once and
twistd then re-raises the signal, so the process would end with -15 and no
drain.  twistd starts the application before C{reactor.run()}, which
installs the reactor's handlers; ours are installed after that
(C{callWhenRunning}) and replace them.  A second signal during the drain
ends it at once (still exit 0).

With C{handover_wait} (C{--handover} and C{--handover-wait}), step 1 lasts
that long (or C{shutdown_delay}, the longer of the two) and a successor may
take the listening sockets meanwhile (L{ingress.process.handover}): a pod
deleted before its successor exists holds the node's queues instead of
closing them.  A successor that comes makes it a hand-over (L{hand_over});
none, and step 2 follows as above.  A second signal during the wait ends it:
step 2 at once (a third ends the drain).

After a hand-over that no signal preceded (in Kubernetes a surge pod took the
sockets over), C{after_handover="wait"} (C{--after-handover wait}) keeps the
drained process alive, holding nothing: its exit would make the kubelet
restart its container (restartPolicy Always), and the restarted container
would take the sockets back.  /healthz answers 200, /readyz 503
(C{"handed_over": true}), and a SIGTERM (the DaemonSet controller deletes the
old pod once the new one is available) ends it at once, or at the end of the
drain if it is still draining.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Protocol

from twisted.application.service import IService, Service
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from ingress.proxy.http2.connection import H2ServerProtocol

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

_POLL_SECONDS = 0.05
REPORT_SECONDS = 5.0  # between the drain's lines saying what it still waits for
ACCEPT_QUEUE_SECONDS = 0.25  # between refusing new connections and closing: the reactor accepts what is queued


class Drainable(Protocol):
    """Something that holds client connections or streams open: an HTTP listener, the stream listeners."""

    def drain(self) -> None:
        """Take no new work; close what is idle; let the rest finish."""

    def open_count(self) -> int:
        """Connections (or sessions) still open."""

    def open_kinds(self) -> Mapping[str, int]:
        """
        What is open, for the log: a count for each kind, the kind a phrase with "{s}" (or "{es}")
        where its plural takes one ("HTTP/1.1 connection{s} on http", "worker process{es}").
        """

    def abort_all(self) -> int:
        """Cut everything still open; returns how many."""


class HTTPConnections:
    """The L{Drainable} view of one HTTP listener's client connections (an L{HTTPProxyFactory})."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def drain(self) -> None:
        self.factory.draining = True
        for connection in list(self.factory.connections):
            connection.drain()

    def open_count(self) -> int:
        return len(self.factory.connections)

    def open_kinds(self) -> Mapping[str, int]:
        listener = self.factory.listener
        return Counter(
            f"{'HTTP/2' if isinstance(connection, H2ServerProtocol) else 'HTTP/1.1'} connection{{s}} on {listener}"
            for connection in self.factory.connections
        )

    def abort_all(self) -> int:
        connections = list(self.factory.connections)
        for connection in connections:
            connection.transport.abortConnection()
        return len(connections)


class PassthroughConnections:
    """The L{Drainable} view of the TLS passthrough relays: they finish on their own, or are cut at the timeout."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def drain(self) -> None:
        pass  # raw TLS: nothing to tell the client; the relay ends when either side closes

    def open_count(self) -> int:
        return len(self.factory.relays)

    def open_kinds(self) -> Mapping[str, int]:
        return {"TLS passthrough connection{s}": len(self.factory.relays)}

    def abort_all(self) -> int:
        return int(self.factory.abort_all())


class GracefulShutdown(Service):
    """
    Takes SIGTERM/SIGINT and runs the drain.  C{listeners} are the services
    whose ports stop listening after the shutdown delay; C{drainables} hold
    what stays open after that.
    """

    def __init__(
        self,
        reactor: Any,
        listeners: Sequence[IService],
        drainables: Sequence[Drainable],
        shutdown_delay: float = 5.0,
        drain_timeout: float = 30.0,
        stop: Optional[Callable[[], None]] = None,
        handover_wait: float = 0.0,
        interrupt: bool = True,
        after_handover: str = "exit",
    ) -> None:
        self.reactor = reactor
        self.listeners = list(listeners)
        self.drainables = list(drainables)
        self.shutdown_delay = shutdown_delay
        self.drain_timeout = drain_timeout
        self._stop = stop if stop is not None else reactor.stop
        self.handover_wait = handover_wait
        self.interrupt = interrupt  # SIGINT drains too; a worker ignores it (a terminal's Ctrl-C reaches the whole process group)
        self.draining = False
        self.waiting = False  # from a SIGTERM to a successor's taking the sockets, or the end of handover_wait
        self.finished = False
        self.shared = False  # the listening sockets are shared with a successor: the drain leaves them as they are
        self.after_handover = after_handover  # "exit" once drained after a hand-over, or "wait" for a signal
        self.handed = False  # a successor took the sockets
        self.exit_after_drain = False  # a signal came (before or after the hand-over): exit once drained, even with "wait"
        self.holding = False  # handed over and drained, waiting for a signal (after_handover "wait")
        self._delay: Optional[IDelayedCall] = None
        self._timeout: Optional[IDelayedCall] = None
        self._poll: Optional[LoopingCall] = None
        self._waited_since = self._reported = 0.0  # when the listeners closed, when the log last said what is open

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """
        An admin readiness check: not ready from the first moment of a drain, the wait for a successor included
        (C{"handover_wait": true} says it still serves meanwhile).  Not ready while waiting: a 200 from a process
        going away could pass for its successor's readiness on a shared admin address, a balancer in front of the
        node should hear early that this process stops, and in Kubernetes a terminating pod is out of the
        endpoints whatever it answers; the successor's own /readyz turns 200 once it serves.
        """
        details: dict[str, object] = {"draining": self.draining}
        if self.waiting:
            details["handover_wait"] = True
        if self.handed:
            details["handed_over"] = True
        return not self.draining, details

    def offers_sockets(self) -> bool:
        """Whether a successor may take the listening sockets now: while serving, and during the wait after a SIGTERM."""
        return not self.draining or self.waiting

    def startService(self) -> None:
        super().startService()
        self.reactor.callWhenRunning(self._take_signals)

    def _take_signals(self) -> None:
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._on_signal if self.interrupt or number != signal.SIGINT else signal.SIG_IGN)

    def _on_signal(self, number: int, frame: Any) -> None:
        self.reactor.callFromThread(self.begin, signal.Signals(number).name)

    def begin(self, reason: str = "SIGTERM") -> None:
        """Start the drain (a second call ends it now)."""
        if self.holding:
            log.info("{reason} after the hand-over: exiting", reason=reason)
            self.holding = False
            self._stop()
            return
        if self.handed and self.after_handover == "wait" and not self.exit_after_drain and not self.finished:
            self.exit_after_drain = True
            log.info("{reason} during the drain after the hand-over: exiting once it is over", reason=reason)
            return
        if self.finished:
            return
        if self.waiting:
            self._end_wait(f"{reason} during the wait for a successor: draining now")
            return
        if self.draining:
            log.warn("{reason} during the drain: stopping now", reason=reason)
            self._end("interrupted")
            return
        self.draining = True
        if self.handover_wait > 0:
            self._wait_for_successor(reason)
            return
        log.info(
            "{reason}: draining; not ready now, listeners close in {delay}s, open requests then get {timeout}s",
            reason=reason,
            delay=self.shutdown_delay,
            timeout=self.drain_timeout,
        )
        self._delay = self.reactor.callLater(self.shutdown_delay, self._close_listeners)

    def _wait_for_successor(self, reason: str) -> None:
        self.waiting = True
        wait = max(self.handover_wait, self.shutdown_delay)
        log.info(
            "{reason}: not ready now; serving on for up to {wait:g}s while a successor may take the listening sockets, then draining"
            " (open requests then get {timeout:g}s)",
            reason=reason, wait=wait, timeout=self.drain_timeout,
        )
        self._delay = self.reactor.callLater(wait, self._end_wait, "no successor took the listening sockets in time: draining")

    def _end_wait(self, why: str) -> None:
        """The wait is over (its time, or a second signal): the listeners close now (their queues are no successor's)."""
        if self._delay is not None and self._delay.active():
            self._delay.cancel()
        self.waiting = False
        log.info("{why}", why=why)
        self._close_listeners()

    def hand_over(self) -> None:
        """
        A successor serves our listening sockets (L{ingress.process.handover}): stop accepting now and drain
        what is open. The sockets are shared with it, so nothing here may touch them beyond closing our own
        descriptors: no filter dropping connection attempts (it is the socket's, the successor's too) and no
        last accept of what is queued (those connections are the successor's to take).
        """
        if self.finished or self._timeout is not None:
            return
        if self._delay is not None and self._delay.active():
            self._delay.cancel()
        self.exit_after_drain = self.exit_after_drain or self.waiting  # a SIGTERM came first: this pod is going away
        self.draining = self.shared = self.handed = True
        self.waiting = False
        log.info("handed over: no new connections here; open requests get {timeout}s", timeout=self.drain_timeout)
        self._stop_listeners()

    def _close_listeners(self) -> None:
        """
        First the listeners take no new connection (their sockets drop SYNs) while the reactor
        accepts what the kernel has already queued; a moment later they close, with empty queues:
        closing a listener resets the connections still queued on it.
        """
        self._delay = None
        refusing = [service for service in self.listeners if service.running and not self.shared and _refuse_new_connections(service)]
        if refusing:
            self._delay = self.reactor.callLater(ACCEPT_QUEUE_SECONDS, self._stop_listeners)
        else:
            self._stop_listeners()

    def _stop_listeners(self) -> None:
        self._delay = None
        for service in self.listeners:
            if service.running:
                _stop_for_good(service, accept_queued=not self.shared)
        for drainable in self.drainables:
            drainable.drain()
        log.info("listeners closed; {waiting}", waiting=self._waiting_for())
        self._waited_since = self._reported = self.reactor.seconds()
        self._timeout = self.reactor.callLater(self.drain_timeout, self._end, "timeout")
        self._poll = LoopingCall(self._check)
        self._poll.clock = self.reactor
        self._poll.start(_POLL_SECONDS, now=True)

    def _open_count(self) -> int:
        return sum(d.open_count() for d in self.drainables)

    def _waiting_for(self) -> str:
        """C{waiting for 1 HTTP/1.1 connection on http, 2 TCP streams on :9700}, or C{nothing open}."""
        kinds: Counter[str] = Counter()
        for drainable in self.drainables:
            kinds.update(drainable.open_kinds())
        counted = [_counted(count, kind) for kind, count in sorted(kinds.items()) if count]
        return "waiting for " + ", ".join(counted) if counted else "nothing open"

    def _check(self) -> None:
        if self._open_count() == 0:
            self._end("drained")
            return
        now = self.reactor.seconds()
        if now - self._reported >= REPORT_SECONDS:
            self._reported = now
            log.info(
                "drain: {waited:.0f}s of {timeout:g}s, {waiting}", waited=now - self._waited_since, timeout=self.drain_timeout, waiting=self._waiting_for()
            )

    def _end(self, why: str) -> None:
        if self.finished:
            return
        self._cancel_timers()
        aborted = sum(d.abort_all() for d in self.drainables) if why != "drained" else 0
        self.holding = self.handed and self.after_handover == "wait" and not self.exit_after_drain
        then = "holding nothing, /readyz 503, exiting on SIGTERM (--after-handover wait)" if self.holding else "stopping"
        if aborted:
            log.warn("drain over ({why}): aborted {count} connections still open; {then}", why=why, count=aborted, then=then)
        else:
            log.info("drain over ({why}): no connections left open; {then}", why=why, then=then)
        if not self.holding:
            self._stop()

    def stopService(self) -> Any:
        """Stopped some other way (twistd, tests): nothing more to drain."""
        self._cancel_timers()
        return super().stopService()

    def _cancel_timers(self) -> None:
        self.finished = True
        for call in (self._delay, self._timeout):
            if call is not None and call.active():
                call.cancel()
        if self._poll is not None and self._poll.running:
            self._poll.stop()


def _counted(count: int, kind: str) -> str:
    """C{1 TCP stream on :9700}, C{2 TCP streams on :9700}: C{kind} with its "{s}" and "{es}" filled for C{count}."""
    plural = count != 1
    return f"{count} " + kind.format(s="s" if plural else "", es="es" if plural else "")


def _refuse_new_connections(service: IService) -> bool:
    """Whether C{service} (a L{ingress.process.sockets.DrainableListener}) now drops new connection attempts."""
    refuse = getattr(service, "refuse_new_connections", None)
    return bool(refuse()) if refuse is not None else False


def _stop_for_good(service: IService, accept_queued: bool = True) -> None:
    """
    Stop a listener and take it out of its parent, so that the parent's own stop at shutdown does
    not stop it a second time: a second C{stopService} of Twisted's C{StreamServerEndpointService}
    cancels the first one's pending C{stopListening}, and that C{CancelledError} was logged as an
    unhandled error at level critical on every stop of a worker.
    """
    accept = getattr(service, "accept_queued", None) if accept_queued else None
    if accept is not None:
        accept()
    stopped = service.disownServiceParent() if service.parent is not None else service.stopService()
    if stopped is not None:
        stopped.addErrback(lambda failure: log.failure("stopping a listener failed", failure))
