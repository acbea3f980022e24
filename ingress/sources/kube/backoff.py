# -*- test-case-name: tests.unit.test_reflector_retry -*-
"""
When an informer tries again: the backoff between the tries of a run of failures, and which
failures are a read timing out.  Pure (the jitter's random source is a parameter).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Optional

from urllib3.exceptions import ReadTimeoutError

BACKOFF_START, BACKOFF_CAP = 0.8, 30.0  # client-go's reflector: 800 ms doubling to 30 s
BACKOFF_JITTER = (0.5, 1.5)  # a factor on each delay, so the informers of many nodes do not come back in step


class Backoff:
    """
    The delays between the tries of one run of failures: C{start} doubling up to C{cap}, each
    times a jitter factor drawn from C{uniform(*BACKOFF_JITTER)}, and never above C{cap}.  The
    first retry after a watch that worked comes within about a second (an apiserver restart or a
    reset connection is often over by then); an outage that lasts is asked about less and less
    often, so that a thousand nodes do not ask every second.  Pure: C{uniform} is a parameter.
    """

    def __init__(
        self,
        start: float = BACKOFF_START,
        cap: float = BACKOFF_CAP,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.start, self.cap, self.uniform = start, cap, uniform
        self._base = start

    def reset(self) -> None:
        """A try worked: the next run of failures starts at C{start} again."""
        self._base = self.start

    def next(self) -> float:
        """The delay before the next try, and the one after it doubled."""
        delay = min(self.cap, self._base * self.uniform(*BACKOFF_JITTER))
        self._base = min(self._base * 2, self.cap)
        return delay


def read_timed_out(error: BaseException) -> bool:
    """Whether C{error} (or what caused it) is a socket read timing out: urllib3 says so with its own class."""
    found: Optional[BaseException] = error
    while found is not None:
        if isinstance(found, (TimeoutError, ReadTimeoutError)):
            return True
        found = found.__cause__ or found.__context__
    return False
