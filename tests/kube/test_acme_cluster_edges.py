"""
ACME bad input in a cluster (issue 64), against the real apiserver: an --acme-directory that refuses
connections is a Warning Event with the socket's error on the Ingress that asked, a log line and
C{twingress_acme_orders_total{result="failed"}}, not a crash; the replica keeps serving every other host.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kube.api import Kube
from tests.kube.controller_support import controller_args
from tests.kube.test_acme_cluster import acme_ingress, event
from tests.kube.twingress import KubeTwingress, host_for
from tests.proxy.certs import CertificateAuthority
from tests.support import refusing_address

pytestmark = pytest.mark.kube


def test_an_unreachable_directory_is_an_event_and_the_rest_of_the_table_serves(
    kube: Kube, namespace: str, echo: Callable[..., object], twingress: Callable[..., KubeTwingress], tmp_path: Path,
) -> None:
    host, port = refusing_address()
    directory = f"https://{host}:{port}/dir"
    ca = tmp_path / "ca.pem"
    ca.write_bytes(CertificateAuthority("unused").pem())
    kube.backend(namespace, "app", [echo("pod-a")])
    plain = host_for(namespace, "plain")
    kube.networking.create_namespaced_ingress(namespace, Kube.ingress_body(namespace, "plain", plain, "app"))
    replica = twingress(*controller_args(namespace, "--acme-directory", directory, "--acme-ca-file", str(ca), "--acme-agree-tos", "true"))
    kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "site", ["site.example.com"], "site-tls"))

    failed = event(kube, namespace, "site", "AcmeOrderFailed", timeout=60)
    assert failed.type == "Warning" and f"the ACME directory {directory} is unreachable: Connection refused" in failed.note, failed.note
    assert replica.wait_status(plain, 200).backend == "pod-a"
    assert replica.has_host("site.example.com")  # the annotated Ingress is served as any other, on the default certificate
    assert replica.metric("twingress_acme_orders_total", result="failed") >= 1
    log = replica.log()
    assert f"ordering a certificate for site.example.com failed: the ACME directory {directory} is unreachable: Connection refused" in log
    assert "Traceback" not in log and replica.process.poll() is None
