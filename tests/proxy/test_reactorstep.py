"""
L{ingress.speedups.reactorstep}: the running reactor's loop step calls what was registered before
each poll, dispatches connections' events without Twisted's log-context wrapper, and keeps
Twisted's handling of a handler that raises: that connection is closed and logged, the others
and the listening port go on serving.

On real TCP connections of the running (epoll) reactor.  With the speed-ups off
(TWINGRESS_SPEEDUPS=0) a call for the next poll is Twisted's C{callLater(0)}, not this step's: the
two tests of that step's order skip, saying so (tests/unit/test_speedups.py checks the switch).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.pollreactor import PollReactor
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.logger import globalLogPublisher

from ingress.speedups import ENABLED
from ingress.speedups.reactorstep import run_before_each_poll, run_before_next_poll

# The step's own order of calls for the next poll, which the speed-ups' switch replaces with callLater(0).
the_step_takes_next_poll_calls = pytest.mark.skipif(not ENABLED, reason="TWINGRESS_SPEEDUPS=0: a call for the next poll is callLater(0), not the step's")


class Echo(Protocol):
    """Echoes; a line "boom" makes its handler raise."""

    def dataReceived(self, data: bytes) -> None:
        if data.startswith(b"boom"):
            raise RuntimeError("a handler's bug")
        self.transport.write(data)


def _recv(client: socket.socket) -> bytes:
    """What the client has been sent so far (b"" once the server closed)."""
    try:
        return client.recv(1 << 16)
    except BlockingIOError:
        return b"(nothing yet)"


@defer.inlineCallbacks
def _answer(client: socket.socket) -> Iterator[defer.Deferred[object]]:
    for _ in range(200):
        yield deferLater(reactor, 0.01, lambda: None)
        got = _recv(client)
        if got != b"(nothing yet)":
            return got  # type: ignore[return-value]
    return b"(no answer)"  # type: ignore[return-value]


@pytest_twisted.inlineCallbacks
def test_registered_calls_run_before_every_poll() -> Iterator[defer.Deferred[object]]:
    polls: list[int] = []
    run_before_each_poll(reactor, lambda: polls.append(1))
    seen = len(polls)
    yield deferLater(reactor, 0.05, lambda: None)
    yield deferLater(reactor, 0.05, lambda: None)
    assert len(polls) >= seen + 2  # each wait above needs a poll at least
    assert "epoll" in type(reactor).__name__.lower()  # the direct dispatch is what runs here


@the_step_takes_next_poll_calls
@pytest_twisted.inlineCallbacks
def test_a_call_for_the_next_poll_runs_once_before_the_every_poll_calls() -> Iterator[defer.Deferred[object]]:
    """
    One-shot calls run before the calls of every poll (an HTTP/2 connection's frames must become
    ciphertext before the send batch is flushed), once each; one that a one-shot call asks for runs
    before the same poll; one that raises is logged and the others still run.
    """
    order: list[str] = []
    failures: list[dict[str, object]] = []

    def observe(event: dict[str, object]) -> None:
        if event.get("log_failure") is not None:
            failures.append(event)

    watching = [True]  # an every-poll call stays registered for the session: it only watches this test

    def every() -> None:
        if watching[0] and order and order[-1] != "every":
            order.append("every")

    run_before_each_poll(reactor, every)

    def first() -> None:
        order.append("first")
        run_before_next_poll(reactor, lambda: order.append("asked by first"))

    def broken() -> None:
        raise RuntimeError("a one-shot call's bug")

    globalLogPublisher.addObserver(observe)
    try:
        run_before_next_poll(reactor, first)
        run_before_next_poll(reactor, broken)
        run_before_next_poll(reactor, lambda: order.append("after the broken one"))
        yield deferLater(reactor, 0.05, lambda: None)
        yield deferLater(reactor, 0.05, lambda: None)
    finally:
        globalLogPublisher.removeObserver(observe)
        watching[0] = False
    assert order == ["first", "after the broken one", "asked by first", "every"]
    assert any("a one-shot call's bug" in str(event["log_failure"]) for event in failures)


@pytest_twisted.inlineCallbacks
def test_a_raising_handler_closes_its_connection_and_is_logged_the_rest_serve() -> Iterator[defer.Deferred[object]]:
    run_before_each_poll(reactor, lambda: None)  # the step is installed (once per reactor)
    port = reactor.listenTCP(0, Factory.forProtocol(Echo), interface="127.0.0.1")  # type: ignore[attr-defined]
    failures: list[dict[str, object]] = []

    def observe(event: dict[str, object]) -> None:
        if event.get("isError") or event.get("log_failure") is not None:
            failures.append(event)

    globalLogPublisher.addObserver(observe)
    try:
        address = ("127.0.0.1", port.getHost().port)
        bad, good = socket.create_connection(address), socket.create_connection(address)
        for each in (bad, good):
            each.setblocking(False)
        bad.sendall(b"boom")
        assert (yield _answer(bad)) == b""  # closed by the reactor, no bytes
        good.sendall(b"still here")
        assert (yield _answer(good)) == b"still here"
        late = socket.create_connection(address)  # the listening port still accepts
        late.setblocking(False)
        late.sendall(b"new")
        assert (yield _answer(late)) == b"new"
        assert any("a handler's bug" in str(event.get("log_failure") or event.get("failure") or "") for event in failures)
        for each in (bad, good, late):
            each.close()
    finally:
        globalLogPublisher.removeObserver(observe)
        yield port.stopListening()


@the_step_takes_next_poll_calls
@pytest.mark.parametrize("kind", ["epoll", "poll"])
def test_the_step_fits_the_reactor_it_is_installed_on(kind: str) -> None:
    """The direct dispatch is epoll's (its poller's poll takes a timeout and a count); any other reactor keeps its own step."""
    made = EPollReactor() if kind == "epoll" else PollReactor()
    ran: list[str] = []
    run_before_each_poll(made, lambda: ran.append("every"))
    run_before_next_poll(made, lambda: ran.append("once"))
    try:
        made.doIteration(0)
        made.doIteration(0)
    finally:
        made.waker.connectionLost(None)  # the reactor never ran: close its waker's pipe and its poller by hand
        if hasattr(made._poller, "close"):
            made._poller.close()
    assert ran == ["once", "every", "every"]
    assert ("_epoll_step" in made.doIteration.__qualname__) == (kind == "epoll")
