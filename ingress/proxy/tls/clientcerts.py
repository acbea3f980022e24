# -*- test-case-name: tests.proxy.test_client_certs -*-
"""
Asking TLS clients for certificates, and what the HTTP layer learns of them (auth-tls-*).

A host's context asks for a certificate and trusts its CA bundle, but never fails the
handshake over it: like nginx, the verdict is given per request at the HTTP level (a 400
an operator can turn into a redirect), so the verification callback accepts everything
and remembers the first error of each connection.  L{peer_certificate} then gives the
request what nginx's $ssl_client_verify, $ssl_client_s_dn, $ssl_client_i_dn and
$ssl_client_escaped_cert hold.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from OpenSSL import SSL, crypto

from ingress.routing.policies.clientauth import ClientAuth

_FIRST_ERROR: weakref.WeakKeyDictionary[SSL.Connection, int] = weakref.WeakKeyDictionary()
_KNOWN: weakref.WeakKeyDictionary[SSL.Connection, PeerCertificate] = weakref.WeakKeyDictionary()  # read once per connection
_CLIENT_FIELDS = re.compile(rb"^ssl-client-(?:verify|subject-dn|issuer-dn|cert):.*\n", re.MULTILINE | re.IGNORECASE)

# OpenSSL's X509_V_ERR_* codes and texts (x509_vfy.h, X509_verify_cert_error_string).
_ERRORS = {
    2: "unable to get issuer certificate",
    7: "certificate signature failure",
    9: "certificate is not yet valid",
    10: "certificate has expired",
    18: "self-signed certificate",
    19: "self-signed certificate in certificate chain",
    20: "unable to get local issuer certificate",
    21: "unable to verify the first certificate",
    22: "certificate chain too long",
    23: "certificate revoked",
    24: "invalid CA certificate",
    26: "unsupported certificate purpose",
}
_CHAIN_TOO_LONG = 22
# nginx's ngx_ssl_verify_error_optional: the errors optional_no_ca lets pass (the CA is not known).
_UNKNOWN_CA = frozenset({2, 18, 19, 20, 21})


Verifier = Callable[[SSL.Connection, crypto.X509, int, int, int], bool]


def ask_for_certificates(context: SSL.Context, auth: ClientAuth) -> Verifier:
    """
    Make C{context} trust C{auth}'s CAs and name them to clients; the verification callback is
    returned, for the SNI switch to set on each connection (OpenSSL keeps a connection's verify
    mode and callback when its context changes, as nginx's servername callback knows).
    """
    store = context.get_cert_store()
    assert store is not None
    for certificate in x509.load_pem_x509_certificates(auth.ca_pem):
        authority = crypto.X509.from_cryptography(certificate)
        store.add_cert(authority)
        context.add_client_ca(authority)
    verifier = _remembering(auth.depth)
    context.set_verify(SSL.VERIFY_PEER, verifier)
    return verifier


def _remembering(most: int) -> Verifier:
    """Accept every certificate, remembering a connection's first error (a chain deeper than C{most} is one)."""

    def remember(connection: SSL.Connection, certificate: crypto.X509, error: int, depth: int, ok: int) -> bool:
        if depth > most and ok:
            ok, error = 0, _CHAIN_TOO_LONG
        if not ok and connection not in _FIRST_ERROR:
            _FIRST_ERROR[connection] = error
        return True

    return remember


class PeerCertificate:
    """What nginx knows of a connection's client certificate, and whether C{verify} lets its requests pass."""

    __slots__ = ("present", "error", "subject", "issuer", "pem")

    def __init__(self, present: bool, error: int = 0, subject: str = "", issuer: str = "", pem: bytes = b"") -> None:
        self.present = present
        self.error = error
        self.subject = subject
        self.issuer = issuer
        self.pem = pem

    @property
    def verify(self) -> str:
        """$ssl_client_verify: SUCCESS, FAILED:<reason> or NONE."""
        if not self.present:
            return "NONE"
        return "SUCCESS" if not self.error else "FAILED:" + _ERRORS.get(self.error, f"verify error {self.error}")

    def refusal(self, mode: str) -> int:
        """The status that refuses the request in C{mode}, or 0 (nginx's 495 and 496, both answered 400)."""
        if mode == "off":
            return 0
        if not self.present:
            return 400 if mode == "on" else 0
        if self.error and not (mode == "optional_no_ca" and self.error in _UNKNOWN_CA):
            return 400
        return 0

    def fields(self, auth: ClientAuth) -> bytes:
        """The fields the upstream receives (ingress-nginx's proxy_set_header ssl-client-*)."""
        lines = b"ssl-client-verify: %s\r\nssl-client-subject-dn: %s\r\nssl-client-issuer-dn: %s\r\n" % (
            self.verify.encode("latin-1"), self.subject.encode("utf-8"), self.issuer.encode("utf-8")
        )
        if auth.pass_certificate and self.pem:
            lines += b"ssl-client-cert: %s\r\n" % quote(self.pem, safe="").encode("ascii")
        return lines


NO_CERTIFICATE = PeerCertificate(False)


def with_client_fields(head_bytes: bytes, fields: bytes) -> bytes:
    """The upstream head with the ssl-client-* fields set here in place of any the client sent."""
    first_line, _, rest = head_bytes.partition(b"\r\n")
    return b"%s\r\n%s%s" % (first_line, fields, _CLIENT_FIELDS.sub(b"", rest))


def peer_certificate(transport: Any) -> PeerCertificate:
    """The client certificate of a TLS transport (none on a plain one), read once per connection."""
    handle = getattr(transport, "getHandle", None)
    connection = handle() if handle is not None else None
    if not isinstance(connection, SSL.Connection):
        return NO_CERTIFICATE
    known = _KNOWN.get(connection)
    if known is None:
        known = _KNOWN[connection] = _read(connection)
    return known


def _read(connection: SSL.Connection) -> PeerCertificate:
    presented = connection.get_peer_certificate()
    if presented is None:
        return NO_CERTIFICATE
    certificate = presented.to_cryptography()
    return PeerCertificate(
        True,
        _FIRST_ERROR.get(connection, 0),
        certificate.subject.rfc4514_string(),
        certificate.issuer.rfc4514_string(),
        certificate.public_bytes(Encoding.PEM),
    )
