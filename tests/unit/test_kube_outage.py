"""
What the log says while the apiserver is away (L{ingress.sources.kube.outage.Outage}): one summary
line every 30 s however many informers fail and however often they try, one line when it is over,
and the first informer back reported so that the source wakes the others.  A MemoryReactorClock.
"""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs, formatEvent

from ingress.sources.kube.outage import SUMMARY_SECONDS, Outage

SERVER = "https://10.0.0.1:6443"
REFUSED = "HTTPSConnectionPool(host='10.0.0.1', port=6443): Max retries exceeded (Connection refused)"
NAMES = [f"Kind{n}" for n in range(19)]


def _lines(events: list[dict]) -> list[str]:
    return [formatEvent(event) for event in events]


def test_an_outage_of_19_informers_trying_often_is_one_summary_every_30_seconds() -> None:
    clock = MemoryReactorClock()
    outage = Outage(clock, SERVER)
    with capturedLogs() as events:
        for _ in range(100):  # 19 informers failing every 0.5 s for 50 s (far more often than they do)
            for name in NAMES:
                assert outage.update(name, True, REFUSED, len(NAMES)) is False
            clock.advance(0.5)
    assert _lines(events) == [
        f"19 of 19 informers cannot list/watch from the apiserver at {SERVER} for 30 s: {REFUSED}",
    ]
    with capturedLogs() as events:
        clock.advance(SUMMARY_SECONDS - 20)
    assert _lines(events) == [f"19 of 19 informers cannot list/watch from the apiserver at {SERVER} for 60 s: {REFUSED}"]


def test_the_first_informer_back_is_reported_and_the_last_ends_the_outage() -> None:
    clock = MemoryReactorClock()
    outage = Outage(clock, SERVER)
    for name in NAMES[:3]:
        outage.update(name, True, REFUSED, 5)
    clock.advance(5.4)
    with capturedLogs() as events:
        assert outage.update(NAMES[3], False, "", 5) is False  # never failed: nothing to report
        assert outage.update(NAMES[0], False, REFUSED, 5) is True  # back: the source wakes the others
        assert outage.update(NAMES[0], False, REFUSED, 5) is False  # already back
        assert outage.update(NAMES[1], False, REFUSED, 5) is True
        assert _lines(events) == []
        assert outage.update(NAMES[2], False, REFUSED, 5) is True
    assert _lines(events) == [f"the apiserver at {SERVER} answers every informer again, 5.4 s after the first failed"]
    with capturedLogs() as events:
        clock.advance(10 * SUMMARY_SECONDS)
    assert _lines(events) == []  # no summary after the outage


def test_the_summary_counts_those_still_failing_and_a_new_outage_starts_its_own_clock() -> None:
    clock = MemoryReactorClock()
    outage = Outage(clock, SERVER)
    for name in NAMES[:4]:
        outage.update(name, True, REFUSED, 4)
    clock.advance(10)
    outage.update(NAMES[0], False, "", 4)
    outage.update(NAMES[1], True, "503: unavailable", 4)
    with capturedLogs() as events:
        clock.advance(SUMMARY_SECONDS - 10)
    assert _lines(events) == [f"3 of 4 informers cannot list/watch from the apiserver at {SERVER} for 30 s: 503: unavailable"]
    for name in NAMES[1:4]:
        outage.update(name, False, "", 4)
    clock.advance(100)
    outage.update(NAMES[2], True, REFUSED, 4)
    with capturedLogs() as events:
        clock.advance(SUMMARY_SECONDS)
    assert _lines(events) == [f"1 of 4 informers cannot list/watch from the apiserver at {SERVER} for 30 s: {REFUSED}"]


def test_stop_cancels_the_summary() -> None:
    clock = MemoryReactorClock()
    outage = Outage(clock, SERVER)
    outage.update(NAMES[0], True, REFUSED, 1)
    outage.stop()
    assert clock.getDelayedCalls() == []
