# -*- test-case-name: tests.unit.test_workqueue -*-
"""
Worker threads that drain a L{WorkQueue} through a sync function.

A sync that raises is retried through the queue's rate limiter (a 409
Conflict, an apiserver restart, a timeout); after L{MAX_RETRIES} failures in
a row the key is dropped with an error log and a metric, and comes back with
the next event or resync.  A sync that finds we are no longer the leader
(L{NotLeader}) is not retried: the next leader starts from its own stores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

from twisted.logger import Logger

from ingress.controllers.leader import NotLeader
from ingress.controllers.metrics import ControllerMetrics
from ingress.controllers.workqueue import ShutDown, WorkQueue

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

MAX_RETRIES = 10


class ControllerLoop:
    """C{workers} threads; each takes a key, syncs it, and marks it done - never two on one key."""

    def __init__(self, name: str, sync: Callable[[Hashable], None], workers: int, metrics: ControllerMetrics) -> None:
        self.name = name
        self.sync = sync
        self.queue: WorkQueue[Hashable] = WorkQueue(name)
        self.metrics = metrics
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.queue.shut_down()
        for thread in self._threads:
            thread.join(timeout=10)

    def _work(self) -> None:
        while True:
            try:
                key = self.queue.get(timeout=1.0)
            except ShutDown:
                return
            if key is None:
                self.metrics.queue_depth.labels(self.name).set(len(self.queue))
                continue
            try:
                self._process(key)
            finally:
                self.queue.done(key)
                self.metrics.queue_depth.labels(self.name).set(len(self.queue))

    def _process(self, key: Hashable) -> None:
        try:
            self.sync(key)
        except NotLeader:
            self.queue.forget(key)
            self.metrics.syncs.labels(self.name, "not-leader").inc()
        except Exception as error:  # noqa: BLE001 - a worker thread must survive any sync
            self._failed(key, error)
        else:
            self.queue.forget(key)
            self.metrics.syncs.labels(self.name, "ok").inc()

    def _failed(self, key: Hashable, error: Exception) -> None:
        self.metrics.syncs.labels(self.name, "error").inc()
        if self.queue.retries(key) >= MAX_RETRIES:
            log.error(
                "{controller}: giving up on {key} after {n} failed syncs: {error}",
                controller=self.name, key=key, n=MAX_RETRIES, error=str(error)[:300],
            )
            self.queue.forget(key)
            self.metrics.dropped.labels(self.name).inc()
            return
        log.warn("{controller}: sync of {key} failed, retrying: {error}", controller=self.name, key=key, error=str(error)[:300])
        self.metrics.retries.labels(self.name).inc()
        self.queue.add_rate_limited(key)
