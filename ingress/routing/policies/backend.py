# -*- test-case-name: tests.proxy.test_backend_tls -*-
"""
How the proxy talks to a route's endpoints: TLS or not, and how it checks them.

ingress-nginx's "Backend Protocol" (C{HTTPS}) and "Backend Certificate
Authentication" (C{proxy-ssl-*}) are the specification: verification is off
unless asked for, the verification depth is 1 by default, SNI is sent only
with C{proxy-ssl-server-name: "on"}, and C{proxy-ssl-secret} gives the client
certificate (tls.crt, tls.key) and the trusted CAs (ca.crt).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackendTLS:
    """TLS to the endpoints; C{name} is the name verified (and sent as SNI with C{sni})."""

    verify: bool = False
    name: str = ""
    sni: bool = False
    verify_depth: int = 1
    ciphers: str = ""
    protocols: tuple[str, ...] = ()  # "TLSv1.2", "TLSv1.3"; () leaves OpenSSL's defaults
    cert_pem: bytes = b""  # client certificate and key, from proxy-ssl-secret
    key_pem: bytes = b""
    ca_pem: bytes = b""
    alpn: tuple[str, ...] = ()  # ("h2",) for GRPCS: HTTP/2 over TLS

    @property
    def key(self) -> str:
        """Names this configuration: pooled connections are shared only between routes with the same one."""
        digest = hashlib.blake2s(digest_size=8)
        for part in (str(self.verify), self.name, str(self.sni), str(self.verify_depth), self.ciphers, ",".join(self.protocols), ",".join(self.alpn)):
            digest.update(part.encode() + b"\0")
        for pem in (self.cert_pem, self.key_pem, self.ca_pem):
            digest.update(pem + b"\0")
        return "tls-" + digest.hexdigest()

    def to_json(self) -> dict[str, object]:
        """For /debug/routes (never the key)."""
        return {"verify": self.verify, "name": self.name, "sni": self.sni, "clientCertificate": bool(self.cert_pem)}
