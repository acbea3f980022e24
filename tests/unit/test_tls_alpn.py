"""
TLS-ALPN-01 (RFC 8737) in memory: the challenge certificate the issuer builds (ingress/acme/tlsalpn.py),
the ConfigMap that carries it into the table (ingress/routing/tls_alpn_challenges.py), the ClientHello's
ALPN list read by the front door (ingress/proxy/tls/sni.py), and the choice the HTTPS listener makes
(ingress/proxy/tls/acme_tls.py, front.py): real OpenSSL handshakes through memory BIOs against the
listener's own protocol on a StringTransport, no socket.  A ClientHello offering acme-tls/1 for a
name with a pending challenge gets that certificate and acme-tls/1, then the close; for any other
name the handshake fails; an h2 or http/1.1 client never sees a challenge certificate.
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from OpenSSL import SSL
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from ingress.acme.tlsalpn import ACME_IDENTIFIER, acme_identifier, challenge_certificate
from ingress.observe.metrics import Metrics
from ingress.process.dataplane import DataPlane, ListenerOptions, data_plane
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.tls import sni
from ingress.proxy.tls.acme_tls import ACME_TLS_1, ChallengeContexts
from ingress.proxy.tls.termination import MODERN_CIPHERS
from ingress.routing import RoutingTable
from ingress.routing.tls_alpn_challenges import TLS_ALPN_CHALLENGES
from ingress.runtime.live import LiveTable
from tests.unit.objects import endpoints, ingress, path, rule, service, table

HOST = "pending.example.com"
KEY_AUTHORIZATION = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI"


def _config_map(certificates: dict[str, bytes]) -> dict[str, Any]:
    namespace, name = TLS_ALPN_CHALLENGES
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace, "name": name}, "data": {h: pem.decode() for h, pem in certificates.items()}}


def _table(*objects: dict[str, Any], acme: bool = True) -> RoutingTable:
    return table(service(), endpoints("web", "10.0.0.1"), ingress("app", rule("app.example.com", path("/"))), *objects, acme_challenges=acme).table


def _hello(protocols: list[bytes], name: bytes = HOST.encode()) -> bytes:
    """The ClientHello OpenSSL sends with this ALPN list (none: no extension)."""
    context = SSL.Context(SSL.TLS_CLIENT_METHOD)
    if protocols:
        context.set_alpn_protos(protocols)
    client = SSL.Connection(context, None)
    client.set_connect_state()
    client.set_tlsext_host_name(name)
    with pytest.raises(SSL.WantReadError):
        client.do_handshake()
    return client.bio_read(65536)


class _Handshake:
    """An OpenSSL client talking to the HTTPS listener's protocol through a StringTransport."""

    def __init__(self, plane: DataPlane, protocols: list[bytes], name: str) -> None:
        context = SSL.Context(SSL.TLS_CLIENT_METHOD)
        context.set_alpn_protos(protocols)
        self.client = SSL.Connection(context, None)
        self.client.set_connect_state()
        self.client.set_tlsext_host_name(name.encode())
        self.transport = StringTransport()
        assert plane.https is not None
        protocol = plane.https.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        assert protocol is not None
        self.transport.protocol = protocol  # type: ignore[attr-defined]  # where the front door hands the connection over to
        protocol.makeConnection(self.transport)
        self.error: Optional[SSL.Error] = None
        self.after = b""

    def run(self) -> _Handshake:
        """Exchange flights until the client's handshake ends (done, or failed on the server's alert)."""
        for _ in range(10):
            try:
                self.client.do_handshake()
                self.after = self._send()  # the client's Finished, and what the server answers it with
                return self
            except SSL.WantReadError:
                pass
            except SSL.Error as error:
                self.error = error
                return self
            answer = self._send()
            if answer:
                self.client.bio_write(answer)
            elif self.transport.disconnecting:
                return self
        raise AssertionError("the handshake neither ended nor failed")

    def _send(self) -> bytes:
        """What the client has to send, to the server; what the server answers."""
        try:
            sent = self.client.bio_read(65536)
        except SSL.WantReadError:
            return b""
        self.transport.protocol.dataReceived(sent)  # type: ignore[attr-defined]
        answer: bytes = self.transport.value()
        self.transport.clear()
        return answer

    def certificate(self) -> x509.Certificate:
        found = self.client.get_peer_certificate()
        assert found is not None
        return found.to_cryptography()


def _plane(routing: RoutingTable) -> DataPlane:
    clock, settings, live = MemoryReactorClock(), ProxySettings(), LiveTable()
    plane = data_plane(clock, live, UpstreamPool(clock, settings), settings, Metrics(), None, ListenerOptions(http=False, https=True, tls_min_version="1.2", tls_ciphers=MODERN_CIPHERS))  # type: ignore[arg-type]  # the testing reactor stands for the process's
    plane.prepare(routing)()
    live.swap(routing)
    return plane


def test_the_challenge_certificate_has_the_host_as_its_only_identifier_and_the_digest_in_a_critical_extension() -> None:
    pem = challenge_certificate(HOST, KEY_AUTHORIZATION)
    certificate = x509.load_pem_x509_certificate(pem)
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.value.get_values_for_type(x509.DNSName) == [HOST] and len(list(san.value)) == 1
    assert list(certificate.subject) == []
    extension = certificate.extensions.get_extension_for_oid(ACME_IDENTIFIER)
    assert extension.critical
    assert isinstance(extension.value, x509.UnrecognizedExtension)
    assert extension.value.value == b"\x04\x20" + hashlib.sha256(KEY_AUTHORIZATION.encode()).digest() == acme_identifier(KEY_AUTHORIZATION)
    public = certificate.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    certificate.verify_directly_issued_by(certificate)  # self-signed
    assert b"PRIVATE KEY" in pem


@pytest.mark.parametrize(
    ("protocols", "offers"),
    [([ACME_TLS_1], True), ([b"h2", ACME_TLS_1], True), ([b"h2", b"http/1.1"], False), ([], False), ([b"acme-tls/10"], False)],
)
def test_the_client_hello_says_whether_acme_tls_is_offered(protocols: list[bytes], offers: bool) -> None:
    hello = _hello(protocols)
    assert sni.client_hello_server_name(hello) == ("ok", HOST)
    assert sni.client_hello_offers(hello, ACME_TLS_1) is offers


@pytest.mark.parametrize("cut", [0, 3, 5, 40, 80, -20, -3])
def test_a_cut_or_garbled_client_hello_offers_nothing_and_never_raises(cut: int) -> None:
    hello = _hello([ACME_TLS_1])
    assert sni.client_hello_offers(hello[:cut], ACME_TLS_1) is False
    assert sni.client_hello_offers(b"GET / HTTP/1.1\r\n\r\n", ACME_TLS_1) is False
    garbled = bytearray(hello)
    suites = 5 + 4 + 2 + 32 + 1 + hello[5 + 4 + 2 + 32]  # after the record and handshake headers, version, random, session id
    garbled[suites : suites + 2] = b"\xff\xff"  # the cipher suites' length points past the record
    assert sni.client_hello_offers(bytes(garbled), ACME_TLS_1) is False


def test_the_table_carries_the_pending_certificates_only_with_the_option() -> None:
    pem = challenge_certificate(HOST, KEY_AUTHORIZATION)
    assert _table(_config_map({HOST.upper(): pem})).acme_tls_alpn == {HOST: pem}
    assert _table(_config_map({HOST: pem}), acme=False).acme_tls_alpn == {}
    assert _table().acme_tls_alpn == {}
    assert _table(_config_map({HOST: pem})).to_json()["acmeTlsAlpn01"] == [HOST]


def test_the_contexts_are_cached_by_pem_and_a_bad_certificate_is_skipped() -> None:
    pem = challenge_certificate(HOST, KEY_AUTHORIZATION)
    challenges = ChallengeContexts()
    challenges.prepare(_table(_config_map({HOST: pem, "bad.example.com": b"-----BEGIN CERTIFICATE-----\ngarbage\n"})))()
    assert list(challenges.contexts) == [HOST]
    first = challenges.contexts[HOST]
    challenges.prepare(_table(_config_map({HOST: pem})))()
    assert challenges.contexts[HOST] is first
    challenges.prepare(_table())()
    assert challenges.contexts == {}


def test_acme_tls_for_a_pending_name_gets_the_challenge_certificate_and_then_the_close() -> None:
    pem = challenge_certificate(HOST, KEY_AUTHORIZATION)
    handshake = _Handshake(_plane(_table(_config_map({HOST: pem}))), [ACME_TLS_1], HOST).run()
    assert handshake.error is None
    assert handshake.client.get_alpn_proto_negotiated() == ACME_TLS_1
    assert handshake.certificate() == x509.load_pem_x509_certificate(pem)
    handshake.client.bio_write(handshake.after)
    with pytest.raises(SSL.ZeroReturnError):  # the server's close_notify, right after the handshake: no application data
        handshake.client.recv(1024)
    handshake.client.shutdown()
    handshake.transport.protocol.dataReceived(handshake.client.bio_read(65536))  # type: ignore[attr-defined]
    assert handshake.transport.disconnecting, "the connection closes once both sides said so"


@pytest.mark.parametrize("name", ["other.example.com", "app.example.com"])
def test_acme_tls_for_a_name_without_a_challenge_fails_the_handshake(name: str) -> None:
    pem = challenge_certificate(HOST, KEY_AUTHORIZATION)
    handshake = _Handshake(_plane(_table(_config_map({HOST: pem}))), [ACME_TLS_1], name).run()
    assert handshake.error is not None, "no certificate is served under acme-tls/1"
    assert handshake.client.get_peer_certificate() is None
    assert "no application protocol" in str(handshake.error)


def test_acme_tls_without_any_challenge_pending_fails_the_handshake() -> None:
    handshake = _Handshake(_plane(_table()), [ACME_TLS_1], HOST).run()
    assert handshake.error is not None and handshake.client.get_peer_certificate() is None


@pytest.mark.parametrize("protocols", [[b"h2", b"http/1.1"], [b"http/1.1"]])
def test_an_ordinary_client_of_the_pending_name_gets_the_ordinary_certificate(protocols: list[bytes]) -> None:
    pem = challenge_certificate(HOST, KEY_AUTHORIZATION)
    handshake = _Handshake(_plane(_table(_config_map({HOST: pem}))), protocols, HOST).run()
    assert handshake.error is None
    assert handshake.client.get_alpn_proto_negotiated() == protocols[0]
    assert ACME_IDENTIFIER not in [extension.oid for extension in handshake.certificate().extensions]
