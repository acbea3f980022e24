# -*- test-case-name: tests.unit.test_workqueue -*-
"""
A rate-limited work queue with client-go's semantics, for controller threads.

- A key is queued at most once: adding a key that is already waiting does
  nothing (a burst of events about one object costs one sync).
- A key is never processed by two workers at once: a key added while it is
  being processed is marked dirty and queued again when L{done} is called.
- L{add_rate_limited} re-adds a failed key after the larger of a per-key
  exponential backoff (5 ms doubling, capped at 1000 s) and an overall token
  bucket (10 per second, burst 100), so one broken object cannot spin and a
  failing apiserver is not hammered.  L{forget} resets a key's backoff.

Pure threading (no reactor): workers are plain threads at the Kubernetes
boundary.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Optional, TypeVar

K = TypeVar("K", bound=Hashable)

BACKOFF_BASE, BACKOFF_CAP = 0.005, 1000.0
BUCKET_RATE, BUCKET_BURST = 10.0, 100


class TokenBucket:
    """The overall limit: when the next token is free, reserving it (so delays add up under load)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Seconds until the reserved token is available (0 when one is free now)."""
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class Backoff(Generic[K]):
    """Per-key exponential backoff: 5 ms, 10 ms, 20 ms... up to 1000 s; L{forget} starts over."""

    def __init__(self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[K, int] = {}
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        return min(self.base * float(2**failures), self.cap)

    def retries(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)


class ShutDown(Exception):
    """The queue was shut down: workers return."""


class WorkQueue(Generic[K]):
    """The deduplicating queue with delayed adds and per-key backoff described in the module docstring."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self.backoff: Backoff[K] = Backoff()
        self.bucket = TokenBucket(BUCKET_RATE, BUCKET_BURST, clock)
        self._order: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []
        self._sequence = itertools.count()
        self._shut = False
        self._cond = threading.Condition()

    def add(self, key: K) -> None:
        """Queue C{key} now, unless it is already waiting; if it is being processed, once it is done."""
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: K) -> None:
        if self._shut or key in self._queued:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        self._queued.add(key)
        self._order.append(key)
        self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queue C{key} after C{delay} seconds (at once when C{delay} <= 0)."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if not self._shut:
                heapq.heappush(self._delayed, (self.clock() + delay, next(self._sequence), key))
                self._cond.notify()

    def add_rate_limited(self, key: K) -> None:
        """Re-queue a key whose sync failed, after its backoff or the overall bucket's wait, whichever is longer."""
        self.add_after(key, max(self.backoff.when(key), self.bucket.reserve()))

    def retries(self, key: K) -> int:
        return self.backoff.retries(key)

    def forget(self, key: K) -> None:
        self.backoff.forget(key)

    def get(self, timeout: Optional[float] = None) -> Optional[K]:
        """
        The next key to process (mark it L{done} afterwards), or None after
        C{timeout} seconds without one.

        @raise ShutDown: the queue was shut down.
        """
        deadline = None if timeout is None else self.clock() + timeout
        with self._cond:
            while True:
                if self._shut:
                    raise ShutDown()
                self._promote_due()
                if self._order:
                    key = self._order.popleft()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                wait = self._next_wait(deadline)
                if wait is not None and wait <= 0:
                    return None
                self._cond.wait(wait)

    def _promote_due(self) -> None:
        now = self.clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self._add_locked(key)

    def _next_wait(self, deadline: Optional[float]) -> Optional[float]:
        """How long to sleep: until the next delayed key or the caller's deadline, whichever is first."""
        now = self.clock()
        waits = []
        if self._delayed:
            waits.append(self._delayed[0][0] - now)
        if deadline is not None:
            waits.append(deadline - now)
        return max(min(waits), 0.0) if waits else None

    def done(self, key: K) -> None:
        """C{key} is processed; if it was added meanwhile, it is queued again now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add_locked(key)

    def clear(self) -> None:
        """Drop every waiting and delayed key (leadership lost: the next leader starts from the stores)."""
        with self._cond:
            self._order.clear()
            self._queued.clear()
            self._delayed.clear()
            self._dirty.clear()

    def shut_down(self) -> None:
        with self._cond:
            self._shut = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._order) + len(self._delayed)
