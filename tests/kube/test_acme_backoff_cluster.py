"""
The cluster's ACME renewal (issue 64, Renewal), against the real apiserver: a 60 s certificate from
Pebble is renewed by the leader into the same Secret before it expires (an AcmeRenewed Event).

And a 90-day certificate revoked: the leader asks for its renewalInfo again at the (rewritten: a
second, so the floor's minute) Retry-After of the last answer (RFC 9773 4.3.3), sees the window
Pebble moved (renew now) and renews it into the same Secret (tests/proxy/test_acme_renewal_info.py
does the same without a cluster).

The backoff of a failed order in a cluster (no order before its end whatever syncs come meanwhile:
the status write of the Ingress's address, changes of the Ingress; kept on the account Secret, so
that the next leader waits it out too) is tested with the leader killed in it, in
tests/kube/test_acme_cluster.py (one real 30 s wait for both); its arithmetic (30 s doubling to an
hour, the server's Retry-After) with a fake clock in tests/unit/test_acme_schedule.py.
"""

from __future__ import annotations

import base64
import datetime
import time
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from kubernetes import client

from tests.acme_faults import FaultProxy, revoke
from tests.acme_support import Pebble
from tests.kube.api import Kube
from tests.kube.controller_support import start_controller
from tests.kube.test_acme_cluster import acme_ingress
from tests.kube.test_leader import wait_leader
from tests.kube.twingress import KubeTwingress, next_pod_ip, wait_until
from tests.support import free_port


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
        kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "short", ["short.example.com"], "short-tls"))

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


def test_the_leader_asks_for_the_renewal_window_again_and_renews_a_revoked_certificate(
    kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress], tmp_path: Path,
) -> None:
    pebble = Pebble(tmp_path / "pebble")
    faults = FaultProxy(pebble, tmp_path)
    try:
        faults.answer_headers.append(("GET", "/draft-ietf-acme-ari-03/renewalInfo/", {"Retry-After": "1"}))
        http_port, https_port, address = free_port(), free_port(), next_pod_ip()
        proxy = start_controller(
            twingress, namespace, "--publish-status-address", address, "--http", f"tcp:{http_port}:interface={address}", "--https", f"tcp:{https_port}:interface={address}",
            "--acme-directory", faults.directory, "--acme-ca-file", str(pebble.ca_file), "--acme-agree-tos", "true",
        )
        wait_leader(kube, namespace, [proxy])
        pebble.start(http_port, https_port, address=address)
        kube.create_service(namespace, "app")
        kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "long", ["long.example.com"], "long-tls"))

        def secret() -> client.V1Secret:
            return kube.core.read_namespaced_secret("long-tls", namespace)

        first = wait_until(secret, timeout=90, what="the certificate in its Secret")
        issued_at = time.monotonic()
        leaf = x509.load_pem_x509_certificate(base64.b64decode(first.data["tls.crt"]))
        renew_at = datetime.datetime.fromisoformat(first.metadata.annotations["acme.twingress.io/renew-after"])
        assert renew_at - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=7), renew_at  # weeks away: only a moved window renews it now
        check_at = datetime.datetime.fromisoformat(first.metadata.annotations["acme.twingress.io/renewal-info-at"])
        assert (check_at - datetime.datetime.now(datetime.UTC)).total_seconds() <= 61, check_at  # Retry-After 1: the floor's minute
        account = next(s for s in kube.core.list_namespaced_secret(namespace).items if s.metadata.name.startswith("twingress-acme-account-"))
        revoke(faults.directory, pebble.ca_file, base64.b64decode(account.data["key.pem"]), leaf)

        renewed = wait_until(lambda: (now := secret()).data["tls.crt"] != first.data["tls.crt"] and now, timeout=120, what="the revoked certificate renewed")
        assert time.monotonic() - issued_at >= 55, "asked for again before the minute's floor"
        assert "acme: renewalInfo of the certificate in Secret " + f"{namespace}/long-tls asked for again: renewal at" in proxy.log(), proxy.log()[-3000:]
        assert "is due for renewal" in proxy.log() and renewed.metadata.uid == first.metadata.uid

        def reasons() -> set[str]:
            return {e.reason for e in client.EventsV1Api(kube.api).list_namespaced_event(namespace).items if e.regarding and e.regarding.name == "long"}

        wait_until(lambda: {"AcmeIssued", "AcmeRenewed"} <= reasons(), timeout=30, what="the AcmeIssued and AcmeRenewed Events")
        print(f"revoked: asked for again and renewed {time.monotonic() - issued_at:.0f}s after the first certificate (Retry-After 1, a minute's floor)")
    finally:
        faults.stop()
        pebble.stop()
