# -*- test-case-name: tests.proxy.test_acme_observe -*-
"""
What twingress says of its certificates' expiry: the store's gauges (C{twingress_tls_certificate_not_after_seconds},
and C{twingress_certificate_expiry_timestamp_seconds} with the issuer), and the table's certificates in /debug/routes.

The issuer is the ACME directory of a certificate twingress issued (its Secret's C{acme.twingress.io/issuer}
annotation, L{ingress.acme.storage.certificate_secret}), else C{"secret"}: a certificate someone else put in
the Secret.  Labels go when the certificate does (no gauge of a Secret that is gone).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from typing import Any, Optional, Protocol

from cryptography import x509

from ingress.model import TLSSecret
from ingress.observe.metrics import Metrics
from ingress.routing.certs import SecretKey
from ingress.routing.table import RoutingTable

ISSUER_ANNOTATION = "acme.twingress.io/issuer"
NOT_ACME = "secret"


class Expiring(Protocol):
    not_after: datetime.datetime


def issuer_of(secret: TLSSecret) -> str:
    """The ACME directory that issued the Secret's certificate, or C{"secret"}."""
    return secret.meta.annotations.get(ISSUER_ANNOTATION) or NOT_ACME


class ExpiryGauges:
    """The expiry gauges of one store's loaded certificates, replaced whole at each commit."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._labels: set[tuple[str, str, str]] = set()  # namespace, secret, issuer

    def export(self, loaded: Mapping[SecretKey, Expiring | None], issuers: Mapping[SecretKey, str]) -> None:
        current = {(key[0], key[1], issuers.get(key, NOT_ACME)): cert for key, cert in loaded.items() if cert is not None}
        for labels in self._labels - current.keys():
            self.metrics.certificate_expiry.remove(*labels)
            if not any(other[:2] == labels[:2] for other in current):
                self.metrics.tls_not_after.remove(*labels[:2])
        for labels, cert in current.items():
            self.metrics.tls_not_after.labels(*labels[:2]).set(cert.not_after.timestamp())
            self.metrics.certificate_expiry.labels(*labels).set(cert.not_after.timestamp())
        self._labels = set(current)


def certificate_secrets(table: RoutingTable) -> dict[str, dict[str, Any]]:
    """
    /debug/routes' C{certificateSecrets}: each Secret the table names for a host, with its issuer, its expiry
    (RFC 3339; None when it holds no certificate) and its hosts.  Read from the table, so the primary shows it
    with workers too (their stores are theirs).
    """
    certificates = table.certificates
    named = [(host, key) for host, key in certificates.exact.items()] + [("*." + host, key) for host, key in certificates.wildcards.items()]
    shown: dict[str, dict[str, Any]] = {}
    for host, key in sorted(named):
        secret = certificates.secrets.get(key)
        if secret is None:
            continue
        entry = shown.setdefault("/".join(key), {"issuer": issuer_of(secret), "notAfter": _not_after(secret.cert_pem), "hosts": []})
        entry["hosts"].append(host)
    return shown


@functools.lru_cache(maxsize=4096)
def _not_after(cert_pem: bytes) -> Optional[str]:
    """The leaf's expiry, parsed once per certificate (a debug view must not parse thousands on each call)."""
    try:
        return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.isoformat()
    except ValueError:
        return None
