# -*- test-case-name: tests.proxy.test_backend_tls -*-
"""
C{backend-protocol: HTTPS} (or C{GRPCS}) and the C{proxy-ssl-*} annotations compiled into a L{BackendTLS}.

The one decision ingress-nginx leaves open is the name a verified backend
certificate must carry when C{proxy-ssl-name} is not set (nginx would check
the name of its internal upstream block, which no certificate carries):
twingress checks the Service's cluster DNS name, C{<service>.<namespace>.svc}.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional, Union

from ingress.model import Ingress, TLSSecret
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.annotations.values import HTTP2_BACKENDS, TLS_BACKENDS
from ingress.routing.policies.backend import BackendTLS


class MissingSecret(LookupError):
    """proxy-ssl-secret names a Secret that is not there (or not a kubernetes.io/tls one)."""


def backend_tls(
    ingress: Ingress, annotations: IngressAnnotations, service: str, secrets: Mapping[tuple[str, str], TLSSecret]
) -> Optional[BackendTLS]:
    """The TLS to this Ingress's endpoints of C{service}, or None for plain HTTP; raises L{MissingSecret}."""
    protocol = annotations.text("backend-protocol")
    if protocol not in TLS_BACKENDS:
        return None
    reference = annotations.text("proxy-ssl-secret")
    secret: Union[TLSSecret, None] = None
    if reference:
        namespace, _, name = reference.rpartition("/")
        secret = secrets.get((namespace or ingress.meta.namespace, name))
        if secret is None:
            raise MissingSecret(f"proxy-ssl-secret {reference!r}: no kubernetes.io/tls Secret of that name")
    depth = annotations.number("proxy-ssl-verify-depth")
    protocols = annotations.value("proxy-ssl-protocols")
    return BackendTLS(
        verify=annotations.flag("proxy-ssl-verify"),
        name=annotations.text("proxy-ssl-name") or f"{service}.{ingress.meta.namespace}.svc",
        sni=annotations.flag("proxy-ssl-server-name"),
        verify_depth=int(depth) if depth is not None else 1,
        ciphers=annotations.text("proxy-ssl-ciphers"),
        protocols=protocols if isinstance(protocols, tuple) else (),
        cert_pem=secret.cert_pem if secret is not None else b"",
        key_pem=secret.key_pem if secret is not None else b"",
        ca_pem=secret.ca_pem if secret is not None else b"",
        alpn=("h2",) if protocol in HTTP2_BACKENDS else (),
    )
