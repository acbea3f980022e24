"""
500 annotated Services created at once: every Ingress appears, correct, with one write each.

The convergence time is printed (and reported in docs/performance.md); the test checks correctness and
the number of writes, never the time.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tests.kube.api import Kube
from tests.kube.controller_support import GENERATE, MANAGED_BY, host_of, load_balancer, service_body, start_controller, writes
from tests.kube.twingress import wait_until

COUNT = 500


def test_500_annotated_services_converge_without_write_storms(kube: Kube, namespace: str, twingress) -> None:
    proxy = start_controller(twingress, namespace, "--publish-status-address", "192.0.2.50")
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: kube.core.create_namespaced_service(namespace, service_body(namespace, f"svc-{i}", {GENERATE: "true"})), range(COUNT)))
    created = time.monotonic() - started

    def converged() -> list[dict]:
        items = kube._dict(kube.networking.list_namespaced_ingress(namespace, label_selector="=".join(MANAGED_BY)))["items"]
        done = [i for i in items if load_balancer(i) == ["192.0.2.50"]]
        return items if len(done) == COUNT else []

    items = wait_until(converged, timeout=300, interval=1.0, what=f"{COUNT} generated Ingresses with status")
    elapsed = time.monotonic() - started
    print(f"{COUNT} Services created in {created:.1f}s; all Ingresses generated with status after {elapsed:.1f}s")
    assert sorted(host_of(i) for i in items) == sorted(f"svc-{i}.{namespace}.example.com" for i in range(COUNT))

    # one create and one status write per Ingress: no retries that wrote, no drift fights
    assert writes(proxy, kind="Ingress", verb="create") == COUNT
    assert writes(proxy, kind="Ingress", verb="patch-status") == COUNT
    assert writes(proxy, kind="Ingress", verb="patch") == 0
    assert writes(proxy, kind="Ingress", verb="delete") == 0
    print(f"writes: {writes(proxy):.0f} in all ({writes(proxy, kind='Event'):.0f} Events)")
