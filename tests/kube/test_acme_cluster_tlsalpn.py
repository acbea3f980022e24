"""
TLS-ALPN-01 in a cluster (issue 64), against the real apiserver and Pebble: the leader's challenge
certificates reach every replica and every worker through the Secret twingress-acme-tls-alpn.

Two twingress replicas (two processes, two workers each) listen on the same --https port of two
pod-like addresses, with no --http listener at all, so only TLS-ALPN-01 can pass; Pebble's
C{tlsPort} is that port and its DNS answers every name with the NON-leader's address, so the
validation handshake reaches the replica that placed no order.  A third Pod says ready at an address
where nothing listens (a node whose twingress died before its kubelet noticed): while the first
order's self-check waits on it, both workers of each replica answer acme-tls/1 for the host with the
challenge certificate (which process answered: ss); then that order fails its self-check with an Event naming that node and Pebble is asked nothing; once the Pod is not ready,
the retry's self-check handshakes with both replicas (the leader's log names both), Pebble
validates, the certificate is in the Secret and served by SNI by both replicas, and the challenge
Secret is gone.  All through the order, h2 handshakes to another host and to the ordered host on both
replicas (offering h2, or no ALPN at all) never see a challenge certificate.  And with --watch-namespace leaving the controller's
namespace out, the challenge Secret is watched there by name: written as the leader writes it, it is
answered under acme-tls/1; deleted, it is not any more.
"""

from __future__ import annotations

import base64
import re
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import pytest
from cryptography import x509
from kubernetes.client.rest import ApiException

from ingress.acme.tlsalpn import ACME_IDENTIFIER, acme_identifier, challenge_certificate
from ingress.acme.tlsalpn_cluster import TLS_ALPN_SECRET, secret_body
from tests.acme_support import Pebble
from tests.kube.api import Kube
from tests.kube.controller_support import controller_args, writes
from tests.kube.test_acme_cluster import ORDER_TIMEOUT, acme_ingress, event, issued_line, node, pebble, ready_pod, secret_or_none, served_certificate
from tests.kube.test_leader import wait_leader
from tests.kube.twingress import KubeTwingress, next_pod_ip, wait_until
from tests.proxy.certs import CertificateAuthority
from tests.support import free_port, refusing_address

pytestmark = pytest.mark.kube
__all__ = ["node", "pebble"]  # the fixtures, used by name


def _handshake(address: str, port: int, host: str, protocols: list[str]) -> tuple[Optional[x509.Certificate], Optional[str]]:
    """What a handshake offering C{protocols} for C{host} gets: the certificate (unverified: the test looks) and the protocol."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(protocols)
    with socket.create_connection((address, port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        der, negotiated = tls.getpeercert(binary_form=True), tls.selected_alpn_protocol()
    return (x509.load_der_x509_certificate(der) if der else None), negotiated


def _answering_worker(address: str, port: int, host: str) -> tuple[int, Optional[x509.Certificate], Optional[str]]:
    """Which process (pid, by ss) holds the server side of an acme-tls/1 handshake for C{host} at C{address}, and what it showed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["acme-tls/1"])
    with socket.create_connection((address, port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        der, negotiated = tls.getpeercert(binary_form=True), tls.selected_alpn_protocol()
        mine = tls.getsockname()[1]  # the server waits for this side's close_notify: its socket is still there
        found = subprocess.run(["ss", "-Htnp", "state", "all", f"( sport = :{port} and dport = :{mine} )"], capture_output=True, text=True, timeout=10).stdout
    pid = re.search(r"pid=(\d+)", found)
    assert pid is not None, found
    return int(pid.group(1)), (x509.load_der_x509_certificate(der) if der else None), negotiated


def _is_challenge(certificate: Optional[x509.Certificate]) -> bool:
    return certificate is not None and any(extension.oid == ACME_IDENTIFIER for extension in certificate.extensions)


class _H2Clients:
    """h2 and plain HTTPS (no ALPN) handshakes for C{hosts} to each address in turn, in a thread, until stopped; each noted with whether the challenge Secret was there."""

    def __init__(self, kube: Kube, namespace: str, addresses: list[str], port: int, hosts: list[str]) -> None:
        self.kube, self.namespace, self.addresses, self.port, self.hosts = kube, namespace, addresses, port, hosts
        self.challenges = 0  # handshakes shown a challenge certificate
        self.protocols: set[Optional[str]] = set()
        self.done = 0
        self.while_pending = 0  # begun and ended while the challenge Secret existed
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _pending(self) -> bool:
        return secret_or_none(self.kube, self.namespace, TLS_ALPN_SECRET) is not None

    def _run(self) -> None:
        while not self._stop.is_set():
            before = self._pending()
            for address in self.addresses:
                for host, protocols in ((host, protocols) for host in self.hosts for protocols in (["h2", "http/1.1"], [])):
                    try:
                        certificate, negotiated = _handshake(address, self.port, host, protocols)
                    except (OSError, ssl.SSLError) as error:
                        self.errors.append(f"{address} {host}: {error}")
                        continue
                    self.done += 1
                    self.challenges += _is_challenge(certificate)
                    self.protocols.add(negotiated)
            self.while_pending += before and self._pending()
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_tls_alpn01_in_a_cluster_every_replica_answers_the_leaders_challenge(
    kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress], pebble: Pebble, node: str, tmp_path: Path,
) -> None:
    try:
        kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})  # the Pods need it
    except ApiException as error:
        if error.status != 409:
            raise
    kube.create_service(namespace, "app")
    https_port = free_port()
    addresses = [next_pod_ip(), next_pod_ip()]
    dead = next_pod_ip()  # a Pod that says ready where no twingress listens
    acme = ("--acme-directory", pebble.directory, "--acme-ca-file", str(pebble.ca_file), "--acme-agree-tos", "true",
            "--acme-email", "ops@example.com", "--acme-challenge", "tls-alpn-01")

    def replica(address: str) -> KubeTwingress:
        return twingress(*controller_args(namespace, *acme, "--http", "", "--https", f"tcp:{https_port}:interface={address}", "--workers", "2"))

    replicas = [replica(address) for address in addresses]
    address_of = dict(zip((id(r) for r in replicas), addresses, strict=True))
    for index, address in enumerate([*addresses, dead]):
        ready_pod(kube, namespace, f"twingress-{index}", node, address)
    leader = wait_leader(kube, namespace, replicas)
    follower = next(r for r in replicas if r is not leader)
    pebble.start(free_port(), https_port, address=address_of[id(follower)])  # its httpPort: nothing listens there
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    kube.networking.create_namespaced_ingress(namespace, Kube.ingress_body(namespace, "other", "other.example.com", "app"))
    wait_until(lambda: all(r.has_host("other.example.com") for r in replicas), what="the other host on both replicas")
    h2 = _H2Clients(kube, namespace, addresses, https_port, ["other.example.com", "site.example.com"])
    try:
        wait_until(lambda: h2.done >= 8, timeout=30, what="h2 handshakes before the order")
        started, answered_before = time.monotonic(), pebble.log().count("POST /chalZ/")
        kube.networking.create_namespaced_ingress(namespace, acme_ingress(namespace, "site", ["site.example.com"], "site-tls"))

        # while the first attempt's self-check waits on the dead node: both workers of each replica show the challenge certificate
        wait_until(lambda: secret_or_none(kube, namespace, TLS_ALPN_SECRET), timeout=ORDER_TIMEOUT, what="the challenge Secret")
        for each in replicas:
            answered: set[int] = set()
            for _ in range(60):  # new connections until both workers answered (at most 60)
                pid, certificate, negotiated = wait_until(lambda each=each: _answering_worker(address_of[id(each)], https_port, "site.example.com"), timeout=10, what="acme-tls/1")
                assert _is_challenge(certificate) and negotiated == "acme-tls/1", (certificate, negotiated)
                answered.add(pid)
                if len(answered) == 2:
                    break
            assert len(answered) == 2 and each.process.pid not in answered, answered  # the replica's two workers, not its primary

        # the dead node: the self-check fails naming it, and Pebble is asked to validate nothing
        failed = event(kube, namespace, "site", "AcmeOrderFailed", timeout=ORDER_TIMEOUT)
        assert f"{dead}:{https_port}" in failed.note and "TLS-ALPN-01" in failed.note, failed.note
        assert all(address not in failed.note for address in addresses), failed.note
        assert pebble.log().count("POST /chalZ/") == answered_before, "a challenge was answered: Pebble spent a validation"
        ready_pod(kube, namespace, "twingress-2", node, dead, ready=False)  # the kubelet's word, at last

        line = issued_line(leader, pebble, "site.example.com")  # the retry at the end of the failure's backoff
        first_certificate = time.monotonic() - started
        checked = [entry for entry in leader.log().splitlines() if "the TLS-ALPN-01 challenge of site.example.com" in entry and "answered by every ready node" in entry]
        assert checked, leader.log()[-4000:]
        assert all(f"{address}:{https_port}" in checked[-1] for address in addresses) and dead not in checked[-1], checked[-1]
        assert "set VALID by completed challenge" in pebble.log(), pebble.log()[-3000:]
        for each in replicas:  # both replicas serve the new certificate by SNI, its chain verified against Pebble's root
            served = wait_until(lambda each=each: served_certificate(address_of[id(each)], https_port, "site.example.com", root), timeout=30, what="the certificate by SNI")
            assert not _is_challenge(served)
    finally:
        h2.stop()
    secret = kube.core.read_namespaced_secret("site-tls", namespace)
    assert secret.type == "kubernetes.io/tls" and secret.metadata.labels == {"app.kubernetes.io/managed-by": "twingress"}
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == ["site.example.com"]
    assert served.serial_number == leaf.serial_number
    assert secret_or_none(kube, namespace, TLS_ALPN_SECRET) is None, "the challenge Secret is deleted when the order ends"
    for each in replicas:
        wait_until(lambda each=each: "acmeTlsAlpn01" not in each.routes(), timeout=30, what="the challenge certificates out of the table")
    assert "ordering a certificate" not in follower.log() and writes(follower) == 0
    assert h2.done and h2.while_pending > 0, (h2.done, h2.while_pending, h2.errors[:3])
    assert h2.challenges == 0, f"{h2.challenges} h2 or no-ALPN handshakes got a challenge certificate"
    assert h2.protocols == {"h2", None} and not h2.errors, (h2.protocols, h2.errors[:3])
    print(f"TLS-ALPN-01 in a cluster: {first_certificate:.1f}s from the Ingress written to issued (with one failed self-check and its 30 s backoff);"
          f" the issuing order {line.group(3)}s, {line.group(4)} requests; {h2.done} h2 and no-ALPN handshakes meanwhile"
          f" ({h2.while_pending} rounds while the challenge was pending), none with it")


KEY_AUTHORIZATION = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI"


def test_outside_the_watched_namespace_the_challenge_secret_is_watched_by_name(
    kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress], tmp_path: Path,
) -> None:
    controller = f"ctl-{namespace}"[:63]
    kube.create_namespace(controller)
    try:
        host, port = refusing_address()  # no order is placed: the test writes the Secret the leader would
        ca = tmp_path / "ca.pem"
        ca.write_bytes(CertificateAuthority("unused").pem())
        https_port = free_port()
        replica = twingress(
            "--watch-namespace", namespace, "--leader-election-namespace", controller, "--leader-election-id", f"lease-{namespace}"[:63],
            "--acme-directory", f"https://{host}:{port}/dir", "--acme-ca-file", str(ca), "--acme-agree-tos", "true", "--acme-challenge", "tls-alpn-01",
            "--http", "", "--https", f"tcp:{https_port}:interface=127.0.0.1",
        )
        assert f"Secret {controller}/{TLS_ALPN_SECRET}" in replica.log(), replica.log()[-3000:]  # the informer named in "watching ..."
        pem = challenge_certificate("pending.example.com", KEY_AUTHORIZATION)
        kube.core.create_namespaced_secret(controller, secret_body(controller, {"pending.example.com": pem}))

        def answered() -> Optional[x509.Certificate]:
            found, negotiated = _handshake("127.0.0.1", https_port, "pending.example.com", ["acme-tls/1"])
            return found if negotiated == "acme-tls/1" else None

        certificate = wait_until(answered, timeout=30, what="acme-tls/1 answered from the Secret")
        assert certificate == x509.load_pem_x509_certificate(pem)
        assert certificate is not None and certificate.extensions.get_extension_for_oid(ACME_IDENTIFIER).value.value == acme_identifier(KEY_AUTHORIZATION)  # type: ignore[attr-defined]
        assert replica.routes()["acmeTlsAlpn01"] == ["pending.example.com"]
        kube.core.delete_namespaced_secret(TLS_ALPN_SECRET, controller)
        wait_until(lambda: "acmeTlsAlpn01" not in replica.routes(), timeout=30, what="the challenge withdrawn")
        with pytest.raises(ssl.SSLError, match="no application protocol"):
            _handshake("127.0.0.1", https_port, "pending.example.com", ["acme-tls/1"])
    finally:
        kube.delete_namespace(controller)
