"""The builder builds a change after a quiet spell at once, coalesces bursts of changes and keeps the last good table when a build fails."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from ingress.model import ClusterState
from ingress.observe.metrics import Metrics
from ingress.process.builder import TableBuilder
from ingress.routing.report import EMPTY_REPORT, Built
from ingress.routing.table import RoutingTable
from ingress.runtime.live import LiveTable
from tests.waiting import eventually_d


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each build freezes what is alive (ingress.speedups.heap): here that is the test process, thawed after each test."""
    yield
    gc.unfreeze()


def _sleep(seconds: float) -> Deferred[Any]:
    return deferLater(reactor, seconds, lambda: None)


def _recording(builds: list[int], cost: float = 0.0) -> Callable[[ClusterState, int], Built]:
    """A build function that takes C{cost} seconds of the build thread and notes each generation it builds."""

    def build(state: ClusterState, generation: int) -> Built:
        if cost:
            time.sleep(cost)  # not a wait: the build's own cost on the build thread, the pace under test
        builds.append(generation)
        return Built(RoutingTable(generation=generation), EMPTY_REPORT)

    return build


def _until(predicate: Any, what: str) -> Deferred[Any]:
    """Poll the reactor until C{predicate()} holds (10 s: a loaded machine is slow, not wrong)."""
    return eventually_d(reactor, predicate, what, interval=0.01)


@pytest_twisted.inlineCallbacks
def test_a_burst_of_100_changes_in_50_ms_makes_one_or_two_builds() -> Any:
    builds: list[int] = []
    build = _recording(builds)

    live = LiveTable()
    builder = TableBuilder(reactor, live, Metrics(), build, debounce=0.05, min_window=0.05)  # a window of 50 ms, whatever the builds cost
    builder.start()
    try:
        started = reactor.seconds()
        for i in range(100):  # 100 changes spread over 50 ms, as informer events would arrive
            reactor.callLater(i * 0.0005, builder.submit, ClusterState)
        yield _sleep(0.06)  # not a wait: the burst's 50 ms (and a little) pass
        burst = reactor.seconds() - started
        yield _until(lambda: live.ready, "a table live")
        yield _sleep(0.3)  # not a wait: time for any further (coalesced) build to show up, which must not be many
    finally:
        builder.stop()
    # One build per debounce window at most: a burst inside 50 ms is one or two builds; a loaded
    # machine may stretch the burst itself, and then it may span one more window.
    windows = 1 + int(burst / 0.05)
    print(f"{len(builds)} builds for 100 changes over {burst * 1000:.1f} ms")
    assert 1 <= len(builds) <= max(2, windows + 1), (builds, burst)
    assert live.ready and live.table.generation == builds[-1]


@pytest_twisted.inlineCallbacks
def test_a_failing_build_keeps_the_last_good_table() -> Any:
    def build(state: ClusterState, generation: int) -> Built:
        if generation == 2:
            raise ValueError("broken snapshot")
        return Built(RoutingTable(generation=generation), EMPTY_REPORT)

    live = LiveTable()
    metrics = Metrics()

    def build_errors() -> float:
        return metrics.registry.get_sample_value("twingress_source_errors_total", {"source": "build"}) or 0.0

    builder = TableBuilder(reactor, live, metrics, build, debounce=0.01)
    builder.start()
    try:
        builder.submit(ClusterState)
        yield _until(lambda: live.table.generation == 1, "generation 1 live")
        builder.submit(ClusterState)
        yield _until(lambda: build_errors() == 1, "the failed build counted")
        assert live.table.generation == 1  # generation 2 failed: 1 stays live
        builder.submit(ClusterState)
        yield _until(lambda: live.table.generation == 3, "generation 3 live")
    finally:
        builder.stop()


@pytest_twisted.inlineCallbacks
def test_a_change_after_a_quiet_spell_is_built_at_once_and_the_next_waits() -> Any:
    """The debounce's leading edge: with a 30 s window, the first change is live within the 10 s wait, the next one is held."""
    builds: list[int] = []
    build = _recording(builds)

    live = LiveTable()
    builder = TableBuilder(reactor, live, Metrics(), build, debounce=30.0, min_window=30.0)
    builder.start()
    try:
        builder.submit(ClusterState)
        yield _until(lambda: live.ready, "the first table live")
        builder.submit(ClusterState)
        yield _sleep(0.5)  # not a wait: half a second in which the next change must not be built
        assert builds == [1] and live.table.generation == 1  # held for the debounce: bursts are still coalesced
    finally:
        builder.stop()


@pytest_twisted.inlineCallbacks
def test_the_window_after_a_cheap_build_is_short() -> Any:
    """
    The window is twice the last build's time (at least min_window): after a build of no cost the
    next change is built at once, not after the 30 s the debounce allows for costly builds.
    """
    builds: list[int] = []
    build = _recording(builds)

    live = LiveTable()
    builder = TableBuilder(reactor, live, Metrics(), build, debounce=30.0, min_window=0.001)
    builder.start()
    try:
        builder.submit(ClusterState)
        yield _until(lambda: live.ready, "the first table live")
        builder.submit(ClusterState)
        yield _until(lambda: live.table.generation == 2, "the second change built")  # within _until's 10 s, far inside the 30 s debounce
        assert builds == [1, 2]
    finally:
        builder.stop()


@pytest_twisted.inlineCallbacks
def test_changes_streaming_in_during_builds_wait_the_window() -> Any:
    """
    Builds of 20 ms with a change every millisecond for a second: each next build waits twice the
    last one's time, doubled for each build in a row that found changes waiting (up to the
    debounce), so there are far fewer builds than back to back (50); the last change is built, and
    once the stream ends the window is short again.
    """
    builds: list[int] = []
    build = _recording(builds, cost=0.02)

    live = LiveTable()
    builder = TableBuilder(reactor, live, Metrics(), build, debounce=1.0, min_window=0.001)
    builder.start()
    try:
        changes = [reactor.callLater(i * 0.001, builder.submit, ClusterState) for i in range(1000)]
        yield _until(lambda: not any(change.active() for change in changes), "the 1,000 changes submitted")
        yield _until(lambda: builder.generation == live.table.generation and builder._next is None and not builder._running, "the last change built")
    finally:
        builder.stop()
    print(f"{len(builds)} builds of 20 ms for 1,000 changes over a second")
    assert 3 <= len(builds) <= 25, builds  # a slower machine makes fewer (its builds cost more), never more
    assert live.table.generation == builds[-1]
    assert builder._streak == 0 and builder._window < 1.0  # the last build found nothing waiting: the window is back to twice its time


def test_a_burst_is_built_four_times_a_second_and_a_long_stream_once_a_second() -> None:
    """
    The window while changes stream in: a burst (1,000 Secrets renewed in two seconds, each to be
    served within 2 s) stays within a quarter second; a stream that has gone on for five seconds (a
    cluster being filled) grows to one second; a build that found nothing waiting ends the stream.
    """
    builder = TableBuilder(reactor, LiveTable(), Metrics(), _recording([]), debounce=0.05, min_window=0.01)
    builder._cost = 0.1  # a build and its swap: 100 ms
    assert builder.next_window(0, 0.0) == 0.05  # quiet: twice the build's time, within the debounce
    assert builder.next_window(1, 0.5) == 0.25  # 0.2 s doubled, within the burst window
    assert builder.next_window(4, 4.9) == 0.25
    assert builder.next_window(4, 5.0) == 1.0  # 3.2 s, within the stream window
    assert builder.next_window(0, 60.0) == 0.05
