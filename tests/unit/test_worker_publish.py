"""
How the primary sends its workers a new table (ingress.process.pool.WorkerPool): the builder's preparer finds and
pickles the message on the build thread, its commit sends it before the primary's swap, and the swap's
listener then sends nothing more; a table swapped in without that preparer is still sent.
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import Any

from twisted.internet.testing import MemoryReactorClock

from ingress.model.parse import state_from_objects
from ingress.observe.metrics import Metrics
from ingress.process.pool import WorkerPool
from ingress.routing import build
from ingress.routing.delta import applied
from tests.unit.objects import ingress, path, rule, service


class _Channel:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send_encoded(self, data: bytes) -> None:
        self.sent.append(pickle.loads(data))


def _pool() -> tuple[WorkerPool, list[_Channel]]:
    pool = WorkerPool(MemoryReactorClock(), 2, [], {}, Metrics(), lambda *args: None)
    channels = [_Channel(), _Channel()]
    for slot, channel in zip(pool.slots, channels, strict=True):
        slot.channel = channel  # type: ignore[assignment]
    return pool, channels


def test_the_commit_sends_the_change_and_the_swap_sends_nothing_more() -> None:
    pool, channels = _pool()
    state = state_from_objects([service("web"), *(ingress(name, rule(f"{name}.test", path("/", "web"))) for name in ("a", "b", "c"))])
    first = build(state, generation=1)
    pool.publish(first.table)  # the first table: whole
    second = replace(first.table, generation=2, hosts={**first.table.hosts, "b.test": first.table.hosts["a.test"]})
    commit = pool.prepare(second)  # the build thread
    assert all(channel.sent == [("table", first.table)] for channel in channels)
    commit()  # the reactor thread, before the swap
    for channel in channels:
        assert [kind for kind, *_ in channel.sent] == ["table", "change"]
        assert applied(first.table, channel.sent[1][1]) == second
    pool.publish(second)  # the swap's listener: already sent
    assert all(len(channel.sent) == 2 for channel in channels)
    third = replace(second, generation=3)
    pool.publish(third)  # a table without a prepared message
    assert all(channel.sent[-1][1].generation == 3 for channel in channels)
