"""
Certificates for TLS tests, made fresh with C{cryptography}: a root CA,
intermediates, leaves with RSA or ECDSA keys, expired leaves, leaves paired
with a key that is not theirs, and C{kubernetes.io/tls} Secrets holding them.

Nothing here is written to the repository: every key is generated per run.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = Literal["rsa", "ec"]
# "pkcs1": the traditional OpenSSL encoding ("BEGIN RSA PRIVATE KEY", and for EC
# keys its SEC1 counterpart "BEGIN EC PRIVATE KEY"); "pkcs8": "BEGIN PRIVATE KEY".
KeyFormat = Literal["pkcs1", "pkcs8"]

_serials = itertools.count(1000)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_key(key_type: KeyType = "rsa") -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    raise ValueError(key_type)


def key_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, key_format: KeyFormat = "pkcs8") -> bytes:
    fmt = serialization.PrivateFormat.TraditionalOpenSSL if key_format == "pkcs1" else serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organization: str = "twingress tests") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


@dataclass
class Leaf:
    """A leaf certificate, its private key, and the intermediates between it and the root."""

    cert: x509.Certificate
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    chain: list[x509.Certificate] = field(default_factory=list)

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    @property
    def common_name(self) -> str:
        return self.cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value  # type: ignore[return-value]

    @property
    def not_after(self) -> datetime.datetime:
        return self.cert.not_valid_after_utc

    def fullchain_pem(self) -> bytes:
        """What goes in C{tls.crt}: the leaf first, then every intermediate."""
        return b"".join(cert_pem(c) for c in [self.cert, *self.chain])

    def key_pem(self, key_format: KeyFormat = "pkcs8") -> bytes:
        return key_pem(self.key, key_format)

    def with_other_key(self) -> Leaf:
        """The same certificate paired with a fresh key of the same type: a key that does not match."""
        key_type: KeyType = "ec" if isinstance(self.key, ec.EllipticCurvePrivateKey) else "rsa"
        return Leaf(self.cert, new_key(key_type), list(self.chain))


class CertificateAuthority:
    """A CA (root, or intermediate when C{parent} is given) that issues leaves and sub-CAs."""

    def __init__(self, name: str, parent: Optional[CertificateAuthority] = None, key_type: KeyType = "rsa") -> None:
        self.name = name
        self.parent = parent
        self.key = new_key(key_type)
        issuer_name = parent.cert.subject if parent else _name(name)
        signing_key = parent.key if parent else self.key
        start = now() - datetime.timedelta(days=1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(issuer_name)
            .public_key(self.key.public_key())
            .serial_number(next(_serials))
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None if parent is None else 0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
        )
        if parent is not None:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(parent.key.public_key()), critical=False
            )
        self.cert = builder.sign(signing_key, hashes.SHA256())

    @property
    def chain(self) -> list[x509.Certificate]:
        """This CA and its ancestors below the root: the intermediates a leaf of ours must send."""
        if self.parent is None:
            return []
        return [self.cert, *self.parent.chain]

    def intermediate(self, name: str, key_type: KeyType = "rsa") -> CertificateAuthority:
        return CertificateAuthority(name, parent=self, key_type=key_type)

    def pem(self) -> bytes:
        return cert_pem(self.cert)

    def write(self, path: Path) -> Path:
        """This CA's certificate as a PEM file (a trust anchor for curl/openssl/ssl)."""
        path.write_bytes(self.pem())
        return path

    def issue(
        self,
        hosts: Sequence[str],
        key_type: KeyType = "rsa",
        common_name: Optional[str] = None,
        not_before: Optional[datetime.datetime] = None,
        not_after: Optional[datetime.datetime] = None,
    ) -> Leaf:
        """
        A server certificate for C{hosts} (all in subjectAltName; IP literals as
        IP SANs), subject CN the first host unless C{common_name} is given.
        Valid from a day ago for 90 days unless told otherwise (an expired
        certificate: C{not_after} in the past).
        """
        key = new_key(key_type)
        start = not_before or now() - datetime.timedelta(days=1)
        end = not_after or start + datetime.timedelta(days=90)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name or hosts[0]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(next(_serials))
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        cert = builder.sign(self.key, hashes.SHA256())
        return Leaf(cert, key, self.chain)

    def issue_expired(self, hosts: Sequence[str], key_type: KeyType = "rsa") -> Leaf:
        """A certificate for C{hosts} that expired yesterday (valid for the 30 days before)."""
        end = now() - datetime.timedelta(days=1)
        return self.issue(hosts, key_type, not_before=end - datetime.timedelta(days=30), not_after=end)


def tls_secret(
    name: str,
    leaf: Optional[Leaf] = None,
    namespace: str = "default",
    key_format: KeyFormat = "pkcs8",
    string_data: bool = False,
    crt: Optional[bytes] = None,
    key: Optional[bytes] = None,
) -> dict:
    """
    A C{kubernetes.io/tls} Secret: C{tls.crt} is the leaf and its intermediates,
    C{tls.key} the key in C{key_format}.  C{crt}/C{key} override either with
    raw bytes (to write unparsable ones).  C{string_data} puts the PEM text in
    C{stringData} instead of base64 in C{data}.
    """
    if crt is None:
        assert leaf is not None
        crt = leaf.fullchain_pem()
    if key is None:
        assert leaf is not None
        key = leaf.key_pem(key_format)
    secret: dict = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
    }
    if string_data:
        secret["stringData"] = {"tls.crt": crt.decode(), "tls.key": key.decode()}
    else:
        secret["data"] = {"tls.crt": base64.b64encode(crt).decode(), "tls.key": base64.b64encode(key).decode()}
    return secret


def load_pem_chain(text: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM text (e.g. the output of C{openssl s_client -showcerts}), in order."""
    out = []
    marker_begin, marker_end = b"-----BEGIN CERTIFICATE-----", b"-----END CERTIFICATE-----"
    start = text.find(marker_begin)
    while start >= 0:
        end = text.find(marker_end, start)
        if end < 0:
            break
        end += len(marker_end)
        out.append(x509.load_pem_x509_certificate(text[start:end]))
        start = text.find(marker_begin, end)
    return out


def dns_names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return list(san.get_values_for_type(x509.DNSName))


def common_name(cert: x509.Certificate) -> Optional[str]:
    attributes = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return attributes[0].value if attributes else None  # type: ignore[return-value]
