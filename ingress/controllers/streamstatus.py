# -*- test-case-name: tests.kube.test_stream_status -*-
"""
StreamIngress status: the conditions the routing build decided (Accepted,
ResolvedRefs, Conflict), written by the leader.

The build puts each StreamIngress's conditions on the routing table; this
controller keeps the latest table's view (handed over from the reactor
thread) and syncs one StreamIngress key at a time: it writes C{status} only
when a condition's status, reason, message or observed generation differs
from what the object shows, and keeps C{lastTransitionTime} unless the
condition's status flips - the metav1.Condition rules.  A listener the
leader itself failed to bind is reported as C{Accepted=False, reason
PortUnavailable} (on a DaemonSet every node binds the same ports, so the
leader's failure is everyone's likely failure).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ingress.controllers.leader import micro_time
from ingress.controllers.writer import LeaderWriter
from ingress.model import Condition, ObjectRef, StreamIngress
from ingress.routing.report import EMPTY_BUILT, Built
from ingress.routing.streams import StreamCondition
from ingress.sources.kube.client import MERGE_PATCH
from ingress.sources.kube.reflector import Store


def desired_conditions(
    ref: ObjectRef, built: Built, failures: Mapping[tuple[str, int], str]
) -> tuple[StreamCondition, ...]:
    """The build's conditions for C{ref} (its report's), with Accepted turned False where the leader could not bind (its table's streams)."""
    conditions = built.report.stream_conditions.get(ref, ())
    failed = [(key, detail) for key, detail in failures.items() if (route := built.table.streams.get(key)) is not None and route.source == ref]
    if not failed:
        return conditions
    (protocol, port), detail = failed[0]
    generation = conditions[0].observed_generation if conditions else 0
    refused = StreamCondition("Accepted", "False", "PortUnavailable", f"cannot listen on {protocol} port {port}: {detail}", generation)
    return tuple(refused if c.type == "Accepted" else c for c in conditions)


def merged(current: tuple[Condition, ...], desired: tuple[StreamCondition, ...], now: str) -> list[dict[str, Any]]:
    """The status conditions to write: C{lastTransitionTime} moves only when a condition's status changes."""
    previous = {c.type: c for c in current}
    result = []
    for condition in desired:
        before = previous.get(condition.type)
        since = before.last_transition_time if before is not None and before.status == condition.status and before.last_transition_time else now
        result.append({**condition.to_json(), "lastTransitionTime": since})
    return result


def differs(current: tuple[Condition, ...], desired: tuple[StreamCondition, ...]) -> bool:
    have = sorted((c.type, c.status, c.reason, c.message, c.observed_generation) for c in current)
    want = sorted((c.type, c.status, c.reason, c.message, c.observed_generation) for c in desired)
    return have != want


class StreamStatusSync:
    """The sync function of the stream status controller, one StreamIngress key at a time."""

    def __init__(
        self,
        writer: LeaderWriter,
        streams: Store,
    ) -> None:
        self.writer = writer
        self.streams = streams
        self._built = EMPTY_BUILT
        self._failures: Mapping[tuple[str, int], str] = {}
        self._lock = threading.Lock()

    def table_changed(self, built: Built, failures: Mapping[tuple[str, int], str]) -> list[tuple[str, str]]:
        """
        Keep the new table and a copy of the listeners that failed to bind
        (reactor thread); returns the keys whose conditions changed, by the
        build or by a listener that failed or bound again.
        """
        with self._lock:
            old, self._built = self._built, built
            old_failures, self._failures = self._failures, dict(failures)
        before, after = old.report.stream_conditions, built.report.stream_conditions
        refs = {ref for ref in set(before) | set(after) if before.get(ref) != after.get(ref)}
        for key in set(old_failures.items()) ^ set(self._failures.items()):
            for route in (old.table.streams.get(key[0]), built.table.streams.get(key[0])):
                if route is not None:
                    refs.add(route.source)
        return [(ref.namespace, ref.name) for ref in refs if ref.kind == "StreamIngress"]

    def __call__(self, key: tuple[str, str]) -> None:
        stream = self.streams.get(key)
        if not isinstance(stream, StreamIngress):
            return
        with self._lock:
            built, failures = self._built, self._failures
        desired = desired_conditions(stream.ref, built, failures)
        if not desired or desired[0].observed_generation < stream.meta.generation:
            return  # the table has not caught up with this version yet: its own table will come
        if not differs(stream.status_conditions, desired):
            return
        body = {
            "status": {
                "observedGeneration": desired[0].observed_generation,
                "conditions": merged(stream.status_conditions, desired, micro_time()[:19] + "Z"),
            }
        }
        path = f"/apis/twingress.io/v1alpha1/namespaces/{stream.meta.namespace}/streamingresses/{stream.meta.name}/status"
        self.writer.request("PATCH", path, "StreamIngress", "patch-status", body, MERGE_PATCH)
