# -*- test-case-name: tests.proxy.test_acme_tls_alpn -*-
"""
The TLS-ALPN-01 challenge (RFC 8737), issuer side: the challenge certificate, how it reaches every
worker, and the self check through twingress's own --https listener.

certbot's C{acme} (5.x) no longer knows the challenge type, so L{TLSALPN01} registers it with the
library's own registry (a key-authorization challenge; the response is the empty object any
challenge is answered with).  For each pending authorization the issuer builds a self-signed
certificate whose only identifier is the host, as its one SAN dNSName, with the critical
id-pe-acmeIdentifier extension holding the SHA-256 of the key authorization (L{challenge_certificate}),
and writes them all into a ConfigMap manifest of the storage directory
(L{ingress.routing.tls_alpn_challenges.TLS_ALPN_CHALLENGES}) that the manifests source reads: the
table carries them to every worker as it carries the HTTP-01 tokens (in a cluster: the leader's
Secret, L{ingress.acme.tlsalpn_cluster}).  Before the server is asked to
validate, L{answers_handshake} handshakes with C{acme-tls/1} for the host through the --https
listener and checks the digest it is shown, so a certificate not served yet never spends a failed
validation.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
import ssl
from collections.abc import Mapping
from typing import Any

import yaml
from acme import challenges
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ingress.acme.storage import MANAGED_BY, manifests_dir, write_whole
from ingress.routing.tls_alpn_challenges import TLS_ALPN_CHALLENGES

ACME_IDENTIFIER = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.31")  # id-pe-acmeIdentifier (RFC 8737 6.1)
ACME_TLS_1 = "acme-tls/1"
_FILE = "acme-tls-alpn-01.yaml"


@challenges.ChallengeResponse.register
class TLSALPN01Response(challenges.KeyAuthorizationChallengeResponse):
    """The answer to a tls-alpn-01 challenge: the empty object (the key authorization is shown in the handshake)."""

    typ = "tls-alpn-01"


@challenges.Challenge.register
class TLSALPN01(challenges.KeyAuthorizationChallenge):
    """A tls-alpn-01 challenge: its validation is the key authorization, whose digest the certificate carries."""

    response_cls = TLSALPN01Response
    typ = response_cls.typ

    def validation(self, account_key: Any, **unused: Any) -> str:
        return self.key_authorization(account_key)


def acme_identifier(key_authorization: str) -> bytes:
    """The acmeIdentifier extension's value: the DER OCTET STRING of the key authorization's SHA-256 (RFC 8737 3)."""
    digest = hashlib.sha256(key_authorization.encode("ascii")).digest()
    return bytes([0x04, len(digest)]) + digest


def challenge_certificate(host: str, key_authorization: str) -> bytes:
    """The challenge certificate of C{host} and its key (one PEM): self-signed, the host its only identifier."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))  # no subject: the SAN is the only identifier (RFC 8737 3)
        .issuer_name(x509.Name([]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=True)  # critical: the subject is empty
        .add_extension(x509.UnrecognizedExtension(ACME_IDENTIFIER, acme_identifier(key_authorization)), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return certificate.public_bytes(serialization.Encoding.PEM) + key_pem


def write_tls_alpn(storage: str, certificates: Mapping[str, bytes]) -> None:
    """The ConfigMap of pending challenge certificates (host: PEM), or no file when none is pending."""
    path = os.path.join(manifests_dir(storage), _FILE)
    if not certificates:
        if os.path.exists(path):
            os.unlink(path)
        return
    namespace, name = TLS_ALPN_CHALLENGES
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace, "name": name, "labels": dict(MANAGED_BY)},
                  "data": {host: pem.decode("ascii") for host, pem in certificates.items()}}
    write_whole(path, yaml.safe_dump(config_map).encode())


def publish_tls_alpn(storage: str, tokens: Mapping[str, tuple[str, str]]) -> None:
    """(Order thread.) The challenge certificates of the pending tokens (token: (host, key authorization)); {} withdraws them."""
    write_tls_alpn(storage, {host: challenge_certificate(host, answer) for host, answer in tokens.values()})


def answers_handshake(address: str, port: int, host: str, key_authorization: str) -> bool:
    """Whether a handshake offering only acme-tls/1 for C{host} on --https negotiates it and shows the key authorization's digest."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the challenge certificate is self-signed: its extension is what is checked
    context.set_alpn_protocols([ACME_TLS_1])
    try:
        with socket.create_connection((address, port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
            der, negotiated = tls.getpeercert(binary_form=True), tls.selected_alpn_protocol()
    except (OSError, ValueError):
        return False
    if der is None or negotiated != ACME_TLS_1:
        return False
    try:
        extension = x509.load_der_x509_certificate(der).extensions.get_extension_for_oid(ACME_IDENTIFIER)
    except (ValueError, x509.ExtensionNotFound):
        return False
    value = extension.value
    return isinstance(value, x509.UnrecognizedExtension) and value.value == acme_identifier(key_authorization)
