"""The tests' shared wait (L{tests.waiting}): it returns the condition's value, and its timeouts are real and say why."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest
from twisted.internet.task import Clock

from tests.waiting import WaitTimeout, at_least, eventually, eventually_d


class FakeTime:
    """A clock that only the fake sleep moves: the waits run without waiting."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _outcomes(*values: Any) -> Callable[[], Any]:
    """A condition that returns (or raises) C{values} in turn, the last one for ever after."""
    it: Iterator[Any] = iter(values)
    last: list[Any] = [None]

    def condition() -> Any:
        last[0] = next(it, last[0])
        if isinstance(last[0], BaseException):
            raise last[0]
        return last[0]

    return condition


def test_it_returns_the_first_truthy_value_and_polls_at_the_interval() -> None:
    time = FakeTime()
    value = eventually(_outcomes(None, 0, "", {"ready": True}), "ready", timeout=5, interval=0.25, clock=time.clock, sleep=time.sleep)
    assert value == {"ready": True}
    assert time.sleeps == [0.25, 0.25, 0.25]


def test_a_condition_that_holds_at_once_does_not_sleep() -> None:
    time = FakeTime()
    assert eventually(lambda: 7, "seven", clock=time.clock, sleep=time.sleep) == 7
    assert time.sleeps == []


def test_exceptions_count_as_not_yet() -> None:
    time = FakeTime()
    assert eventually(_outcomes(ConnectionRefusedError("refused"), AssertionError("not yet"), "up"), "up", clock=time.clock, sleep=time.sleep) == "up"


def test_a_timeout_says_what_was_awaited_and_the_last_value_seen() -> None:
    time = FakeTime()
    with pytest.raises(WaitTimeout) as raised:
        eventually(lambda: 503 == 200, "the route to answer 200", timeout=2, interval=0.5, clock=time.clock, sleep=time.sleep)
    message = str(raised.value)
    assert "waiting for the route to answer 200" in message and "last: False" in message and "after 2s (5 tries)" in message
    assert time.now == pytest.approx(102.0)  # it gave up at the deadline, after a last try there
    assert isinstance(raised.value, AssertionError)  # pytest reports it as a failed assertion


def test_a_timeout_reports_the_last_exception() -> None:
    time = FakeTime()
    with pytest.raises(WaitTimeout, match=r"last: ConnectionRefusedError: \[Errno 111\] refused"):
        eventually(_outcomes(ConnectionRefusedError(111, "refused")), "the port", timeout=1, clock=time.clock, sleep=time.sleep)


def test_a_timeout_appends_the_context() -> None:
    time = FakeTime()
    with pytest.raises(WaitTimeout, match="waiting for a log line; last: None\nthe log's tail"):
        eventually(lambda: None, "a log line", timeout=1, context=lambda: "the log's tail", clock=time.clock, sleep=time.sleep)


def test_a_fatal_exception_ends_the_wait_at_once() -> None:
    time = FakeTime()

    class Exited(Exception):
        pass

    with pytest.raises(Exited):
        eventually(_outcomes(None, Exited("status 1")), "ready", fatal=(Exited,), clock=time.clock, sleep=time.sleep)
    assert time.sleeps == [0.05]


def test_a_real_timeout_with_the_real_clock() -> None:
    """No fakes: a condition that never holds fails after its (tiny) deadline."""
    with pytest.raises(WaitTimeout, match="waiting for never; last: False"):
        eventually(lambda: False, "never", timeout=0.05, interval=0.01)


def test_at_least_returns_the_items_once_there_are_enough() -> None:
    assert at_least(_outcomes([], ["a"], ["a", "b"], ["a", "b", "c"]), 2, "lines", interval=0.001) == ["a", "b"]
    assert at_least(lambda: [], 0, "lines") == []  # none will do for none


def test_at_least_says_how_many_there_were() -> None:
    with pytest.raises(WaitTimeout, match=r"waiting for 3 copies; last: False\nhad 1, the last: \['x'\]"):
        at_least(lambda: ["x"], 3, "copies", timeout=0.05, interval=0.01)


class Outcome:
    """What a Deferred fired with, recorded once (a callback consumes the result)."""

    def __init__(self, d: Any) -> None:
        self.value: Optional[Any] = None
        self.error: Optional[BaseException] = None
        self.fired = False
        d.addCallbacks(self._value, self._error)

    def _value(self, value: Any) -> None:
        self.fired, self.value = True, value

    def _error(self, failure: Any) -> None:
        self.fired, self.error = True, failure.value


def test_the_deferred_wait_polls_on_the_reactor_clock() -> None:
    clock = Clock()
    values = _outcomes(None, None, "done")
    outcome = Outcome(eventually_d(clock, values, "done", timeout=5, interval=0.5))
    assert not outcome.fired  # waiting on the clock, not blocking
    clock.advance(0.5)
    assert not outcome.fired
    clock.advance(0.5)
    assert outcome.fired and outcome.value == "done" and outcome.error is None


def test_the_deferred_wait_times_out_with_the_message() -> None:
    clock = Clock()
    outcome = Outcome(eventually_d(clock, lambda: [], "an empty list to fill", timeout=1, interval=0.5))
    clock.pump([0.5, 0.5])
    assert outcome.fired and isinstance(outcome.error, WaitTimeout)
    assert "waiting for an empty list to fill; last: []" in str(outcome.error)
