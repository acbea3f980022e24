# -*- test-case-name: tests.unit.test_ewma -*-
"""
ingress-nginx's C{load-balance: ewma}: two endpoints drawn at random, the one answering faster wins.

Each endpoint's score is an exponentially weighted moving average of its
response times (how long from sending the request to its response head),
decaying toward 0 with a 10 s time constant while it is not updated, as
ingress-nginx's balancer/ewma.lua computes it; an endpoint never measured
starts at the average of the others ("slow start"), so a new pod is neither
flooded nor starved.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Optional

Address = tuple[str, int]
DECAY_SECONDS = 10.0


class EwmaScores:
    """Scores of every endpoint seen, shared by the routes that balance by EWMA."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._scores: dict[Address, tuple[float, float]] = {}  # address -> (ewma, when)

    def observe(self, address: Address, seconds: float) -> None:
        """A response head arrived C{seconds} after the request was sent to C{address}."""
        now = self._clock()
        self._scores[address] = (self._decayed(address, now, seconds), now)
        if len(self._scores) > 65536:
            self._scores = dict(list(self._scores.items())[-32768:])

    def score(self, address: Address, now: Optional[float] = None) -> Optional[float]:
        """The endpoint's score now (or at C{now}), or None if it was never measured."""
        if address not in self._scores:
            return None
        return self._decayed(address, self._clock() if now is None else now, 0.0)

    def _decayed(self, address: Address, now: float, sample: float) -> float:
        ewma, when = self._scores.get(address, (sample, now))
        weight = math.exp(-max(now - when, 0.0) / DECAY_SECONDS)
        return ewma * weight + sample * (1.0 - weight)

    def choose(self, targets: Sequence[Address], usable: Callable[[Address], bool], draw: Callable[[int], int] = random.randrange) -> Optional[Address]:
        """The better-scoring of two usable targets drawn at random (the only one, if one is usable)."""
        candidates = [target for target in targets if usable(target)]
        if len(candidates) < 2:
            return candidates[0] if candidates else None
        first = candidates[draw(len(candidates))]
        second = candidates[draw(len(candidates) - 1)]
        if second == first:
            second = candidates[-1]
        now = self._clock()  # one instant for every score: they decay as time passes
        known = [s for t in candidates if (s := self.score(t, now)) is not None]
        start = sum(known) / len(known) if known else 0.0
        scores = [s if (s := self.score(t, now)) is not None else start for t in (first, second)]
        return first if scores[0] <= scores[1] else second
