"""
The cluster's ACME orders back off per certificate (issue 64, Renewal), against the real apiserver.

Before, the leader ordered again on every change of the Ingress, and its own status write is one:
an unreachable ACME server was asked again at each.  Now a failed order waits its backoff (30 s,
then 60 s...) whatever syncs come meanwhile: the status controller's write of the Ingress's
address and three changes of the Ingress are each synced by the ACME loop (its sync counter moves)
and none orders; the next order comes only when the 30 s are over.  And a 60 s certificate from
Pebble is renewed by the leader into the same Secret before it expires (an AcmeRenewed Event).
"""

from __future__ import annotations

import base64
import datetime
import re
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from kubernetes import client

from tests.acme_support import Pebble
from tests.kube.api import Kube
from tests.kube.controller_support import start_controller
from tests.kube.test_leader import wait_leader
from tests.kube.twingress import KubeTwingress, next_pod_ip, wait_until
from tests.support import free_port, refusing_address

HOST = "backoff.example.com"
ORDERING = f"acme: ordering a certificate for {HOST} from"
FAILED = re.compile(rf"^(\S+) .*acme: ordering a certificate for {re.escape(HOST)} failed: .*; trying again in (\d+)s", re.MULTILINE)


def _acme_syncs(proxy: KubeTwingress) -> float:
    return proxy.metric("twingress_controller_syncs_total", controller="acme")


def _stamp(line_start: str) -> datetime.datetime:
    """The time of a twistd log line (its first field, to the second)."""
    return datetime.datetime.strptime(line_start, "%Y-%m-%dT%H:%M:%S%z")


def _ordering_stamps(log: str) -> list[datetime.datetime]:
    return [_stamp(line.split(" ", 1)[0]) for line in log.splitlines() if ORDERING in line]


def test_a_failed_order_waits_its_backoff_through_status_writes_and_ingress_changes(
    kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress],
) -> None:
    host, port = refusing_address()
    proxy = start_controller(
        twingress, namespace, "--publish-status-address", "192.0.2.64",
        "--acme-directory", f"https://{host}:{port}/dir", "--acme-agree-tos", "true",
    )
    wait_leader(kube, namespace, [proxy])
    kube.create_service(namespace, "app")
    body = Kube.ingress_body(namespace, "site", HOST, "app")
    body["metadata"]["annotations"] = {"twingress.io/acme": "true"}
    body["spec"]["tls"] = [{"hosts": [HOST], "secretName": "site-tls"}]
    kube.networking.create_namespaced_ingress(namespace, body)

    first = wait_until(lambda: FAILED.search(proxy.log()), timeout=60, what="the first order failed")
    assert first.group(2) == "30", first.group(0)
    syncs = _acme_syncs(proxy)
    wait_until(lambda: kube.networking.read_namespaced_ingress("site", namespace).status.load_balancer.ingress, what="the status write")
    for touch in range(3):  # each change is a sync of the ACME loop, and none orders
        kube.networking.patch_namespaced_ingress("site", namespace, {"metadata": {"annotations": {"example.com/touched": str(touch)}}})
        wait_until(lambda syncs=syncs: _acme_syncs(proxy) > syncs, timeout=20, what=f"the ACME loop's sync of change {touch}")
        syncs = _acme_syncs(proxy)

    failures = wait_until(lambda: (found := list(FAILED.finditer(proxy.log()))) and len(found) >= 2 and found, timeout=90, what="the second order, after the backoff")
    orders = _ordering_stamps(proxy.log())
    assert len(orders) == 2, proxy.log()[-4000:]
    waited = (orders[1] - _stamp(failures[0].group(1))).total_seconds()
    assert waited >= 29, f"the second order came {waited:.0f}s after the first failure, not after its 30 s backoff"  # log stamps are to the second
    assert failures[1].group(2) == "60", failures[1].group(0)  # doubled
    print(f"{len(orders)} orders in {waited:.0f}s through {int(_acme_syncs(proxy))} ACME syncs (a status write and three changes among them)")


def test_the_leader_renews_a_short_lived_certificate_into_the_same_secret(
    kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress], tmp_path: Path,
) -> None:
    pebble = Pebble(tmp_path / "pebble")
    try:
        http_port, https_port, address = free_port(), free_port(), next_pod_ip()
        proxy = start_controller(
            twingress, namespace, "--publish-status-address", address, "--http", f"tcp:{http_port}:interface={address}", "--https", f"tcp:{https_port}:interface={address}",
            "--acme-directory", pebble.directory, "--acme-ca-file", str(pebble.ca_file), "--acme-agree-tos", "true",
        )
        wait_leader(kube, namespace, [proxy])
        pebble.start(http_port, https_port, address=address, validity=60)
        kube.create_service(namespace, "app")
        body = Kube.ingress_body(namespace, "short", "short.example.com", "app")
        body["metadata"]["annotations"] = {"twingress.io/acme": "true"}
        body["spec"]["tls"] = [{"hosts": ["short.example.com"], "secretName": "short-tls"}]
        kube.networking.create_namespaced_ingress(namespace, body)

        def leaf() -> x509.Certificate:
            secret = kube.core.read_namespaced_secret("short-tls", namespace)
            return x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))

        first = wait_until(leaf, timeout=90, what="the first certificate in its Secret")
        renewed = wait_until(lambda: (now := leaf()).serial_number != first.serial_number and now, timeout=70, what="the renewed certificate")
        assert renewed.not_valid_before_utc < first.not_valid_after_utc, "renewed before the first one expired"
        assert "(renewalInfo)" in proxy.log() and "is due for renewal" in proxy.log(), proxy.log()[-3000:]

        def reasons() -> set[str]:
            return {e.reason for e in client.EventsV1Api(kube.api).list_namespaced_event(namespace).items if e.regarding and e.regarding.name == "short"}

        # The Event follows the Secret's write: wait for it rather than read it at once.
        wait_until(lambda: {"AcmeIssued", "AcmeRenewed"} <= reasons(), timeout=30, what="the AcmeIssued and AcmeRenewed Events")
        print(f"renewed {(renewed.not_valid_before_utc - first.not_valid_before_utc).total_seconds():.0f}s into a 60s certificate, in the same Secret")
    finally:
        pebble.stop()
