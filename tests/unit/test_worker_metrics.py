"""
A dead worker's metrics in the primary's /metrics (ingress.process.pool.WorkerPool, ingress.observe.merge):
its counters stay in the sums (they never go back), its gauges leave with it (process_* of a process that
is gone, its open connections: none of them describe anything now).
"""

from __future__ import annotations

from twisted.internet.error import ProcessTerminated
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from ingress.observe.merge import merge
from ingress.observe.metrics import Metrics
from ingress.process.pool import WorkerPool


def test_a_dead_worker_keeps_its_counts_and_drops_its_gauges() -> None:
    primary = Metrics()
    pool = WorkerPool(MemoryReactorClock(), 1, [], {}, primary, lambda *args: None)
    worker = Metrics(worker=0)
    worker.upstream_failures.labels("connect").inc(3)
    worker.open_connections.labels("http").set(2)
    (slot,) = pool.slots
    slot.families = list(worker.registry.collect())
    pool.stopping = True  # no replacement to schedule
    pool._ended(slot, Failure(ProcessTerminated(exitCode=1)))
    merged = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in merge([primary.registry.collect(), *slot.retired]) for s in f.samples}
    assert merged[("twingress_upstream_failures_total", (("reason", "connect"),))] == 3
    assert ("twingress_open_connections", (("listener", "http"),)) not in merged
    assert [labels for name, labels in merged if name == "process_start_time_seconds"] == [()]  # the primary's alone
    assert ("process_cpu_seconds_total", (("worker", "0"),)) in merged  # a counter: its CPU time still counts
