"""
The drain's wait for a successor (C{--handover-wait}), on a MemoryReactorClock: what a SIGTERM starts, what
ends the wait (its time, a successor, a second signal), and what /readyz says meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.application.service import Service
from twisted.internet.testing import MemoryReactorClock

from ingress.process.drain import GracefulShutdown


class _Open:
    """A drainable with one connection open until the drain is told to close it."""

    def __init__(self) -> None:
        self.drained = False
        self.open = 1

    def drain(self) -> None:
        self.drained = True
        self.open = 0

    def open_count(self) -> int:
        return self.open

    def open_kinds(self) -> Mapping[str, int]:
        return {"connection{s}": self.open}

    def abort_all(self) -> int:
        return 0


def _shutdown(wait: float, delay: float = 5.0) -> tuple[MemoryReactorClock, GracefulShutdown, Service, _Open, list[bool]]:
    reactor = MemoryReactorClock()  # type: ignore[no-untyped-call]  # Twisted's testing reactor is not annotated
    listener, open_ = Service(), _Open()
    listener.startService()
    stopped: list[bool] = []
    shutdown = GracefulShutdown(reactor, [listener], [open_], delay, 30.0, stop=lambda: stopped.append(True), handover_wait=wait)
    return reactor, shutdown, listener, open_, stopped


def test_a_sigterm_serves_on_through_the_wait_then_drains() -> None:
    reactor, shutdown, listener, open_, stopped = _shutdown(wait=30.0)
    shutdown.begin()
    assert shutdown.readiness() == (False, {"draining": True, "handover_wait": True})
    assert shutdown.offers_sockets()
    reactor.advance(29.9)
    assert listener.running and not open_.drained
    reactor.advance(0.2)
    assert not listener.running and open_.drained and not shutdown.offers_sockets()
    assert shutdown.readiness() == (False, {"draining": True})
    reactor.advance(0.1)
    assert stopped == [True]


def test_the_wait_lasts_at_least_the_shutdown_delay() -> None:
    reactor, shutdown, listener, _, _ = _shutdown(wait=1.0, delay=5.0)
    shutdown.begin()
    reactor.advance(4.9)
    assert listener.running and shutdown.waiting
    reactor.advance(0.2)
    assert not listener.running


def test_a_successor_during_the_wait_makes_it_a_hand_over() -> None:
    reactor, shutdown, listener, open_, stopped = _shutdown(wait=600.0)
    shutdown.begin()
    reactor.advance(10)
    shutdown.hand_over()
    assert not shutdown.waiting and shutdown.shared and not listener.running and open_.drained
    reactor.advance(0.1)
    assert stopped == [True]
    assert not reactor.getDelayedCalls() or all(not call.active() for call in reactor.getDelayedCalls())


def test_a_second_signal_ends_the_wait_and_a_third_the_drain() -> None:
    reactor, shutdown, listener, open_, stopped = _shutdown(wait=600.0)
    open_.drain = lambda: None  # type: ignore[method-assign]  # a connection that stays open through the drain
    shutdown.begin()
    reactor.advance(1)
    shutdown.begin("SIGINT")
    assert not shutdown.waiting and not listener.running and stopped == []
    shutdown.begin("SIGINT")
    assert stopped == [True]


def test_no_wait_is_the_drain_as_before() -> None:
    reactor, shutdown, listener, _, _ = _shutdown(wait=0.0)
    shutdown.begin()
    assert not shutdown.waiting and not shutdown.offers_sockets()
    assert shutdown.readiness() == (False, {"draining": True})
    reactor.advance(5.1)
    assert not listener.running
