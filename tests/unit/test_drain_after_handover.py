"""
What a twingress does once a successor has taken its sockets (C{--after-handover exit|wait}), on a
MemoryReactorClock: with C{exit} it stops once drained; with C{wait} it stays, holding nothing and not ready,
until a signal (a surge pod took over: its exit would make the kubelet restart the container, which would
take the sockets back); a signal that came first (the pod is being deleted) makes it exit in either mode.
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.application.service import Service
from twisted.internet.testing import MemoryReactorClock

from ingress.process.drain import GracefulShutdown


class _Busy:
    """A drainable with one request in flight: it ends when the test says (C{finish}), not when drained."""

    def __init__(self) -> None:
        self.open = 1
        self.drained = False

    def drain(self) -> None:
        self.drained = True

    def finish(self) -> None:
        self.open = 0

    def open_count(self) -> int:
        return self.open

    def open_kinds(self) -> Mapping[str, int]:
        return {"connection{s}": self.open}

    def abort_all(self) -> int:
        aborted, self.open = self.open, 0
        return aborted


def _shutdown(after: str, wait: float = 30.0) -> tuple[MemoryReactorClock, GracefulShutdown, Service, _Busy, list[bool]]:
    reactor = MemoryReactorClock()  # type: ignore[no-untyped-call]  # Twisted's testing reactor is not annotated
    listener, busy = Service(), _Busy()
    listener.startService()
    stopped: list[bool] = []
    shutdown = GracefulShutdown(reactor, [listener], [busy], 5.0, 30.0, stop=lambda: stopped.append(True), handover_wait=wait, after_handover=after)
    return reactor, shutdown, listener, busy, stopped


def test_exit_stops_once_drained_after_the_hand_over() -> None:
    reactor, shutdown, listener, busy, stopped = _shutdown("exit")
    shutdown.hand_over()
    assert not listener.running and busy.drained
    busy.finish()
    reactor.advance(0.1)
    assert stopped == [True]


def test_wait_holds_nothing_until_a_signal_then_exits_at_once() -> None:
    reactor, shutdown, listener, busy, stopped = _shutdown("wait")
    assert shutdown.readiness() == (True, {"draining": False})
    shutdown.hand_over()
    assert not listener.running and busy.drained
    busy.finish()
    reactor.advance(3600)
    assert stopped == [] and shutdown.holding
    assert shutdown.readiness() == (False, {"draining": True, "handed_over": True})
    assert not shutdown.offers_sockets()  # nothing to hand over any more
    assert all(not call.active() for call in reactor.getDelayedCalls())  # no timer left running meanwhile
    shutdown.begin("SIGTERM")
    assert stopped == [True]


def test_wait_a_signal_during_the_drain_exits_when_the_drain_is_over() -> None:
    reactor, shutdown, _, busy, stopped = _shutdown("wait")
    shutdown.hand_over()
    reactor.advance(1)
    shutdown.begin("SIGTERM")  # the in-flight request is not cut
    reactor.advance(1)
    assert stopped == [] and busy.open == 1
    busy.finish()
    reactor.advance(0.1)
    assert stopped == [True]


def test_wait_a_second_signal_during_the_drain_ends_it_now() -> None:
    reactor, shutdown, _, busy, stopped = _shutdown("wait")
    shutdown.hand_over()
    shutdown.begin("SIGTERM")
    shutdown.begin("SIGTERM")
    assert stopped == [True] and busy.open == 0


def test_wait_the_drain_timeout_after_a_hand_over_still_holds() -> None:
    reactor, shutdown, _, busy, stopped = _shutdown("wait")
    shutdown.hand_over()
    reactor.advance(30.1)  # the request never ends: aborted at the drain's timeout, and the process stays
    assert busy.open == 0 and stopped == [] and shutdown.holding


def test_wait_a_hand_over_during_the_wait_after_a_sigterm_exits_once_drained() -> None:
    """The pod is being deleted (SIGTERM first): the successor took over, and this process goes."""
    reactor, shutdown, _, busy, stopped = _shutdown("wait", wait=600.0)
    shutdown.begin("SIGTERM")
    reactor.advance(10)
    shutdown.hand_over()
    busy.finish()
    reactor.advance(0.1)
    assert stopped == [True] and not shutdown.holding
