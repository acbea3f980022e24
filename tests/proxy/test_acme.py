"""
The ACME issuer without a cluster (--manifests, --acme-storage) against the real Pebble (tests/acme_support.py).

An Ingress annotated C{twingress.io/acme: "true"} gets its certificate from Pebble by HTTP-01 on
twingress's --http listener (Pebble's C{httpPort}), with two workers; a TLS client then verifies the
chain against Pebble's root (from its management API) and gets the certificate by SNI, without a
restart.  The account key stays in the storage directory and a restarted process uses it again.
Bad input (an annotation without spec.tls, a wildcard host, an unreachable directory, a garbage
--acme-ca-file) is one clear line, and the rest of the table keeps serving.
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.acme_support import Pebble
from tests.kube.twingress import wait_until
from tests.proxy.certs import CertificateAuthority
from tests.support import TWISTD, EchoBackend, Manifests, Twingress, free_port, http_status, refusing_address

ISSUED = re.compile(r"acme: certificate for (.+?) issued into Secret (\S+) in ([\d.]+)s, (\d+) requests to the ACME server")


def _acme_ingress(name: str, hosts: list[str], service: str, tls: bool = True) -> dict:
    ingress = Manifests.ingress(name, hosts[0], service)
    ingress["metadata"]["annotations"] = {"twingress.io/acme": "true"}
    if tls:
        ingress["spec"]["tls"] = [{"hosts": hosts, "secretName": f"{name}-tls"}]
    return ingress


def _acme_args(directory: str, ca_file: Path, storage: Path) -> list[str]:
    return ["--acme-directory", directory, "--acme-ca-file", str(ca_file), "--acme-agree-tos", "true", "--acme-storage", str(storage), "--acme-email", "ops@example.com"]


def _issued(proxy: Twingress, pebble: Pebble) -> re.Match[str]:
    """The issuer's line for the certificate, within a minute (the logs of both said on failure)."""
    try:
        found: re.Match[str] = wait_until(lambda: ISSUED.search(proxy.log()), timeout=60, what="the certificate issued")
    except AssertionError as error:
        raise AssertionError(f"{error}\ntwingress:\n{proxy.log()[-4000:]}\npebble:\n{pebble.log()[-3000:]}") from None
    return found


def _served_certificate(port: int, host: str, root: Path) -> x509.Certificate:
    """The certificate twingress's TLS listener gives C{host} by SNI, its chain verified against C{root}."""
    context = ssl.create_default_context(cafile=str(root))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    """Pebble's CA and ports, ready for twingress's command line; the test starts it (L{Pebble.start}), it is stopped at the end."""
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


def test_an_annotated_ingress_gets_its_certificate_by_http01_and_serves_it_by_sni(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    storage = tmp_path / "acme"
    https_port = free_port()
    manifests.write("app.yaml", *manifests.service("app", [echo_pair[0].address]))
    proxy = twingress(*_acme_args(pebble.directory, pebble.ca_file, storage), "--https", f"tcp:{https_port}:interface=127.0.0.1", "--workers", "2")
    pebble.start(proxy.http_port, https_port)
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    started = time.monotonic()
    manifests.write("app-ingress.yaml", _acme_ingress("app", ["app.example.com", "www.app.example.com"], "app"))
    found = _issued(proxy, pebble)
    certificate = wait_until(lambda: _served_certificate(https_port, "www.app.example.com", root), timeout=20, what="the new certificate served by SNI")
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert sorted(names) == ["app.example.com", "www.app.example.com"]
    assert (storage / "manifests" / "secret-default.app-tls.yaml").exists()
    print(f"first certificate: {time.monotonic() - started:.1f}s from the Ingress written to served by SNI; the order: {found.group(3)}s, {found.group(4)} requests to Pebble")
    assert not (storage / "manifests" / "acme-challenges.yaml").exists(), "the tokens are withdrawn after the order"
    accounts = sorted(storage.glob("account-*.pem"))
    assert len(accounts) == 1
    key = accounts[0].read_bytes()

    proxy.stop()  # a restart keeps the account and the certificate: a second host orders with the same key
    stale = storage / "manifests" / "acme-challenges.yaml"  # as a killed process leaves it, mid-order
    stale.write_text("kind: ConfigMap\napiVersion: v1\nmetadata: {namespace: twingress-acme, name: acme-challenges}\ndata: {responder: '127.0.0.1:9', stale: app.example.com}\n")
    again = twingress(  # the same --http port: it is Pebble's httpPort
        *_acme_args(pebble.directory, pebble.ca_file, storage), "--https", f"tcp:{https_port}:interface=127.0.0.1", "--http", f"tcp:{proxy.http_port}:interface=127.0.0.1"
    )
    assert _served_certificate(https_port, "app.example.com", root).serial_number == certificate.serial_number  # from storage, nothing ordered
    assert not stale.exists(), "the stale tokens are removed at start"
    manifests.write("other-ingress.yaml", _acme_ingress("other", ["other.example.com"], "app"))
    second = _issued(again, pebble)
    assert second.group(1) == "other.example.com"
    assert sorted(storage.glob("account-*.pem")) == accounts and accounts[0].read_bytes() == key
    assert again.log().count("ordering a certificate") == 1, again.log()
    print(f"after a restart: {second.group(3)}s, {second.group(4)} requests to Pebble (the account found again by its key)")



@pytest.mark.parametrize(
    ("case", "mentions"),
    [
        ("garbage-ca-file", ["--acme-ca-file", "holds no PEM certificate"]),
        ("missing-ca-file", ["--acme-ca-file", "No such file"]),
        ("no-terms", ["--acme-agree-tos true"]),
        ("dns-01", ["--acme-challenge 'dns-01'", "http-01 or tls-alpn-01", "DNS-01 is out of scope"]),
        ("tls-alpn-01-no-https", ["--acme-challenge tls-alpn-01 needs the --https listener"]),
        ("tls-alpn-01-proxy-protocol", ["--acme-challenge tls-alpn-01 with a PROXY-protocol --https listener"]),
        ("no-storage", ["--acme-storage"]),
        ("not-a-url", ["--acme-directory", "not an http(s) URL"]),
        ("no-http", ["needs the --http listener"]),
        ("proxy-protocol", ["PROXY-protocol --http listener"]),
        ("eab-kid-only", ["--acme-eab-kid needs --acme-eab-hmac-key-file"]),
        ("eab-key-only", ["--acme-eab-hmac-key-file needs --acme-eab-kid"]),
        ("eab-garbage-key", ["--acme-eab-hmac-key-file", "holds no base64url HMAC key"]),
        ("eab-missing-key", ["--acme-eab-hmac-key-file", "No such file"]),
    ],
)
def test_a_bad_acme_option_is_one_line_and_exit_1(tmp_path: Path, case: str, mentions: list[str]) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    args = ["--acme-directory", "https://127.0.0.1:1/dir", "--acme-agree-tos", "true", "--acme-storage", str(tmp_path / "acme")]
    extra = {
        "garbage-ca-file": ["--acme-ca-file", str(garbage)],
        "missing-ca-file": ["--acme-ca-file", str(tmp_path / "missing.pem")],
        "no-terms": ["--acme-agree-tos", "false"],
        "dns-01": ["--acme-challenge", "dns-01"],
        "tls-alpn-01-no-https": ["--acme-challenge", "tls-alpn-01", "--https", ""],
        "tls-alpn-01-proxy-protocol": ["--acme-challenge", "tls-alpn-01", "--https", f"haproxy:tcp:{free_port()}:interface=127.0.0.1"],
        "no-storage": ["--acme-storage", ""],
        "not-a-url": ["--acme-directory", "acme.example.com"],
        "no-http": ["--http", ""],
        "proxy-protocol": ["--http", f"haproxy:tcp:{free_port()}:interface=127.0.0.1"],
        "eab-kid-only": ["--acme-eab-kid", "kid-1"],
        "eab-key-only": ["--acme-eab-hmac-key-file", str(garbage)],
        "eab-garbage-key": ["--acme-eab-kid", "kid-1", "--acme-eab-hmac-key-file", str(garbage)],
        "eab-missing-key": ["--acme-eab-kid", "kid-1", "--acme-eab-hmac-key-file", str(tmp_path / "missing.key")],
    }[case]
    command = TWISTD + ["--pidfile=", "--logfile=-", "-n", "ingress", "--manifests", str(manifests), "--admin", "", "--https", f"tcp:{free_port()}", *args, *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("twistd ingress: "), result.stderr
    assert all(mention in lines[0] for mention in mentions), (lines[0], mentions)


def test_what_cannot_be_ordered_is_one_line_each_and_the_rest_of_the_table_serves(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    host, port = refusing_address()
    ca = tmp_path / "ca.pem"
    ca.write_bytes(CertificateAuthority("unused").pem())
    proxy = twingress(*_acme_args(f"https://{host}:{port}/dir", ca, tmp_path / "acme"))
    manifests.write(
        "all.yaml",
        *manifests.service("app", [echo_pair[0].address]),
        Manifests.ingress("plain", "plain.example.com", "app"),
        _acme_ingress("no-tls", ["no-tls.example.com"], "app", tls=False),
        _acme_ingress("wildcard", ["*.wild.example.com"], "app"),
        _acme_ingress("unreachable", ["down.example.com"], "app"),
        _acme_ingress("taken", ["taken.example.com"], "app"),
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"namespace": "default", "name": "taken-tls"},
         "stringData": {"tls.crt": "someone else's", "tls.key": "someone else's"}},
        {**_acme_ingress("cert-manager", ["cm.example.com"], "app"), "metadata": {
            "namespace": "default", "name": "cert-manager", "annotations": {"twingress.io/acme": "true", "cert-manager.io/cluster-issuer": "letsencrypt"}}},
        {**_acme_ingress("other-class", ["nginx.example.com"], "app"), "spec": {**_acme_ingress("x", ["nginx.example.com"], "app")["spec"], "ingressClassName": "nginx"}},
    )
    wait_until(lambda: "ordering a certificate for down.example.com failed" in proxy.log(), timeout=30, what="the failed order")
    assert http_status(proxy.http_port, "plain.example.com") == 200
    log = proxy.log()
    expected = [
        "Ingress default/no-tls: twingress.io/acme needs spec.tls",
        "Ingress default/wildcard: *.wild.example.com: a wildcard needs the DNS-01 challenge",
        "acme: ordering a certificate for down.example.com failed: ",
        "Ingress default/taken: Secret default/taken-tls exists and is not twingress's (no app.kubernetes.io/managed-by=twingress label); not overwritten",
        "Ingress default/cert-manager: it carries cert-manager.io/cluster-issuer: cert-manager's, not ordered here",
    ]
    for line in expected:
        assert log.count(line) == 1, (line, log[-3000:])
    assert "Traceback" not in log
    assert "ordering a certificate for" in log and all(f"ordering a certificate for {host}" not in log for host in ("taken.", "cm.", "nginx.")), log[-3000:]
    assert not (tmp_path / "acme" / "manifests" / "secret-default.taken-tls.yaml").exists()
    failed = next(line for line in log.splitlines() if "down.example.com failed" in line)
    assert "trying again in 30s" in failed and "Connection refused" in failed, failed
    manifests.write("later.yaml", Manifests.ingress("later", "later.example.com", "app"))  # a new state: the reports stay once, the failure waits its backoff
    wait_until(lambda: http_status(proxy.http_port, "later.example.com") == 200, timeout=10, what="the next table")
    assert all(proxy.log().count(line) == 1 for line in expected), proxy.log()[-3000:]
