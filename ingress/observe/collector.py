"""
The cyclic garbage collector's metrics: its pauses and findings by generation, and the objects
frozen out of its scans (L{ingress.speedups.heap}).  Its pauses hold the GIL: every request
waits for them, so an operator should see them.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class CollectorMetrics:
    """The collector's pauses and findings, by generation, and how many objects are frozen."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pauses = Histogram(
            "twingress_gc_pause_seconds",
            "Cyclic garbage collections (the GIL held: every request waits), by generation (2: full)",
            ["generation"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=registry,
        )
        self.collected = Counter(
            "twingress_gc_collected_objects",
            "Objects the cyclic collector found unreachable (garbage in reference cycles), by generation",
            ["generation"],
            registry=registry,
        )
        self.frozen = Gauge(
            "twingress_gc_frozen_objects", "Objects frozen out of the collector's scans, at the last count", registry=registry
        )
        self.thaws = Counter(
            "twingress_gc_thaws", "Times the frozen objects doubled and were thawed for one full collection", registry=registry
        )
        self._by_generation = [(self.pauses.labels(str(n)), self.collected.labels(str(n))) for n in range(3)]
        self._started = 0.0

    def observe(self, phase: str, info: dict[str, Any]) -> None:
        """A C{gc.callbacks} entry: times each collection, counts what it found."""
        if phase == "start":
            self._started = time.perf_counter()
            return
        pauses, collected = self._by_generation[info["generation"]]
        pauses.observe(time.perf_counter() - self._started)
        if info["collected"]:
            collected.inc(info["collected"])

    def install(self) -> None:
        if self.observe not in gc.callbacks:
            gc.callbacks.append(self.observe)

    def uninstall(self) -> None:
        if self.observe in gc.callbacks:
            gc.callbacks.remove(self.observe)
