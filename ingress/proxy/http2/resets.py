# -*- test-case-name: tests.unit.test_h2_fields -*-
"""
The rapid-reset budget of an HTTP/2 client connection (CVE-2023-44487): how many streams a
client may reset before the connection answers GOAWAY ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

from typing import Any


class ResetBudget:
    """
    How many streams a client may reset before it is told to calm down: a token
    bucket of C{2 x max streams}, refilled at C{max streams} per second.  Clients
    that cancel now and then never see it; a reset flood drains it in a moment.
    """

    def __init__(self, clock: Any, max_streams: int) -> None:
        self._clock = clock
        self._capacity = self._tokens = 2.0 * max_streams
        self._rate = float(max_streams)
        self._at = clock()

    def spend(self) -> bool:
        """One reset; False once the budget is gone."""
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
        self._tokens -= 1.0
        return self._tokens >= 0.0
