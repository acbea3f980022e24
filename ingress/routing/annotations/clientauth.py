# -*- test-case-name: tests.unit.test_client_auth -*-
"""
C{auth-tls-secret} and its companions compiled into a L{ClientAuth}, one per host.

ingress-nginx's annotations page ("Client Certificate Authentication"): the Secret
(C{namespace/name}, or a name in the Ingress's namespace) must have a key C{ca.crt}
with the CA chain.  A Secret that is missing, lacks C{ca.crt} or holds no certificate
closes the host: ingress-nginx answers every request of such a server 403.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional

from cryptography import x509

from ingress.model import Ingress, OpaqueSecret, TLSSecret
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.policies.clientauth import ClientAuth


class ClientAuthProblem(LookupError):
    """The CA bundle cannot be read: the host answers 403."""


def client_auth(
    ingress: Ingress, annotations: IngressAnnotations, opaque: Mapping[tuple[str, str], OpaqueSecret], tls: Mapping[tuple[str, str], TLSSecret]
) -> Optional[ClientAuth]:
    """The host settings of an Ingress with C{auth-tls-secret} (None without it); raises L{ClientAuthProblem}."""
    reference = annotations.text("auth-tls-secret")
    if not reference:
        return None
    namespace, _, name = reference.rpartition("/")
    key = (namespace or ingress.meta.namespace, name)
    found = opaque.get(key)
    ca_pem = found.data.get("ca.crt", b"") if found is not None else (tls[key].ca_pem if key in tls else None)
    if ca_pem is None:
        raise ClientAuthProblem(f"auth-tls-secret {reference!r}: no Secret of that name")
    if not ca_pem:
        raise ClientAuthProblem(f"auth-tls-secret {reference!r} has no key 'ca.crt'")
    try:
        x509.load_pem_x509_certificates(ca_pem)
    except ValueError as error:
        raise ClientAuthProblem(f"auth-tls-secret {reference!r}: ca.crt holds no PEM certificate ({error})") from None
    match = annotations.value("auth-tls-match-cn")
    return ClientAuth(
        ca_pem=ca_pem,
        secret="/".join(key),
        verify=annotations.text("auth-tls-verify-client") or "on",
        depth=int(annotations.number("auth-tls-verify-depth") or 1),
        error_page=annotations.text("auth-tls-error-page"),
        pass_certificate=annotations.flag("auth-tls-pass-certificate-to-upstream"),
        match_cn=match if isinstance(match, re.Pattern) else None,
    )
