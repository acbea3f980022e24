"""The controllers' work queue and worker loop: deduplication, one worker per key, backoff, giving up."""

from __future__ import annotations

import threading
from collections.abc import Hashable

import pytest
from prometheus_client import CollectorRegistry

from ingress.controllers.leader import NotLeader
from ingress.controllers.loop import MAX_RETRIES, ControllerLoop
from ingress.controllers.metrics import ControllerMetrics
from ingress.controllers.workqueue import Backoff, ShutDown, TokenBucket, WorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_waits_once_however_often_it_is_added() -> None:
    queue: WorkQueue[str] = WorkQueue("q")
    for key in ("a", "b", "a", "a", "c", "b"):
        queue.add(key)
    assert len(queue) == 3
    assert [queue.get(timeout=0), queue.get(timeout=0), queue.get(timeout=0)] == ["a", "b", "c"]
    assert queue.get(timeout=0) is None


def test_a_key_added_while_processing_comes_back_only_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue("q")
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")  # an event during the sync
    queue.add("a")
    assert queue.get(timeout=0) is None  # not handed to a second worker meanwhile
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_delayed_keys_come_due_by_the_clock() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("q", clock=clock)
    queue.add_after("late", 5.0)
    queue.add_after("soon", 1.0)
    assert queue.get(timeout=0) is None
    clock.now += 1.0
    assert queue.get(timeout=0) == "soon"
    clock.now += 4.0
    assert queue.get(timeout=0) == "late"


def test_backoff_doubles_from_5ms_to_the_cap_and_forget_resets() -> None:
    backoff: Backoff[str] = Backoff()
    delays = [backoff.when("k") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1000.0 and max(delays) == 1000.0
    assert backoff.retries("k") == 20
    backoff.forget("k")
    assert backoff.when("k") == 0.005 and backoff.when("other") == 0.005


def test_token_bucket_allows_a_burst_then_spaces_at_its_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=100, clock=clock)
    assert all(bucket.reserve() == 0.0 for _ in range(100))
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 10.0  # refilled (capped at the burst)
    assert bucket.reserve() == 0.0


def test_rate_limited_adds_wait_for_the_longer_of_backoff_and_bucket() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("q", clock=clock)
    queue.add_rate_limited("k")  # 5 ms
    assert queue.get(timeout=0) is None
    clock.now += 0.005
    assert queue.get(timeout=0) == "k"


def test_shut_down_wakes_waiting_workers() -> None:
    queue: WorkQueue[str] = WorkQueue("q")
    raised = threading.Event()

    def worker() -> None:
        try:
            queue.get()
        except ShutDown:
            raised.set()

    thread = threading.Thread(target=worker)
    thread.start()
    queue.shut_down()
    thread.join(timeout=10)
    assert raised.is_set()


def run_loop(sync, keys: list[Hashable], workers: int = 3) -> tuple[ControllerLoop, CollectorRegistry]:
    registry = CollectorRegistry()
    loop = ControllerLoop("test", sync, workers, ControllerMetrics(registry))
    loop.queue.backoff.base = 0.0001  # the retry schedule is tested above; here only the count matters
    loop.start()
    for key in keys:
        loop.queue.add(key)
    return loop, registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_a_failing_key_is_retried_then_dropped_after_max_retries() -> None:
    calls: list[Hashable] = []
    finished = threading.Event()

    def sync(key: Hashable) -> None:
        calls.append(key)
        if len(calls) == MAX_RETRIES + 1:
            finished.set()
        raise RuntimeError("apiserver says no")

    loop, metrics = run_loop(sync, ["bad"])
    assert finished.wait(10)
    loop.stop()
    assert calls == ["bad"] * (MAX_RETRIES + 1)
    assert sample(metrics, "twingress_workqueue_dropped_total", controller="test") == 1
    assert sample(metrics, "twingress_workqueue_retries_total", controller="test") == MAX_RETRIES


def test_no_two_workers_sync_one_key_and_not_leader_is_not_retried() -> None:
    active: set[Hashable] = set()
    overlaps: list[Hashable] = []
    lock = threading.Lock()
    done = threading.Semaphore(0)

    def sync(key: Hashable) -> None:
        with lock:
            if key in active:
                overlaps.append(key)
            active.add(key)
        threading.Event().wait(0.001)
        with lock:
            active.discard(key)
        done.release()
        if key == "lost":
            raise NotLeader("me")

    keys = ["a", "b", "a", "c", "a", "b", "lost"] * 20
    loop, metrics = run_loop(sync, keys, workers=4)
    assert done.acquire(timeout=10)
    while done.acquire(timeout=0.5):
        pass
    loop.stop()
    assert overlaps == []
    assert sample(metrics, "twingress_controller_syncs_total", controller="test", result="not-leader") >= 1
    assert sample(metrics, "twingress_workqueue_retries_total", controller="test") == 0
