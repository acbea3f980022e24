# -*- test-case-name: tests.unit.test_tls_alpn -*-
"""
Answering TLS-ALPN-01 validations (RFC 8737): a ClientHello that offers C{acme-tls/1} for a name
with a pending challenge gets that challenge's certificate, negotiates C{acme-tls/1}, and is closed
once the handshake is done (no application data follows, section 3).

The certificate must be chosen by the ALPN list, which pyOpenSSL's servername callback runs before:
the front door (L{ingress.proxy.tls.front}), which has the whole ClientHello already, asks
L{ChallengeContexts} for the name's context and hands the connection to a TLS protocol made on it
alone (L{challenge_protocol}).  Only a name with a challenge pending has its ALPN list read, so a
connection for any other name costs one empty-mapping test.  A ClientHello offering C{acme-tls/1}
that does not get here (no challenge for its name) fails its handshake in the ordinary contexts'
ALPN callback (L{refuse_acme_tls}): the ordinary certificate is never served under C{acme-tls/1}.
Ordinary clients (h2, http/1.1) never get a challenge certificate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from OpenSSL import SSL, crypto
from twisted.internet.interfaces import IDelayedCall, IHandshakeListener, IOpenSSLServerConnectionCreator
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ingress.routing.table import RoutingTable
from ingress.speedups.tlsdirect import tls_factory

log = Logger(namespace=__name__)
ACME_TLS_1 = b"acme-tls/1"


def refuse_acme_tls() -> SSL.Error:
    """
    The error an ordinary context's ALPN callback raises when C{acme-tls/1} is offered: pyOpenSSL turns
    it into a fatal alert (no certificate is sent), and Twisted ends the connection as a failed handshake.
    """
    return SSL.Error([("SSL routines", "acme-tls/1", "no pending TLS-ALPN-01 challenge for this name")])  # OpenSSL's shape: Twisted reads it


def _select_acme_tls(connection: SSL.Connection, offered: list[bytes]) -> bytes:
    """A challenge context negotiates acme-tls/1 and nothing else."""
    if ACME_TLS_1 not in offered:
        raise refuse_acme_tls()
    return ACME_TLS_1


def challenge_context(pem: bytes) -> SSL.Context:
    """The context of a challenge certificate and its key (one PEM holding both), built whole before use."""
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(SSL.TLS1_2_VERSION)  # RFC 8737 section 4: TLS 1.2 or higher
    context.use_certificate(crypto.load_certificate(crypto.FILETYPE_PEM, pem))
    context.use_privatekey(crypto.load_privatekey(crypto.FILETYPE_PEM, pem))
    context.check_privatekey()
    context.set_alpn_select_callback(_select_acme_tls)
    return context


class ChallengeContexts:
    """Host → the context of its pending challenge (L{contexts}, replaced whole by each commit)."""

    def __init__(self) -> None:
        self.contexts: dict[str, SSL.Context] = {}
        self._cache: dict[bytes, Optional[SSL.Context]] = {}

    def prepare(self, table: RoutingTable) -> Callable[[], None]:
        """The contexts of C{table}'s challenges, built on the build thread (cached by PEM); the commit swaps them in."""
        cache: dict[bytes, Optional[SSL.Context]] = {}
        contexts: dict[str, SSL.Context] = {}
        for host, pem in table.acme_tls_alpn.items():
            context = cache[pem] = self._cache[pem] if pem in self._cache else self._build(host, pem)
            if context is not None:
                contexts[host] = context
        self._cache = cache

        def commit() -> None:
            self.contexts = contexts

        return commit

    def _build(self, host: str, pem: bytes) -> Optional[SSL.Context]:
        try:
            return challenge_context(pem)
        except (crypto.Error, SSL.Error, ValueError, TypeError) as error:  # never let one challenge stop the table
            log.warn("acme: the TLS-ALPN-01 challenge certificate of {host} cannot be used: {error}", host=host, error=str(error))
            return None


NO_CHALLENGES = ChallengeContexts()  # a listener that never answers challenges (a Gateway's own port): never prepared


@implementer(IOpenSSLServerConnectionCreator)
class _OneContext:
    """Makes the connection on one context: no servername switch, the challenge certificate whatever the name."""

    def __init__(self, context: SSL.Context) -> None:
        self.context = context

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        return SSL.Connection(self.context, None)


@implementer(IHandshakeListener)
class _Answered(Protocol):
    """Inside a TLS-ALPN-01 handshake: closed once it is done, aborted on data or after C{timeout}."""

    def __init__(self, reactor: Any, timeout: float) -> None:
        self.reactor = reactor
        self.timeout = timeout
        self._timer: Optional[IDelayedCall] = None

    def connectionMade(self) -> None:
        self._timer = self.reactor.callLater(self.timeout, self.transport.abortConnection)  # type: ignore[union-attr]  # a TLS transport has abortConnection; ITransport does not declare it

    def handshakeCompleted(self) -> None:
        self.transport.loseConnection()  # type: ignore[union-attr]  # close_notify: the validation is over

    def dataReceived(self, data: bytes) -> None:
        self.transport.abortConnection()  # type: ignore[union-attr]  # RFC 8737 3: no application data under acme-tls/1

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None


class _AnsweredFactory(Factory):
    noisy = False

    def __init__(self, reactor: Any, timeout: float) -> None:
        self.reactor = reactor
        self.timeout = timeout

    def buildProtocol(self, addr: Any) -> Protocol:
        return _Answered(self.reactor, self.timeout)


def challenge_protocol(context: SSL.Context, address: Any, reactor: Any, timeout: float) -> Protocol:
    """The TLS protocol that answers one validation handshake with C{context} (the front door hands it the connection)."""
    protocol: Protocol = tls_factory(_OneContext(context), False, _AnsweredFactory(reactor, timeout)).buildProtocol(address)
    return protocol
