"""
What an ACME issue shows (issue 64), without a cluster, against the real Pebble, with two workers: the
scrape carries C{twingress_certificate_expiry_timestamp_seconds{namespace,secret,issuer}} for every
certificate the table serves (the issued one with its ACME directory, a Secret of someone else's with
C{issuer="secret"}) and C{twingress_acme_orders_total{result}}; /debug/routes lists the certificates'
Secrets with their issuer, expiry and hosts (read from the table: the primary shows them with workers).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from tests.acme_support import Pebble
from tests.kube.twingress import wait_until
from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.test_acme import _acme_args, _acme_ingress, _issued, _served_certificate
from tests.support import EchoBackend, Manifests, Twingress, free_port

EXPIRY = "twingress_certificate_expiry_timestamp_seconds"


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


def test_the_scrape_and_debug_routes_show_each_certificate_with_its_issuer_and_expiry(
    tmp_path: Path, manifests: Manifests, twingress: Callable[..., Twingress], pebble: Pebble, echo_pair: tuple[EchoBackend, EchoBackend],
) -> None:
    storage, https_port = tmp_path / "acme", free_port()
    theirs = CertificateAuthority("someone else's").issue(["plain.example.com"])
    plain = Manifests.ingress("plain", "plain.example.com", "app", tls=[{"hosts": ["plain.example.com"], "secretName": "plain-tls"}])
    manifests.write("app.yaml", *manifests.service("app", [echo_pair[0].address]), tls_secret("plain-tls", theirs), plain)
    proxy = twingress(*_acme_args(pebble.directory, pebble.ca_file, storage), "--https", f"tcp:{https_port}:interface=127.0.0.1", "--workers", "2")
    pebble.start(proxy.http_port, https_port)
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    assert proxy.metric("twingress_acme_orders_total", result="issued") == 0
    manifests.write("site.yaml", _acme_ingress("site", ["site.example.com"], "app"))
    _issued(proxy, pebble)
    wait_until(lambda: _served_certificate(https_port, "site.example.com", root), timeout=20, what="the certificate by SNI")
    secret = yaml.safe_load((storage / "manifests" / "secret-default.site-tls.yaml").read_text())
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))

    issued_at = wait_until(lambda: proxy.metric(EXPIRY, namespace="default", secret="site-tls", issuer=pebble.directory), timeout=10, what="the issued certificate's expiry")
    assert issued_at == leaf.not_valid_after_utc.timestamp()
    assert proxy.metric(EXPIRY, namespace="default", secret="plain-tls", issuer="secret") == theirs.cert.not_valid_after_utc.timestamp()
    assert proxy.metric(EXPIRY, secret="plain-tls", issuer=pebble.directory) == 0
    assert proxy.metric("twingress_acme_orders_total", result="issued") == 1
    assert proxy.metric("twingress_acme_orders_total", result="failed") == 0

    shown = proxy.routes()["certificateSecrets"]
    assert shown["default/site-tls"] == {"issuer": pebble.directory, "notAfter": leaf.not_valid_after_utc.isoformat(), "hosts": ["site.example.com"]}
    assert shown["default/plain-tls"] == {"issuer": "secret", "notAfter": theirs.cert.not_valid_after_utc.isoformat(), "hosts": ["plain.example.com"]}
