"""
Leader election between real twingress processes on one Lease of the real apiserver.

Every replica serves; only the holder writes. The lease timings are the defaults (15 s lease,
10 s renew deadline, 2 s retry period): the bounds checked here are the ones an operator
relies on (takeover within lease duration + retry period after a crash, within one retry
period after a graceful stop, and a cut-off leader stops writing before its lease can expire),
each with a margin for a loaded machine, and the measured times are printed.
"""

from __future__ import annotations

import signal
import time

from tests.kube.api import Kube
from tests.kube.controller_support import (
    controller_args,
    create_annotated_service,
    lease_holder,
    managers_of,
    start_controller,
    wait_ingress,
    writes,
)
from tests.kube.twingress import CONVERGE_TIMEOUT, KubeTwingress, wait_until

LEASE, RETRY = 15.0, 2.0
MARGIN = 4.0  # scheduling, request latency and polling on a 2-core machine

STATUS_ADDRESS = ("--publish-status-address", "192.0.2.20")


def lease_name(namespace: str) -> str:
    return f"lease-{namespace}"[:63]


def holder_process(kube: Kube, namespace: str, processes: list[KubeTwingress]) -> KubeTwingress | None:
    holder = lease_holder(kube, namespace, lease_name(namespace))
    return next((p for p in processes if holder.endswith(f"_{p.process.pid}")), None)


def wait_leader(kube: Kube, namespace: str, processes: list[KubeTwingress], timeout: float = 30.0) -> KubeTwingress:
    leader = wait_until(lambda: holder_process(kube, namespace, processes), timeout=timeout, what="a lease holder")
    wait_until(lambda: leader.metric("twingress_leader") == 1, what="leader gauge of the holder")
    return leader


def test_only_the_leader_writes_and_a_killed_leader_is_replaced(kube: Kube, namespace: str, twingress) -> None:
    first = start_controller(twingress, namespace, *STATUS_ADDRESS)
    second = start_controller(twingress, namespace, *STATUS_ADDRESS)
    leader = wait_leader(kube, namespace, [first, second])
    follower = second if leader is first else first
    for name in ("a", "b", "c"):
        create_annotated_service(kube, namespace, name)
    for name in ("a", "b", "c"):
        ingress = wait_ingress(kube, namespace, name, lambda i: i.get("status", {}).get("loadBalancer", {}).get("ingress"))
        assert managers_of(ingress) <= {"twingress", "kubernetes-admin", "Go-http-client", "OpenAPI-Generator"}, managers_of(ingress)
    assert writes(leader, kind="Ingress", verb="create") == 3
    assert writes(leader, kind="Ingress", verb="patch-status") == 3
    assert writes(follower) == 0
    assert follower.metric("twingress_leader") == 0

    killed_at = time.monotonic()
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait()
    wait_until(lambda: holder_process(kube, namespace, [follower]), timeout=LEASE + RETRY + MARGIN + 10, what="takeover")
    takeover = time.monotonic() - killed_at
    print(f"takeover after SIGKILL of the leader: {takeover:.1f}s")
    assert takeover <= LEASE + RETRY + MARGIN, takeover

    # The new leader keeps the generated Ingresses correct.
    kube.networking.delete_namespaced_ingress("b", namespace)
    create_annotated_service(kube, namespace, "d")
    for name in ("b", "d"):
        wait_ingress(kube, namespace, name, what=f"Ingress {name} from the new leader")
    assert writes(follower, kind="Ingress", verb="create") == 2


def test_graceful_stop_hands_over_within_a_retry_period(kube: Kube, namespace: str, twingress) -> None:
    first = start_controller(twingress, namespace, *STATUS_ADDRESS)
    second = start_controller(twingress, namespace, *STATUS_ADDRESS)
    leader = wait_leader(kube, namespace, [first, second])
    follower = second if leader is first else first
    wait_until(lambda: "campaigning" in follower.log(), what="the follower campaigning")
    stopped_at = time.monotonic()
    leader.stop()  # SIGTERM: the Lease is released on the way out
    assert "leader election: released" in leader.log_path.read_text()
    wait_until(lambda: holder_process(kube, namespace, [follower]), timeout=RETRY + MARGIN + 10, what="handover")
    handover = time.monotonic() - stopped_at
    print(f"handover after a graceful stop: {handover:.1f}s")
    assert handover <= RETRY + MARGIN, handover
    create_annotated_service(kube, namespace, "after")
    wait_ingress(kube, namespace, "after")


def test_a_leader_cut_off_from_the_api_stops_writing_before_its_lease_expires(kube: Kube, namespace: str, twingress, relay, relayed) -> None:
    cut_off = twingress(*controller_args(namespace, *STATUS_ADDRESS), kubeconfig=relayed)
    leader = wait_leader(kube, namespace, [cut_off])
    assert leader is cut_off
    standby = start_controller(twingress, namespace, *STATUS_ADDRESS)
    wait_until(lambda: "campaigning" in standby.log(), what="the standby campaigning")

    relay.block()
    relay.cut()
    blocked_at = time.monotonic()
    stepped_down = wait_until(lambda: cut_off.metric("twingress_leader") == 0 and time.monotonic(), timeout=CONVERGE_TIMEOUT, what="cut-off leader stepping down")
    taken_over = wait_until(lambda: holder_process(kube, namespace, [standby]) and time.monotonic(), timeout=CONVERGE_TIMEOUT + LEASE, what="standby taking over")
    print(f"cut-off leader stepped down after {stepped_down - blocked_at:.1f}s, standby took over after {taken_over - blocked_at:.1f}s")
    assert stepped_down < taken_over
    # the cut-off replica keeps serving traffic from its last table, and is not the leader any more
    assert cut_off.readyz()[0] == 200
    relay.unblock()
    create_annotated_service(kube, namespace, "later")
    wait_ingress(kube, namespace, "later")
    assert writes(cut_off, kind="Ingress", verb="create") == 0
