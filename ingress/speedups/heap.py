# -*- test-case-name: tests.unit.test_heap -*-
"""
The cyclic garbage collector, kept off the routing table.

CPython's collector holds the GIL while it scans, and a full collection scans every object
that can hold references.  At 10,000 Ingresses the model and the routing table are some
400,000 such objects, and a full collection took 200-545 ms (bench/library_share.py --scale
10000: 382-545 ms under gRPC load; bench/README.md's endpoint_removal section: 92-245 ms
while a cluster filled).  Every request waits that long.  Yet those objects are long-lived,
immutable and acyclic: reference counting frees each one the moment a newer table stops
using it, and the collector has nothing to find among them.

So after each table is built (L{frozen_after}), what is alive is frozen (C{gc.freeze}): moved
out of the generations the collector scans, into the permanent one it never does.  First the
young generations are collected, so that only what is alive is frozen (0.4-0.5 ms after an
incremental build at 10k).  A frozen object is
still freed by reference counting; only one in a reference cycle would stay, for good (a
leak), if it became garbage after being frozen.  The request path makes no cycles
(tests/proxy/test_reference_cycles.py), and the model and table none
(tests/unit/test_heap.py); L{FrozenWatch} is the guard for the rest: when the frozen objects
have doubled since its first count (or its last thaw), it thaws them and runs one full
collection (what CPython itself does each time the old generation grows by a quarter), so
that a cycle frozen by mistake costs memory for a while, never for ever.

The collector's pauses are metrics (L{ingress.observe.collector.CollectorMetrics}): an
operator sees them, as a Go proxy's users see its GC pauses.

The plain code, with the speed-ups off (L{ingress.speedups.ENABLED}): a build runs with the
collector as CPython runs it, nothing is frozen, and the watch finds nothing frozen to thaw.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from twisted.application.service import Service
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from ingress.observe.collector import CollectorMetrics
from ingress.speedups import ENABLED

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

_T = TypeVar("_T")

# Seconds between looks at the frozen count: counting walks the frozen objects' list (4.7 ms
# for 800,000 objects), so it is not done on every build.
WATCH_INTERVAL = 60.0
# The frozen count may grow to this many times the count after the last full collection
# before the watch thaws it: a cluster twice as large, or frozen garbage as large as the heap.
GROWTH_ALLOWED = 2.0
# Below this many frozen objects, growth is not worth a full collection (a small process's own
# modules and a small table).
SMALL_HEAP = 200_000


def frozen_after(work: Callable[[], _T]) -> _T:
    """
    C{work()} (a table build) with the collector paused, then the young generations collected
    and everything alive frozen.  Paused: a build allocates hundreds of thousands of values at
    10k Ingresses, and the collections they would trigger doubled its time (0.34 s without, up
    to 0.64 s with).  Frozen: the new table, the model it came from and all else now alive are
    out of every later collection's scan.
    """
    if not ENABLED:
        return work()
    collecting = gc.isenabled()
    gc.disable()
    try:
        return work()
    finally:
        freeze_alive()
        if collecting:
            gc.enable()


def freeze_alive() -> None:
    """Collect the young generations (their garbage must not be frozen), then freeze what is left (nothing, with the speed-ups off)."""
    if not ENABLED:
        return
    gc.collect(1)
    gc.freeze()


class FrozenWatch(Service):
    """
    Counts the frozen objects every L{WATCH_INTERVAL} seconds (reactor thread) and thaws them
    for one full collection when they have grown L{GROWTH_ALLOWED} times since its first count
    (or its last thaw).
    """

    def __init__(self, reactor: Any, metrics: CollectorMetrics, interval: float = WATCH_INTERVAL, small_heap: int = SMALL_HEAP) -> None:
        self.reactor = reactor
        self.metrics = metrics
        self.interval = interval
        self.small_heap = small_heap
        self.baseline = 0  # frozen objects at the first count, then after each thaw (0: not counted yet)
        self._call: Optional[IDelayedCall] = None

    def startService(self) -> None:
        super().startService()
        self.metrics.install()
        self._call = self.reactor.callLater(self.interval, self.check)

    def stopService(self) -> Any:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.metrics.uninstall()
        return super().stopService()

    def check(self) -> None:
        self._call = self.reactor.callLater(self.interval, self.check)
        frozen = gc.get_freeze_count()
        self.metrics.frozen.set(frozen)
        if self.baseline == 0:
            self.baseline = frozen
        elif frozen > max(self.small_heap, GROWTH_ALLOWED * self.baseline):
            self.thaw(frozen)

    def thaw(self, frozen: int) -> None:
        """One full collection of everything, frozen or not; what is alive is frozen again."""
        started, before = time.perf_counter(), self.baseline
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self.baseline = gc.get_freeze_count()
        self.metrics.frozen.set(self.baseline)
        self.metrics.thaws.inc()
        log.info(
            "garbage collector: {frozen} objects frozen, {growth:.1f} times as many as at the last count that set the baseline;"
            " thawed for one: {found} unreachable, {alive} alive, {ms:.0f} ms",
            frozen=frozen, growth=frozen / max(1, before), found=found, alive=self.baseline, ms=(time.perf_counter() - started) * 1000,
        )
