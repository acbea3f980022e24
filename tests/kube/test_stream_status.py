"""
StreamIngress status written by the leader: the conditions the build decided, observedGeneration,
lastTransitionTime kept while a condition holds, and no write when nothing changed.
"""

from __future__ import annotations

import socket

from tests.kube.api import Kube
from tests.kube.controller_support import start_controller, writes
from tests.kube.streams_support import Streams, stream_body
from tests.kube.twingress import free_port, wait_until


def status_of(streams_api: Streams, namespace: str, name: str) -> dict:
    return streams_api.read(namespace, name).get("status") or {}


def conditions_of(streams_api: Streams, namespace: str, name: str) -> dict[str, dict]:
    return {c["type"]: c for c in status_of(streams_api, namespace, name).get("conditions", [])}


def wait_status(streams_api: Streams, namespace: str, name: str, expected: dict[str, tuple[str, str]], generation: int = 1) -> dict[str, dict]:
    def probe() -> dict[str, dict]:
        found = conditions_of(streams_api, namespace, name)
        got = {t: (c["status"], c["reason"]) for t, c in found.items()}
        observed = status_of(streams_api, namespace, name).get("observedGeneration")
        return found if all(got.get(t) == v for t, v in expected.items()) and observed == generation else {}

    return wait_until(probe, what=f"status of {namespace}/{name}: {expected} at generation {generation}")


def test_conditions_are_written_by_the_leader_and_follow_changes(kube: Kube, streams: Streams, namespace: str, twingress) -> None:
    proxy = start_controller(twingress, namespace, "--publish-status-address", "192.0.2.60")
    port = free_port()
    kube.create_service(namespace, "db", port=5432)
    streams.create(stream_body(namespace, "a-first", port, service="db", port=5432))
    accepted = wait_status(streams, namespace, "a-first", {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs"), "Conflict": ("False", "NoConflict")})
    assert all(c["observedGeneration"] == 1 and c["lastTransitionTime"] for c in accepted.values())

    # a second object on the same port loses, and says why
    streams.create(stream_body(namespace, "b-second", port, service="db", port=5432))
    newer = wait_status(streams, namespace, "b-second", {"Accepted": ("False", "PortConflict"), "Conflict": ("True", "PortConflict")})
    assert f"{namespace}/a-first" in newer["Conflict"]["message"]

    # a spec change of the winner to a missing Service: ResolvedRefs flips, Accepted keeps its transition time
    body = stream_body(namespace, "a-first", port, service="missing", port=5432)
    streams.replace(body)
    changed = wait_status(streams, namespace, "a-first", {"ResolvedRefs": ("False", "ServiceNotFound")}, generation=2)
    assert changed["Accepted"]["lastTransitionTime"] == accepted["Accepted"]["lastTransitionTime"]
    assert changed["ResolvedRefs"]["observedGeneration"] == 2

    # nothing changes → no more writes: touching labels (no generation change) costs nothing
    before = writes(proxy, kind="StreamIngress")
    current = streams.read(namespace, "a-first")
    current["metadata"].setdefault("labels", {})["touched"] = "yes"
    streams.custom.replace_namespaced_custom_object("twingress.io", "v1alpha1", namespace, "streamingresses", "a-first", current)
    streams.create(stream_body(namespace, "marker", free_port(), service="db", port=5432))
    wait_status(streams, namespace, "marker", {"Accepted": ("True", "Accepted")})
    assert writes(proxy, kind="StreamIngress") == before + 1


def test_a_port_the_leader_cannot_bind_is_reported_and_recovers(kube: Kube, streams: Streams, namespace: str, twingress) -> None:
    start_controller(twingress, namespace, "--publish-status-address", "192.0.2.61")
    kube.create_service(namespace, "db", port=5432)
    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        streams.create(stream_body(namespace, "blocked", port, service="db", port=5432))
        refused = wait_status(streams, namespace, "blocked", {"Accepted": ("False", "PortUnavailable"), "ResolvedRefs": ("True", "ResolvedRefs")})
        assert f"TCP port {port}" in refused["Accepted"]["message"]
    finally:
        taken.close()
    # the next table tries again: an unrelated change makes one
    streams.create(stream_body(namespace, "other", free_port(), service="db", port=5432))
    wait_status(streams, namespace, "blocked", {"Accepted": ("True", "Accepted")})
