# -*- test-case-name: tests.proxy.test_backend_tls -*-
"""
TLS connections to endpoints (C{backend-protocol: HTTPS}), built once per configuration.

With verification on, Twisted's own client options check the chain (to the
Secret's ca.crt, or the system's roots) and the name, and send it as SNI;
with verification off (ingress-nginx's default) the connection is encrypted
but the endpoint unchecked, and SNI goes only when asked for.
"""

from __future__ import annotations

import re
from typing import Any

from OpenSSL import SSL
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from zope.interface import implementer

from ingress.routing.policies.backend import BackendTLS

_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)
_CREATORS: dict[str, Any] = {}


def connection_creator(tls: BackendTLS) -> Any:
    """The IOpenSSLClientConnectionCreator for a configuration (cached by its key; a handful exist)."""
    creator = _CREATORS.get(tls.key)
    if creator is None:
        if len(_CREATORS) >= 256:
            _CREATORS.clear()
        creator = _CREATORS[tls.key] = _build(tls)
    return creator


def _build(tls: BackendTLS) -> Any:
    options: dict[str, Any] = {}
    if tls.ciphers:
        options["acceptableCiphers"] = ssl.AcceptableCiphers.fromOpenSSLCipherString(tls.ciphers)
    if tls.protocols:
        versions = sorted(tls.protocols)
        options["raiseMinimumTo"] = ssl.TLSVersion.TLSv1_3 if versions[0] == "TLSv1.3" else ssl.TLSVersion.TLSv1_2
        if versions[-1] == "TLSv1.2":
            options["lowerMaximumSecurityTo"] = ssl.TLSVersion.TLSv1_2
    client = ssl.PrivateCertificate.loadPEM(tls.cert_pem + b"\n" + tls.key_pem) if tls.cert_pem else None
    protocols = [name.encode("ascii") for name in tls.alpn] or None  # GRPCS: ALPN h2
    if tls.verify:
        roots = [ssl.Certificate.loadPEM(pem) for pem in _PEM_CERTIFICATE.findall(tls.ca_pem)]
        trust = ssl.trustRootFromCertificates(roots) if roots else ssl.platformTrust()
        options["verifyDepth"] = tls.verify_depth
        return ssl.optionsForClientTLS(tls.name, trustRoot=trust, clientCertificate=client, acceptableProtocols=protocols, extraCertificateOptions=options)
    if client is not None:
        options["privateKey"], options["certificate"] = client.privateKey.original, client.original
    return _Unverified(ssl.CertificateOptions(verify=False, **options), tls.name.encode("idna") if tls.sni else b"", protocols or [])


@implementer(IOpenSSLClientConnectionCreator)
class _Unverified:
    """Encrypted, unchecked: ingress-nginx's C{proxy-ssl-verify: off}, with SNI only when asked for."""

    def __init__(self, options: ssl.CertificateOptions, server_name: bytes, protocols: list[bytes]) -> None:
        self._context = options.getContext()
        self._server_name = server_name
        self._protocols = protocols  # ALPN: Twisted sets it per connection, so this creator does too

    def clientConnectionForTLS(self, tlsProtocol: object) -> SSL.Connection:
        connection = SSL.Connection(self._context, None)
        connection.set_app_data(tlsProtocol)
        if self._server_name:
            connection.set_tlsext_host_name(self._server_name)
        if self._protocols:
            connection.set_alpn_protos(self._protocols)
        return connection
