"""The informers' retry schedule (L{ingress.sources.kube.backoff.Backoff}): pure, no apiserver."""

from __future__ import annotations

import random

import pytest

from ingress.sources.kube.backoff import BACKOFF_CAP, BACKOFF_JITTER, BACKOFF_START, Backoff


def _delays(backoff: Backoff, count: int) -> list[float]:
    return [round(backoff.next(), 6) for _ in range(count)]


def test_the_delays_double_from_the_first_failure_up_to_the_cap() -> None:
    """Without jitter (a factor of 1): 0.8 s, doubling, never above 30 s, from the very first failure."""
    backoff = Backoff(uniform=lambda low, high: 1.0)
    assert _delays(backoff, 8) == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]


def test_the_first_retry_comes_within_about_a_second() -> None:
    """After a watch that worked (a reset): the next failure's retry is at most 1.2 s away, whatever the jitter."""
    lowest = Backoff(uniform=lambda low, high: low)
    highest = Backoff(uniform=lambda low, high: high)
    assert lowest.next() == pytest.approx(BACKOFF_START * BACKOFF_JITTER[0]) == pytest.approx(0.4)
    assert highest.next() == pytest.approx(BACKOFF_START * BACKOFF_JITTER[1]) == pytest.approx(1.2)


def test_the_jitter_spreads_each_delay_and_the_cap_holds_after_it() -> None:
    highest = Backoff(uniform=lambda low, high: high)
    assert _delays(highest, 7) == [1.2, 2.4, 4.8, 9.6, 19.2, 30.0, 30.0]  # 25.6 * 1.5 and 30 * 1.5 capped
    seeded = Backoff(uniform=random.Random(7).uniform)
    for step, delay in enumerate(_delays(seeded, 12)):
        base = min(BACKOFF_START * 2**step, BACKOFF_CAP)
        assert base * BACKOFF_JITTER[0] <= delay <= min(base * BACKOFF_JITTER[1], BACKOFF_CAP), (step, delay)


def test_reset_starts_the_next_run_of_failures_afresh() -> None:
    backoff = Backoff(uniform=lambda low, high: 1.0)
    _delays(backoff, 6)
    backoff.reset()
    assert _delays(backoff, 2) == [0.8, 1.6]


def test_draws_are_from_the_jitter_range() -> None:
    drawn: list[tuple[float, float]] = []
    backoff = Backoff(uniform=lambda low, high: drawn.append((low, high)) or 1.0)
    backoff.next()
    assert drawn == [BACKOFF_JITTER]
