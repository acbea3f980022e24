"""
TLS-ALPN-01 (RFC 8737) without a cluster (--manifests, --acme-storage, --acme-challenge tls-alpn-01)
against the real Pebble (tests/acme_support.py), and the HTTPS listener's answers to acme-tls/1 with
real clients, --workers 2 throughout.

Pebble's C{tlsPort} is twingress's --https listener and twingress has no --http listener at all, so
the certificate can only come by TLS-ALPN-01; its chain is verified against Pebble's root and a TLS
client then gets it by SNI, while h2 clients of the same host, handshaking all through the order,
never see a challenge certificate.  With a challenge pending (its ConfigMap written as the issuer
writes it), every connection offering acme-tls/1 for that name gets the challenge certificate, an
openssl s_client offering acme-tls/1 for another name fails its handshake, and curl over h2 gets
the host's own certificate and its answer.
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

import pytest
from cryptography import x509

from ingress.acme.tlsalpn import ACME_IDENTIFIER, acme_identifier, challenge_certificate
from ingress.routing.tls_alpn_challenges import TLS_ALPN_CHALLENGES
from tests.acme_support import Pebble
from tests.kube.twingress import wait_until
from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.test_acme import _acme_args, _acme_ingress, _issued, _served_certificate
from tests.support import EchoBackend, Manifests, Twingress, free_port, refusing_address

KEY_AUTHORIZATION = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI"


def _handshake(port: int, host: str, protocols: list[str]) -> tuple[Optional[x509.Certificate], Optional[str]]:
    """The certificate and the protocol a handshake offering C{protocols} for C{host} gets (unverified: the test looks)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(protocols)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        der, negotiated = tls.getpeercert(binary_form=True), tls.selected_alpn_protocol()
    return (x509.load_der_x509_certificate(der) if der else None), negotiated


def _answering_process(port: int, host: str) -> tuple[int, Optional[x509.Certificate], Optional[str]]:
    """Which process (pid, by ss) holds the server side of an acme-tls/1 handshake for C{host}, and what it showed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["acme-tls/1"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        der, negotiated = tls.getpeercert(binary_form=True), tls.selected_alpn_protocol()
        mine = tls.getsockname()[1]  # the server waits for this side's close_notify: its socket is still there
        found = subprocess.run(["ss", "-Htnp", "state", "all", f"( sport = :{port} and dport = :{mine} )"], capture_output=True, text=True, timeout=10).stdout
    pid = re.search(r"pid=(\d+)", found)
    assert pid is not None, found
    return int(pid.group(1)), (x509.load_der_x509_certificate(der) if der else None), negotiated


def _is_challenge(certificate: Optional[x509.Certificate]) -> bool:
    return certificate is not None and any(extension.oid == ACME_IDENTIFIER for extension in certificate.extensions)


class _H2Clients:
    """h2 handshakes to C{host}, one after the other in a thread, until stopped: what each got."""

    def __init__(self, port: int, host: str, pending: Path) -> None:
        self.port, self.host, self.pending = port, host, pending
        self.got: list[tuple[bool, Optional[str]]] = []  # (challenge certificate?, negotiated protocol)
        self.while_pending = 0  # handshakes begun and ended while the challenge's ConfigMap was there
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                before = self.pending.exists()
                certificate, negotiated = _handshake(self.port, self.host, ["h2", "http/1.1"])
                self.got.append((_is_challenge(certificate), negotiated))
                self.while_pending += before and self.pending.exists()
            except (OSError, ssl.SSLError) as error:
                self.errors.append(str(error))
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    """Pebble's CA and ports, ready for twingress's command line; the test starts it, it is stopped at the end."""
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


def test_an_annotated_ingress_gets_its_certificate_by_tls_alpn01_with_only_https_listening(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    storage = tmp_path / "acme"
    https_port = free_port()
    manifests.write("app.yaml", *manifests.service("app", [echo_pair[0].address]))
    proxy = twingress(
        *_acme_args(pebble.directory, pebble.ca_file, storage), "--acme-challenge", "tls-alpn-01",
        "--https", f"tcp:{https_port}:interface=127.0.0.1", "--http", "", "--workers", "2",
    )
    pebble.start(free_port(), https_port)  # its httpPort: nothing listens there, only TLS-ALPN-01 can pass
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    h2 = _H2Clients(https_port, "app.example.com", storage / "manifests" / "acme-tls-alpn-01.yaml")
    wait_until(lambda: len(h2.got) >= 3, timeout=20, what="h2 handshakes before the order")
    started = time.monotonic()
    manifests.write("app-ingress.yaml", _acme_ingress("app", ["app.example.com"], "app"))
    try:
        found = _issued(proxy, pebble)
        certificate = wait_until(lambda: _served_certificate(https_port, "app.example.com", root), timeout=20, what="the new certificate served by SNI")
    finally:
        h2.stop()
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["app.example.com"]
    assert not _is_challenge(certificate)
    assert f"ordering a certificate for app.example.com from {pebble.directory} by tls-alpn-01" in proxy.log()
    assert "set VALID by completed challenge" in pebble.log(), pebble.log()[-3000:]
    assert not (storage / "manifests" / "acme-tls-alpn-01.yaml").exists(), "the challenge certificates are withdrawn after the order"
    assert h2.got and not h2.errors, h2.errors[:3]
    assert {negotiated for _, negotiated in h2.got} == {"h2"}
    assert not any(challenge for challenge, _ in h2.got), "an h2 client got a challenge certificate"
    assert h2.while_pending > 0, "no h2 handshake while the challenge was pending"
    print(f"TLS-ALPN-01: {time.monotonic() - started:.1f}s from the Ingress written to served by SNI; the order: {found.group(3)}s, "
          f"{found.group(4)} requests to Pebble; {len(h2.got)} h2 handshakes meanwhile ({h2.while_pending} while the challenge was pending), none with the challenge certificate")


def _pending(host: str, pem: bytes) -> dict:
    """The challenge ConfigMap as the issuer writes it (ingress/acme/tlsalpn.py)."""
    namespace, name = TLS_ALPN_CHALLENGES
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace, "name": name}, "data": {host: pem.decode()}}


def test_a_pending_challenge_is_answered_by_every_worker_and_nothing_else_is_under_acme_tls(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    https_port = free_port()
    authority = CertificateAuthority("the host's own")
    ca_file = authority.write(tmp_path / "ca.pem")
    host, port = refusing_address()  # no order is placed here: the ConfigMap stands for a pending one
    manifests.write(
        "app.yaml", *manifests.service("app", [echo_pair[0].address]), tls_secret("app-tls", authority.issue(["pending.example.com"])),
        Manifests.ingress("app", "pending.example.com", "app", tls=[{"hosts": ["pending.example.com"], "secretName": "app-tls"}]),
    )
    proxy = twingress(
        *_acme_args(f"https://{host}:{port}/dir", ca_file, tmp_path / "acme"), "--acme-challenge", "tls-alpn-01",
        "--https", f"tcp:{https_port}:interface=127.0.0.1", "--workers", "2",
    )
    pem = challenge_certificate("pending.example.com", KEY_AUTHORIZATION)
    manifests.write("challenge.yaml", _pending("pending.example.com", pem))
    wait_until(lambda: _handshake(https_port, "pending.example.com", ["acme-tls/1"])[1] == "acme-tls/1", timeout=20, what="the challenge answered")
    assert proxy.routes()["acmeTlsAlpn01"] == ["pending.example.com"]
    answered: set[int] = set()
    for _ in range(60):  # new connections until both workers answered (at most 60): each with the challenge certificate
        pid, certificate, negotiated = _answering_process(https_port, "pending.example.com")
        assert certificate is not None and negotiated == "acme-tls/1" and certificate == x509.load_pem_x509_certificate(pem)
        extension = certificate.extensions.get_extension_for_oid(ACME_IDENTIFIER)
        assert extension.critical and extension.value.value == acme_identifier(KEY_AUTHORIZATION)  # type: ignore[attr-defined]
        answered.add(pid)
        if len(answered) == 2:
            break
    assert len(answered) == 2 and proxy.process.pid not in answered, answered  # the two workers, not the primary

    other = _s_client(https_port, "other.example.com", "acme-tls/1")
    assert other.returncode != 0, other.stdout
    assert "no peer certificate available" in other.stdout and "BEGIN CERTIFICATE" not in other.stdout, other.stdout
    assert "no application protocol" in other.stderr, other.stderr

    h2 = subprocess.run(
        ["curl", "-sS", "--http2", "--cacert", str(ca_file), "--resolve", f"pending.example.com:{https_port}:127.0.0.1",
         "-o", "/dev/null", "-w", "%{http_version} %{http_code}", f"https://pending.example.com:{https_port}/"],
        capture_output=True, text=True, timeout=30,
    )
    assert h2.stdout == "2 200", (h2.stdout, h2.stderr)  # verified against the host's own CA: not the challenge certificate
    certificate, negotiated = _handshake(https_port, "pending.example.com", ["h2", "http/1.1"])
    assert negotiated == "h2" and not _is_challenge(certificate)

    manifests.remove("challenge.yaml")  # the order is over: no worker answers acme-tls/1 for the name any more
    wait_until(lambda: _s_client(https_port, "pending.example.com", "acme-tls/1").returncode != 0, timeout=20, what="the challenge withdrawn")
    for _ in range(8):
        assert "no application protocol" in _s_client(https_port, "pending.example.com", "acme-tls/1").stderr
    assert "Traceback" not in proxy.log() and "Unhandled" not in proxy.log(), proxy.log()[-3000:]
    assert "acmeTlsAlpn01" not in proxy.routes()


def _s_client(port: int, name: str, alpn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", name, "-alpn", alpn],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )
