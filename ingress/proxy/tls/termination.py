# -*- test-case-name: tests.proxy.test_tls -*-
"""
TLS termination with SNI: one pyOpenSSL context per certificate version,
chosen per connection by the name the client asked for.

Every connection starts on the default context, whose servername callback
switches it to the host's context: exact host, then a wildcard covering one
label, then the default certificate.  Contexts are built completely before
first use and never changed (pyOpenSSL refuses changes to a context that has
made a connection), and cached by Secret version, so a routing swap only
builds contexts for Secrets that changed; connections already established
keep theirs.  The callback never raises: since pyOpenSSL 26 an exception
there aborts the handshake.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from OpenSSL import SSL, crypto
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from twisted.logger import Logger
from zope.interface import implementer

from ingress.model import ObjectRef, Problem, TLSSecret
from ingress.observe.metrics import Metrics
from ingress.proxy.tls.acme_tls import ACME_TLS_1, refuse_acme_tls
from ingress.proxy.tls.clientcerts import Verifier, ask_for_certificates
from ingress.proxy.tls.expiry import ExpiryGauges, issuer_of
from ingress.routing.certs import CertificateTable, SecretKey
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.table import RoutingTable, problem_json

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

# TLS 1.2 suites: ECDHE with AEAD only (TLS 1.3 suites are all AEAD and OpenSSL's defaults).
MODERN_CIPHERS = (
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
)
_MIN_VERSIONS = {"1.2": SSL.TLS1_2_VERSION, "1.3": SSL.TLS1_3_VERSION}


class CertificateError(Exception):
    """A Secret we cannot serve; C{reason} is the metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def self_signed_certificate() -> tuple[bytes, bytes]:
    """A fresh default certificate (never a key shipped in the repo): EC P-256, one year."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "twingress default certificate")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _select_alpn(connection: SSL.Connection, offered: list[bytes]) -> bytes | SSL._NoOverlappingProtocols:
    if ACME_TLS_1 in offered:  # a TLS-ALPN-01 validation of a name without a challenge here: the handshake fails
        raise refuse_acme_tls()
    return b"http/1.1" if b"http/1.1" in offered else SSL.NO_OVERLAPPING_PROTOCOLS


def _select_alpn_h2(connection: SSL.Connection, offered: list[bytes]) -> bytes | SSL._NoOverlappingProtocols:
    """Our preference, not the client's order: h2 when offered, then http/1.1 (RFC 7301 3.2 lets the server choose)."""
    if ACME_TLS_1 in offered:
        raise refuse_acme_tls()
    if b"h2" in offered:
        return b"h2"
    return b"http/1.1" if b"http/1.1" in offered else SSL.NO_OVERLAPPING_PROTOCOLS


class LoadedCertificate:
    """A built context and what the TLS layer knows of its certificate."""

    def __init__(self, context: SSL.Context, names: list[str], not_after: datetime.datetime) -> None:
        self.context = context
        self.names = names
        self.not_after = not_after

    def covers(self, host: str) -> bool:
        """RFC 6125: an exact SAN, or a wildcard SAN covering exactly the first label."""
        for name in self.names:
            if name == host:
                return True
            if name.startswith("*.") and "." in host and host.split(".", 1)[1] == name[2:]:
                return True
        return False


def load_certificate(
    cert_pem: bytes, key_pem: bytes, min_version: str = "1.2", ciphers: str = MODERN_CIPHERS, max_version: str = "", http2: bool = True
) -> LoadedCertificate:
    """Validate a PEM certificate chain and key and build its context; raises L{CertificateError}."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as error:
        raise CertificateError("unparsable", f"certificate: {error}") from None
    leaf = chain[0]
    not_after = leaf.not_valid_after_utc
    if not_after < datetime.datetime.now(datetime.UTC):
        raise CertificateError("expired", f"certificate expired on {not_after.isoformat()}")
    try:
        key = crypto.load_privatekey(crypto.FILETYPE_PEM, key_pem)
    except crypto.Error as error:
        raise CertificateError("unparsable", f"private key: {error}") from None
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(_MIN_VERSIONS[min_version])
    if max_version:
        context.set_max_proto_version(_MIN_VERSIONS[max_version])
    context.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE | SSL.OP_NO_RENEGOTIATION)
    context.set_cipher_list(ciphers.encode())
    context.set_session_id(b"twingress")
    context.set_alpn_select_callback(_select_alpn_h2 if http2 else _select_alpn)
    try:
        context.use_certificate(crypto.X509.from_cryptography(leaf))
        for intermediate in chain[1:]:
            context.add_extra_chain_cert(crypto.X509.from_cryptography(intermediate))
        context.use_privatekey(key)  # OpenSSL already refuses a key that does not match here
        context.check_privatekey()
    except SSL.Error:
        raise CertificateError("key-mismatch", "private key does not match the certificate") from None
    return LoadedCertificate(context, _names(leaf), not_after)


def _names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return [n.lower().rstrip(".") for n in san.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        return [a.value.lower() for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME) if isinstance(a.value, str)]


class CertificateStore:
    """
    Host → context, rebuilt on every routing swap from the table's certificates.

    Contexts are cached by Secret content; a Secret that fails validation is
    logged and counted once per version, and its hosts use the default.
    """

    def __init__(
        self,
        metrics: Metrics,
        default: LoadedCertificate,
        min_version: str = "1.2",
        ciphers: str = MODERN_CIPHERS,
        generated: Optional[tuple[bytes, bytes]] = None,
        http2: bool = True,
        exports_expiry: bool = True,
    ) -> None:
        self.metrics = metrics
        self.exports_expiry = exports_expiry  # one store per process exports the expiry gauge (a Gateway port's does not)
        self.http2 = http2  # whether ALPN offers h2 (--http2, and the table's use-http2)
        self.default = default
        self.min_version = min_version
        self.ciphers = ciphers
        self.max_version = ""
        self._command_line = (min_version, ciphers, http2)
        self._generated = generated  # the default certificate's PEMs, to rebuild it with other TLS options
        self.default_context = self._default_context(default)
        self._exact: dict[str, SSL.Context] = {}
        self._wildcards: dict[str, SSL.Context] = {}
        self._cache: dict[tuple[SecretKey, bytes, bytes], Optional[LoadedCertificate]] = {}
        self._client_cache: dict[tuple[bytes, bytes, ClientAuth, tuple[str, str, str, bool]], tuple[SSL.Context, Verifier]] = {}  # auth-tls-*
        self._verifiers: dict[SSL.Context, Verifier] = {}
        self._expiry = ExpiryGauges(metrics)
        self._named_default: Optional[LoadedCertificate] = None
        self.served: dict[str, str] = {}  # host (or "*.suffix") -> "namespace/name" of the certificate it gets
        self.refused: list[Problem] = []  # Secrets named for hosts they do not get, and why
        self._reported: set[tuple[SecretKey, str]] = set()  # refusals already logged and counted

    def _default_context(self, default: LoadedCertificate) -> SSL.Context:
        """The context every connection starts on; it carries the SNI callback, so it is a copy of its own."""
        context = default.context
        context.set_tlsext_servername_callback(self._switch)
        return context

    def _switch(self, connection: SSL.Connection) -> None:
        try:
            raw = connection.get_servername()
            if not raw:
                return
            host = raw.decode("ascii", "replace").lower().rstrip(".")
            context = self.lookup(host)
            if context is not None:
                connection.set_context(context)
                verifier = self._verifiers.get(context)
                if verifier is not None:  # auth-tls-*: the connection keeps the first context's verify mode otherwise
                    connection.set_verify(SSL.VERIFY_PEER, verifier)
        except Exception:  # noqa: BLE001 - an exception here would abort the handshake
            log.failure("SNI lookup failed; serving the default certificate")

    def lookup(self, host: str) -> Optional[SSL.Context]:
        context = self._exact.get(host)
        if context is not None:
            return context
        dot = host.find(".")
        return self._wildcards.get(host[dot + 1 :]) if dot > 0 else None

    def prepare(self, table: RoutingTable) -> Callable[[], None]:
        """
        Build contexts for the Secrets that changed (build thread: a bulk change
        must not stall the reactor) and return the commit that swaps them in
        (reactor thread).  Builds are serial, so only one prepare runs at a time.
        """
        certificates = table.certificates
        rebuilt_default = self._tls_options(table)
        loaded: dict[SecretKey, Optional[LoadedCertificate]] = {}
        cache: dict[tuple[SecretKey, bytes, bytes], Optional[LoadedCertificate]] = {}
        for key, secret in certificates.secrets.items():
            cache_key = (key, secret.cert_pem, secret.key_pem)
            if cache_key in self._cache:
                cache[cache_key] = self._cache[cache_key]
            else:
                cache[cache_key] = self._load(key, secret)
            loaded[key] = cache[cache_key]
        default = self._new_default(certificates.default, loaded, certificates.secrets) or rebuilt_default
        exact, wildcards, served, refused = self._host_maps(certificates, loaded)
        self._cache = cache
        verifiers = self._ask_client_certificates(certificates, served, exact, wildcards)
        self._verifiers = {**self._verifiers, **verifiers}  # both tables' contexts until the commit
        issuers = {key: issuer_of(secret) for key, secret in certificates.secrets.items()}

        def commit() -> None:
            if default is not None:
                self.default_context = default
            self._exact, self._wildcards = exact, wildcards
            self.served, self.refused = served, refused
            self._verifiers = verifiers
            if self.exports_expiry:
                self._expiry.export(loaded, issuers)

        return commit

    def _ask_client_certificates(
        self, certificates: CertificateTable, served: dict[str, str], exact: dict[str, SSL.Context], wildcards: dict[str, SSL.Context]
    ) -> dict[SSL.Context, Verifier]:
        """
        Hosts with auth-tls-*: a context of their own that asks for a client certificate, on the
        certificate they get (their Secret, or the default), cached by both.
        """
        cache: dict[tuple[bytes, bytes, ClientAuth, tuple[str, str, str, bool]], tuple[SSL.Context, Verifier]] = {}
        options = (self.min_version, self.max_version, self.ciphers, self.http2)
        for host, auth in certificates.client_auth.items():
            suffix = host[2:] if host.startswith("*.") else host
            wildcard = "*." + suffix.split(".", 1)[-1]
            key = certificates.secret_for(suffix) if host in served or wildcard in served else certificates.default
            secret = certificates.secrets.get(key) if key is not None else None
            pems = (secret.cert_pem, secret.key_pem) if secret is not None else self._generated
            if pems is None:
                continue
            cache_key = (pems[0], pems[1], auth, options)
            built = cache.get(cache_key) or self._client_cache.get(cache_key)
            if built is None:
                try:
                    context = load_certificate(pems[0], pems[1], self.min_version, self.ciphers, self.max_version, self.http2).context
                except CertificateError as error:
                    log.warn("{host} cannot ask for client certificates: {error}", host=host, error=str(error))
                    continue
                built = (context, ask_for_certificates(context, auth))
            cache[cache_key] = built
            context = built[0]
            if host.startswith("*."):
                wildcards[host[2:]] = context
            else:
                exact[host] = context
        self._client_cache = cache
        return dict(cache.values())

    def _tls_options(self, table: RoutingTable) -> Optional[SSL.Context]:
        """
        The TLS versions, ciphers and ALPN of the table (the ingress-nginx ConfigMap's ssl-protocols,
        ssl-ciphers and use-http2, which turns h2 off but never on against --http2) or of the command line;
        when they change, every context is built again, and the generated default certificate's new context is returned.
        """
        listener = table.listener
        min_version, ciphers, http2 = self._command_line
        max_version = ""
        if listener is not None:
            min_version = listener.tls_min_version or min_version
            max_version = listener.tls_max_version
            ciphers = listener.tls_ciphers or ciphers
            http2 = http2 and listener.http2
        if (min_version, max_version, ciphers, http2) == (self.min_version, self.max_version, self.ciphers, self.http2):
            return None
        self.min_version, self.max_version, self.ciphers, self.http2 = min_version, max_version, ciphers, http2
        self._cache = {}
        self._named_default = None
        if self._generated is None:
            return None
        return self._default_context(load_certificate(*self._generated, min_version, ciphers, max_version, self.http2))

    def _new_default(
        self,
        key: Optional[SecretKey],
        loaded: dict[SecretKey, Optional[LoadedCertificate]],
        secrets: Mapping[SecretKey, TLSSecret],
    ) -> Optional[SSL.Context]:
        """--default-certificate: once its Secret loads, a context of its own replaces the generated one."""
        if key is None:
            return None
        cert = loaded.get(key)
        if cert is None or cert is self._named_default:
            return None
        self._named_default = cert
        secret = secrets[key]
        return self._default_context(load_certificate(secret.cert_pem, secret.key_pem, self.min_version, self.ciphers, self.max_version, self.http2))

    def _load(self, key: SecretKey, secret: TLSSecret) -> Optional[LoadedCertificate]:
        try:
            try:
                return load_certificate(secret.cert_pem, secret.key_pem, self.min_version, self.ciphers, self.max_version, self.http2)
            except (ValueError, TypeError, SSL.Error, crypto.Error) as unexpected:  # never let one Secret stop the rest
                raise CertificateError("invalid", str(unexpected)) from None
        except CertificateError as error:
            self.metrics.tls_certificate_errors.labels(error.reason).inc()
            log.warn("TLS secret {secret} skipped ({reason}): {error}; its hosts get the default certificate", secret="/".join(key), reason=error.reason, error=str(error))
            return None

    def _host_maps(
        self, certificates: CertificateTable, loaded: dict[SecretKey, Optional[LoadedCertificate]]
    ) -> tuple[dict[str, SSL.Context], dict[str, SSL.Context], dict[str, str], list[Problem]]:
        """
        The contexts by host, and what /debug/routes shows: the certificate each
        host really gets, and the Secrets refused for a host.  A refusal is logged
        and counted once, when it appears, not on every rebuild.
        """
        exact: dict[str, SSL.Context] = {}
        wildcards: dict[str, SSL.Context] = {}
        served: dict[str, str] = {}
        refused: list[Problem] = []
        reported: set[tuple[SecretKey, str]] = set()
        for hosts, target, prefix in ((certificates.exact, exact, ""), (certificates.wildcards, wildcards, "*.")):
            for host, key in hosts.items():
                cert, name = loaded.get(key), prefix + host
                ref = ObjectRef("Secret", key[0], key[1])
                if cert is None:  # its load failure was logged and counted once, by _load
                    refused.append(Problem(ref, "InvalidCertificate", f"cannot be used; {name} gets the default certificate"))
                elif not cert.covers(name):
                    refused.append(Problem(ref, "CertificateNotCovering", f"does not cover {name}; it gets the default certificate"))
                    reported.add((key, name))
                    if (key, name) not in self._reported:
                        self.metrics.tls_certificate_errors.labels("host-not-covered").inc()
                        log.warn("TLS secret {secret} does not cover {host}; it gets the default certificate", secret="/".join(key), host=name)
                else:
                    target[host] = cert.context
                    served[name] = "/".join(key)
        self._reported = reported
        return exact, wildcards, served, refused

    def show(self, routes: dict[str, Any]) -> None:
        """/debug/routes: the certificates hosts really get, and the refused Secrets among the problems."""
        routes["certificates"] = dict(sorted(self.served.items()))
        routes["problems"] = routes["problems"] + [problem_json(p) for p in self.refused]


@implementer(IOpenSSLServerConnectionCreator)
class SNIConnectionCreator:
    """Makes each server-side TLS connection on the default context; SNI switches it."""

    def __init__(self, store: CertificateStore) -> None:
        self.store = store

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return SSL.Connection(self.store.default_context, None)
