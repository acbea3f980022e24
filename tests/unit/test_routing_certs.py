"""Certificate selection and TLS route options, as pure functions of the snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from ingress.model import ObjectMeta, TLSSecret
from ingress.model.parse import state_from_objects
from ingress.routing import build
from ingress.routing.build_options import BuildOptions


def _ingress(name: str, host: str, tls_hosts: list[str], secret: str, ts: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": "web", "creationTimestamp": ts, "annotations": annotations},
        "spec": {
            "ingressClassName": "twingress",
            "tls": [{"hosts": tls_hosts, "secretName": secret}],
            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "s", "port": {"number": 80}}}}]}}],
        },
    }


def _secret(name: str, namespace: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {"tls.crt": f"cert of {name}", "tls.key": f"key of {name}"},
    }


def test_hosts_map_to_secrets_of_their_own_namespace_oldest_first() -> None:
    table = build(
        state_from_objects(
            [
                _secret("a-tls"),
                _secret("b-tls"),
                _secret("c-tls", namespace="other"),
                _ingress("newer", "a.example.com", ["a.example.com"], "b-tls", "2026-02-01T00:00:00Z"),
                _ingress("older", "a.example.com", ["a.example.com", "*.apps.example.com"], "a-tls", "2026-01-01T00:00:00Z"),
                _ingress("cross", "c.example.com", ["c.example.com"], "c-tls", "2026-01-01T00:00:00Z"),
            ]
        )
    )
    certs = table.table.certificates
    assert certs.secret_for("a.example.com") == ("web", "a-tls")  # the oldest Ingress wins the host
    assert certs.secret_for("x.apps.example.com") == ("web", "a-tls")
    assert certs.secret_for("x.y.apps.example.com") is None  # one label only
    assert certs.secret_for("c.example.com") is None  # never across namespaces
    assert any(p.reason == "SecretNotFound" and p.ref.name == "cross" for p in table.report.problems)
    assert set(certs.secrets) == {("web", "a-tls"), ("web", "b-tls")}


@pytest.mark.parametrize(
    "annotations, redirect, hsts",
    [
        ({}, True, ""),
        ({"twingress.io/ssl-redirect": "false"}, False, ""),
        ({"twingress.io/hsts-max-age": "31536000"}, True, "max-age=31536000"),
        ({"nginx.ingress.kubernetes.io/ssl-redirect": "false"}, False, ""),
        ({"nginx.ingress.kubernetes.io/ssl-redirect": "false", "twingress.io/ssl-redirect": "true"}, True, ""),
        ({"nginx.ingress.kubernetes.io/force-ssl-redirect": "true", "twingress.io/ssl-redirect": "false"}, True, ""),
    ],
    ids=["default-redirect", "redirect-off", "hsts", "nginx-redirect-off", "twingress-key-wins", "force-ssl-redirect"],
)
def test_tls_hosts_redirect_and_hsts(annotations: dict[str, str], redirect: bool, hsts: str) -> None:
    table = build(state_from_objects([_secret("a-tls"), _ingress("i", "a.example.com", ["a.example.com"], "a-tls", "2026-01-01T00:00:00Z", **annotations)]))
    route = table.table.match("a.example.com", "/")
    assert route is not None and route.redirect_https is redirect and route.hsts == hsts


def test_an_invalid_tls_annotation_leaves_the_ingress_out() -> None:
    """Issue 13: an invalid value skips the Ingress's paths with a Warning, never a silent default."""
    table = build(state_from_objects([_secret("a-tls"), _ingress("i", "a.example.com", ["a.example.com"], "a-tls", "2026-01-01T00:00:00Z", **{"twingress.io/hsts-max-age": "soon"})]))
    assert table.table.match("a.example.com", "/") is None
    assert [p.reason for p in table.report.problems] == ["InvalidAnnotation"]


def test_force_ssl_redirect_redirects_a_host_without_tls() -> None:
    """ingress-nginx "Server-side HTTPS enforcement through redirect": force-ssl-redirect needs no certificate."""
    ingress = _ingress("i", "plain.example.com", ["a.example.com"], "a-tls", "2026-01-01T00:00:00Z", **{"nginx.ingress.kubernetes.io/force-ssl-redirect": "true"})
    route = build(state_from_objects([_secret("a-tls"), ingress])).table.match("plain.example.com", "/")
    assert route is not None and route.redirect_https


def test_a_host_without_tls_is_not_redirected() -> None:
    table = build(state_from_objects([_secret("a-tls"), _ingress("i", "plain.example.com", ["a.example.com"], "a-tls", "2026-01-01T00:00:00Z")]))
    route = table.table.match("plain.example.com", "/")
    assert route is not None and not route.redirect_https


def test_default_certificate_secret_is_carried_or_reported() -> None:
    state = state_from_objects([_secret("fallback", namespace="ops")])
    assert build(state, BuildOptions(default_certificate=("ops", "fallback"))).table.certificates.default == ("ops", "fallback")
    missing = build(state, BuildOptions(default_certificate=("ops", "nope")))
    assert missing.table.certificates.default is None
    assert [p.reason for p in missing.report.problems] == ["SecretNotFound"]


def test_secret_values_are_what_the_tls_layer_gets() -> None:
    table = build(state_from_objects([_secret("a-tls"), _ingress("i", "a.example.com", ["a.example.com"], "a-tls", "2026-01-01T00:00:00Z")]))
    secret = table.table.certificates.secrets[("web", "a-tls")]
    assert isinstance(secret, TLSSecret) and isinstance(secret.meta, ObjectMeta)
    assert secret.cert_pem == b"cert of a-tls" and secret.key_pem == b"key of a-tls"
