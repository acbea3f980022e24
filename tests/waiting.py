"""
Waiting on events in tests: poll a condition until it holds or a deadline passes.

Tests of processes wait on what they are about (a log line, a metric, a /readyz field, a
port that accepts), never on a sleep that hopes the event came first. L{eventually} is that
wait for plain (thread) tests and L{eventually_d} for tests on the reactor (pytest-twisted),
which must never block the reactor's thread. Both fail with what was awaited and the last
value or exception seen, so a failure explains itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar

from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

T = TypeVar("T")

TIMEOUT = 10.0
"""The default deadline, in seconds: long for a local event, short enough for a failure to come soon."""

INTERVAL = 0.05
"""The default pause between two polls, in seconds."""


class WaitTimeout(AssertionError):
    """The condition did not hold before the deadline: an assertion failure, with what was awaited and the last outcome."""


class _Poll:
    """One wait's bookkeeping: the condition, its last outcome, and the message a timeout reports."""

    def __init__(
        self, condition: Callable[[], Any], what: str, timeout: float, fatal: tuple[type[BaseException], ...], context: Optional[Callable[[], str]]
    ) -> None:
        self.condition, self.what, self.timeout, self.fatal, self.context = condition, what, timeout, fatal, context
        self.tries = 0
        self.last: str = "no try yet"

    def once(self) -> tuple[bool, Any]:
        """Call the condition: (True, value) when it holds; an exception counts as "not yet" unless it is C{fatal}."""
        self.tries += 1
        try:
            value = self.condition()
        except self.fatal:
            raise
        except Exception as error:  # noqa: BLE001 - "not yet" (a process restarting, a port not open): reported on timeout
            self.last = f"{type(error).__name__}: {error}"
            return False, None
        if value:
            return True, value
        self.last = repr(value)
        return False, None

    def failure(self) -> WaitTimeout:
        message = f"timed out after {self.timeout:g}s ({self.tries} tries) waiting for {self.what}; last: {self.last}"
        if self.context is not None:
            message += "\n" + self.context()
        return WaitTimeout(message)


def eventually(
    condition: Callable[[], Optional[T]],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    fatal: tuple[type[BaseException], ...] = (),
    context: Optional[Callable[[], str]] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """
    Call C{condition()} every C{interval} seconds until it returns something truthy, and return that.

    An exception from the condition counts as "not yet" (so a condition may C{assert}), except
    the C{fatal} ones, which end the wait at once (a process that exited will not come back).
    The last try is at or after the deadline, so a slow poll still gets its last look. On
    timeout a L{WaitTimeout} (an AssertionError) names C{what} and the last value or exception
    seen, followed by what C{context()} says then (a log's tail, say). C{clock} and C{sleep} are
    parameters for the tests of this module.
    """
    poll = _Poll(condition, what, timeout, fatal, context)
    deadline = clock() + timeout
    while True:
        held, value = poll.once()
        if held:
            return value  # type: ignore[no-any-return]
        if clock() >= deadline:
            raise poll.failure()
        sleep(interval)


def at_least(items: Callable[[], Sequence[T]], count: int, what: str, *, timeout: float = TIMEOUT, interval: float = INTERVAL) -> list[T]:
    """
    What C{items()} returns (log lines, copies a backend recorded), once it has at least C{count}
    entries; zero entries do for a C{count} of 0. On timeout L{WaitTimeout} says how many there were.
    """
    found: list[T] = []

    def enough() -> bool:
        found[:] = items()
        return len(found) >= count

    eventually(enough, f"{count} {what}", timeout=timeout, interval=interval, context=lambda: f"had {len(found)}, the last: {found[-3:]!r}")
    return found


def eventually_d(
    reactor: IReactorTime,
    condition: Callable[[], Any],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    fatal: tuple[type[BaseException], ...] = (),
    context: Optional[Callable[[], str]] = None,
) -> Deferred[Any]:
    """
    L{eventually} for a test on the reactor: a Deferred that fires with the condition's first
    truthy value, or fails with L{WaitTimeout}. Between polls the reactor runs
    (C{task.deferLater}), never C{time.sleep}: the events waited for happen on it.
    """
    poll = _Poll(condition, what, timeout, fatal, context)

    @defer.inlineCallbacks
    def run() -> Any:
        deadline = reactor.seconds() + timeout
        while True:
            held, value = poll.once()
            if held:
                return value
            if reactor.seconds() >= deadline:
                raise poll.failure()
            yield task.deferLater(reactor, interval, lambda: None)

    result: Deferred[Any] = run()
    return result
