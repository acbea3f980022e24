"""
Client certificates per host, directly (ingress-nginx annotations.md "Client Certificate Authentication";
nginx's ngx_http_ssl_module: $ssl_client_verify, verify modes and the 495/496 answers, answered 400).
"""

from __future__ import annotations

from typing import Any

import pytest

from ingress.proxy.tls.clientcerts import NO_CERTIFICATE, PeerCertificate, with_client_fields
from ingress.routing.policies.clientauth import ClientAuth
from tests.proxy.certs import CertificateAuthority, cert_pem
from tests.unit.objects import T1, ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
_EXPIRED, _UNKNOWN_CA = 10, 20


@pytest.mark.parametrize(
    ("peer", "mode", "status"),
    [
        (NO_CERTIFICATE, "on", 400), (NO_CERTIFICATE, "optional", 0), (NO_CERTIFICATE, "optional_no_ca", 0), (NO_CERTIFICATE, "off", 0),
        (PeerCertificate(True), "on", 0), (PeerCertificate(True), "optional", 0),
        (PeerCertificate(True, _UNKNOWN_CA), "on", 400), (PeerCertificate(True, _UNKNOWN_CA), "optional", 400),
        (PeerCertificate(True, _UNKNOWN_CA), "optional_no_ca", 0),
        (PeerCertificate(True, _EXPIRED), "optional_no_ca", 400),
    ],
)
def test_which_requests_each_mode_refuses(peer: PeerCertificate, mode: str, status: int) -> None:
    assert peer.refusal(mode) == status


def test_what_the_upstream_is_told() -> None:
    assert NO_CERTIFICATE.verify == "NONE" and PeerCertificate(True).verify == "SUCCESS"
    assert PeerCertificate(True, _EXPIRED).verify == "FAILED:certificate has expired"
    peer = PeerCertificate(True, 0, "CN=a,O=b", "CN=ca", b"-----BEGIN CERTIFICATE-----\nAB+/\n")
    auth = ClientAuth(b"", "default/ca", pass_certificate=True)
    assert peer.fields(auth) == (
        b"ssl-client-verify: SUCCESS\r\nssl-client-subject-dn: CN=a,O=b\r\nssl-client-issuer-dn: CN=ca\r\n"
        b"ssl-client-cert: -----BEGIN%20CERTIFICATE-----%0AAB%2B%2F%0A\r\n"
    )
    head = b"GET / HTTP/1.1\r\nHost: a\r\nSSL-Client-Verify: SUCCESS\r\nssl-client-cert: forged\r\n\r\n"
    assert with_client_fields(head, b"ssl-client-verify: NONE\r\n") == b"GET / HTTP/1.1\r\nssl-client-verify: NONE\r\nHost: a\r\n\r\n"


def _ca_secret(name: str, pem: bytes) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": "default"}, "stringData": {"ca.crt": pem.decode()}}


def test_the_oldest_ingress_decides_for_every_path_of_the_host() -> None:
    """ "applied per host": another Ingress's paths on the host are guarded too; a later different setting is reported."""
    pem = cert_pem(CertificateAuthority("test CA", key_type="ec").cert)
    routes = table(
        _ca_secret("ca", pem),
        ingress("first", rule("a.test", path("/")), annotations={NGINX + "auth-tls-secret": "ca", NGINX + "auth-tls-verify-client": "optional"}),
        ingress("second", rule("a.test", path("/api")), created=T1, annotations={NGINX + "auth-tls-secret": "default/ca"}),
    )
    for request_path in ("/", "/api"):
        route = routes.table.match("a.test", request_path)
        assert route is not None and route.policies is not None and route.policies.client_auth is not None
        assert route.policies.client_auth.verify == "optional"
    assert routes.table.certificates.client_auth["a.test"].ca_pem == pem
    assert ("Ingress/default/second", "Conflict") in {(str(p.ref), p.reason) for p in routes.report.problems}


@pytest.mark.parametrize("secret", [None, {"other.crt": "x"}, {"ca.crt": "not a certificate"}])
def test_a_ca_bundle_that_cannot_be_read_closes_the_host_with_403(secret: Any) -> None:
    objects = [] if secret is None else [{"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "ca", "namespace": "default"}, "stringData": secret}]
    routes = table(*objects, ingress("web", rule("a.test", path("/")), annotations={NGINX + "auth-tls-secret": "ca"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.deny is not None and route.policies.deny.status == 403
    assert "a.test" not in routes.table.certificates.client_auth
