"""
Client certificates (ingress-nginx annotations.md "Client Certificate Authentication": auth-tls-*) through twistd.

The CAs and client certificates are made by the openssl command line, as an operator makes them; the
clients are Python's ssl module presenting them (or none) with SNI.  Each verify mode is checked with a
valid certificate, an expired one, one from another CA and none, as the annotations page states them
(on: 400 unless valid; optional: no certificate passes; optional_no_ca: an unknown CA passes too, its
result sent upstream), with the ssl-client-* fields the upstream receives.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.support import EchoBackend, Manifests, Twingress, free_port

CA_CONFIG = """
[ca]
default_ca = test
[test]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any
[any]
commonName = supplied
organizationName = optional
"""


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def _authority(directory: Path, name: str) -> None:
    _openssl(directory, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}", "-days", "2")


def _client(directory: Path, name: str, authority: str, subject: str, expired: bool = False) -> None:
    _openssl(directory, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)
    if not expired:
        _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{authority}.crt", "-CAkey", f"{authority}.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{name}.crt")
        return
    (directory / "ca.cnf").write_text(CA_CONFIG)
    (directory / "index.txt").write_text("")
    (directory / "serial").write_text("1000\n")
    _openssl(directory, "ca", "-batch", "-config", "ca.cnf", "-cert", f"{authority}.crt", "-keyfile", f"{authority}.key",
             "-in", f"{name}.csr", "-out", f"{name}.crt", "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext")


class Proxy:
    def __init__(self, twingress: Twingress, https_port: int, certs: Path) -> None:
        self.twingress, self.https_port, self.certs = twingress, https_port, certs

    def get(self, host: str, client: Optional[str], headers: str = "") -> tuple[int, dict[str, str], bytes]:
        """GET / on C{host} over TLS with SNI, presenting C{client}'s certificate (or none)."""
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        if client is not None:
            context.load_cert_chain(self.certs / f"{client}.crt", self.certs / f"{client}.key")
        with socket.create_connection(("127.0.0.1", self.https_port), timeout=10) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n".encode())
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
        return int(lines[0].split()[1]), fields, body

    def seen(self, host: str, client: Optional[str], headers: str = "") -> dict[str, Any]:
        status, _, body = self.get(host, client, headers)
        assert status == 200, body
        return {name.lower(): values[0] for name, values in json.loads(body)["headers"].items()}


def _guarded(name: str, **annotations: str) -> dict[str, Any]:
    return Manifests.nginx_ingress(name, f"{name}.test", "echo", {"auth-tls-secret": "default/ca-a", **annotations})


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    certs = tmp_path_factory.mktemp("client-certs")
    _authority(certs, "ca-a")
    _authority(certs, "ca-b")
    _client(certs, "good", "ca-a", "/O=twingress tests/CN=client-a")
    _client(certs, "other", "ca-a", "/CN=client-b")
    _client(certs, "expired", "ca-a", "/CN=client-a", expired=True)
    _client(certs, "stranger", "ca-b", "/CN=client-a")
    echo = EchoBackend("pod-mtls")
    manifests = Manifests(tmp_path_factory.mktemp("client-certs-manifests"))
    ca_secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "ca-a", "namespace": "default"},
                 "stringData": {"ca.crt": (certs / "ca-a.crt").read_text()}}
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        ca_secret,
        _guarded("on", **{"auth-tls-pass-certificate-to-upstream": "true"}),
        _guarded("optional", **{"auth-tls-verify-client": "optional"}),
        _guarded("noca", **{"auth-tls-verify-client": "optional_no_ca"}),
        _guarded("errorpage", **{"auth-tls-error-page": "https://errors.test/certificate"}),
        _guarded("cn", **{"auth-tls-match-cn": "CN=client-a"}),
        Manifests.nginx_ingress("missing", "missing.test", "echo", {"auth-tls-secret": "default/nowhere"}),
        Manifests.ingress("plain", "plain.test", "echo"),
    )
    https_port = free_port()
    twingress = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    yield Proxy(twingress, https_port, certs)
    twingress.stop()
    echo.stop()


@pytest.mark.parametrize(
    ("host", "client", "status"),
    [
        ("on", "good", 200), ("on", None, 400), ("on", "expired", 400), ("on", "stranger", 400),
        ("optional", "good", 200), ("optional", None, 200), ("optional", "expired", 400), ("optional", "stranger", 400),
        ("noca", "good", 200), ("noca", None, 200), ("noca", "stranger", 200), ("noca", "expired", 400),
    ],
)
def test_each_verify_mode(proxy: Proxy, host: str, client: Optional[str], status: int) -> None:
    """ "auth-tls-verify-client": on (default), optional, optional_no_ca."""
    assert proxy.get(f"{host}.test", client)[0] == status


def test_the_upstream_learns_the_certificate(proxy: Proxy) -> None:
    """ssl-client-verify, -subject-dn, -issuer-dn; ssl-client-cert (URL-encoded PEM) with auth-tls-pass-certificate-to-upstream."""
    seen = proxy.seen("on.test", "good", "ssl-client-verify: SUCCESS-forged\r\nssl-client-subject-dn: CN=admin\r\n")
    assert seen["ssl-client-verify"] == "SUCCESS"
    assert seen["ssl-client-subject-dn"] == "CN=client-a,O=twingress tests" and seen["ssl-client-issuer-dn"] == "CN=ca-a"
    assert seen["ssl-client-cert"].startswith("-----BEGIN%20CERTIFICATE-----%0A")


def test_what_optional_modes_send_upstream(proxy: Proxy) -> None:
    assert proxy.seen("optional.test", None)["ssl-client-verify"] == "NONE"
    assert "ssl-client-cert" not in proxy.seen("optional.test", "good")  # not asked for
    assert proxy.seen("noca.test", "stranger")["ssl-client-verify"].startswith("FAILED:")


def test_the_error_page_gets_the_refused(proxy: Proxy) -> None:
    """ "auth-tls-error-page": the refused are redirected there (nginx's error_page 495 496 = URL)."""
    status, fields, _ = proxy.get("errorpage.test", None)
    assert (status, fields["location"]) == (302, "https://errors.test/certificate")


def test_match_cn_answers_403_to_other_subjects(proxy: Proxy) -> None:
    """ "auth-tls-match-cn": a subject that does not match is a 403."""
    assert proxy.get("cn.test", "good")[0] == 200
    assert proxy.get("cn.test", "other")[0] == 403


def test_an_unreadable_ca_secret_closes_the_host(proxy: Proxy) -> None:
    """Fail closed (ingress-nginx's AuthTLSError: the server answers 403), with a problem saying why."""
    assert proxy.get("missing.test", "good")[0] == 403
    problems = {(p["object"], p["reason"]) for p in proxy.twingress.routes()["problems"]}
    assert ("Ingress/default/missing", "InvalidClientAuth") in problems


def test_hosts_without_it_ask_nothing(proxy: Proxy) -> None:
    seen = proxy.seen("plain.test", "good", "ssl-client-verify: SUCCESS\r\n")
    assert seen["ssl-client-verify"] == "SUCCESS"  # not a guarded host: the client's field is its own business
