"""
Tests for load-balance: ewma (L{ingress.proxy.request.ewma}), the scores of ingress-nginx's balancer/ewma.lua:
response times averaged with a 10 s decay toward 0, two endpoints drawn, the lower score wins, a new
endpoint starting at the others' average.
"""

from __future__ import annotations

import math

from ingress.proxy.request.ewma import EwmaScores
from tests.unit.objects import ingress, path, rule, table

A, B, C = ("10.0.0.1", 80), ("10.0.0.2", 80), ("10.0.0.3", 80)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_score_averages_and_decays() -> None:
    clock = Clock()
    scores = EwmaScores(clock)
    scores.observe(A, 0.5)
    assert scores.score(A) == 0.5 and scores.score(B) is None
    clock.now += 10
    assert math.isclose(scores.score(A) or 0, 0.5 * math.exp(-1))  # decays toward 0 while not measured
    scores.observe(A, 0.1)
    assert math.isclose(scores.score(A) or 0, 0.5 * math.exp(-1) + 0.1 * (1 - math.exp(-1)))


def test_the_faster_of_the_two_drawn_wins() -> None:
    scores = EwmaScores(Clock())
    scores.observe(A, 0.2)
    scores.observe(B, 0.01)
    every = lambda target: True  # noqa: E731
    assert scores.choose([A, B], every, draw=lambda n: 0) == B
    assert scores.choose([A, B], lambda target: target != B) == A  # the only usable one
    assert scores.choose([A, B], lambda target: False) is None


def test_a_new_endpoint_starts_at_the_average() -> None:
    scores = EwmaScores(Clock())
    scores.observe(A, 0.3)
    scores.observe(B, 0.1)
    draws = iter([2, 0])  # C, then A
    assert scores.choose([A, B, C], lambda target: True, draw=lambda n: next(draws)) == C  # 0.2 (average) < 0.3


def test_the_annotation() -> None:
    routes = table(ingress("web", rule("a.test", path("/")), annotations={"nginx.ingress.kubernetes.io/load-balance": "ewma"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.load_balance == "ewma"
    plain = table(ingress("web", rule("a.test", path("/")), annotations={"nginx.ingress.kubernetes.io/load-balance": "round_robin"})).table.match("a.test", "/")
    assert plain is not None and plain.policies is None


class MovingClock(Clock):
    """A clock that moves on every reading, as the reactor's does."""

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_an_unmeasured_endpoint_ties_with_the_average_at_one_instant() -> None:
    """Scores compared at different instants would make the measured endpoint win every tie (it decays meanwhile)."""
    scores = EwmaScores(MovingClock())
    scores.observe(A, 0.2)
    assert scores.choose([A, B], lambda target: True, draw=lambda n: 1 if n == 2 else 0) == B  # B drawn first; a tie keeps it
