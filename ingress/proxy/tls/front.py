# -*- test-case-name: tests.proxy.test_tls_passthrough -*-
"""
The front door of the TLS listener: read the ClientHello's server name, then
either pass the raw stream through to a backend (SSL passthrough), terminate
TLS and relay the bytes inside to a TCP backend (a Gateway API TLS listener
with tls.mode Terminate), or hand the connection to TLS termination for HTTP.

Handing over replaces the transport's protocol with the terminating one and
replays the bytes read so far, so the terminated path costs one extra
C{dataReceived} per connection and nothing per request.  A passed-through
connection becomes a TCP stream relay (L{ingress.proxy.streams.tcp}): backpressure,
half-close, connect and idle timeouts, a retry on another endpoint, passive
health, the stream metrics (route C{passthrough/<namespace>/<service>:<port>})
and the shutdown drain come with it.  A ClientHello offering C{acme-tls/1} for a
name with a TLS-ALPN-01 challenge pending gets the challenge's certificate
(L{ingress.proxy.tls.acme_tls}); only such a name has its ALPN list read.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from twisted.internet.interfaces import IDelayedCall, IOpenSSLServerConnectionCreator, IProtocolFactory
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from ingress.model import ObjectRef
from ingress.observe.metrics import Metrics
from ingress.proxy.message.responses import plain_http_on_tls_port
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.tcp import TCPRelay, TCPStreamFactory
from ingress.proxy.tls import sni
from ingress.proxy.tls.acme_tls import ACME_TLS_1, NO_CHALLENGES, ChallengeContexts, challenge_protocol
from ingress.proxy.transport import IConnectionTransport, hand_over
from ingress.routing.streams import TCP, StreamRoute
from ingress.routing.upstream import Upstream
from ingress.runtime.live import TableView
from ingress.speedups.tlsdirect import tls_factory

# An HTTP request line's start: a method token and a space (a TLS record starts with byte 22).
_PLAIN_HTTP = re.compile(rb"[A-Z]{3,16} ")
_PLAIN_HTTP_READ_LIMIT = 16384


class TLSFrontFactory(Factory):
    """Wraps the terminating factory (ingress.speedups.tlsdirect's) with SNI-based passthrough."""

    noisy = False

    def __init__(
        self,
        terminate: IProtocolFactory,
        live: TableView,
        pool: UpstreamPool,
        reactor: Any,
        hello_timeout: float,
        metrics: Metrics,
        server_name: bytes = b"twingress",
        creator: Optional[IOpenSSLServerConnectionCreator] = None,
        challenges: ChallengeContexts = NO_CHALLENGES,
    ) -> None:
        self.terminate = terminate
        self.challenges = challenges  # TLS-ALPN-01: the pending challenges' certificates by name (L{acme_tls})
        self.creator = creator  # the certificates by SNI, for TLS terminated to a TCP backend (None: not done here)
        self.live = live
        self.pool = pool
        self.reactor = reactor
        self.hello_timeout = hello_timeout
        self.metrics = metrics
        self.server_name = server_name
        self.passthrough = TCPStreamFactory(None, pool, metrics, reactor)  # its relays: what the drain waits for
        self._routes: dict[tuple[Upstream, str], StreamRoute] = {}

    def doStart(self) -> None:
        self.terminate.doStart()

    def doStop(self) -> None:
        self.terminate.doStop()

    def route_for(self, upstream: Upstream, kind: str = "passthrough") -> StreamRoute:
        """
        The stream route of a passthrough (or terminated) upstream, one per upstream value and kind: the
        metrics label is "passthrough/<key>" (or "tls-terminated/<key>").
        """
        route = self._routes.get((upstream, kind))
        if route is None:
            if len(self._routes) > 10_000:  # upstreams of old tables: start over rather than grow
                self._routes.clear()
            name = f"{kind}/{upstream.key}"
            route = self._routes[(upstream, kind)] = StreamRoute(TCP, 0, name, ObjectRef("Passthrough", "", upstream.key), upstream)
        return route

    def buildProtocol(self, addr: Any) -> TLSFront:
        front = TLSFront(self)
        front.address = addr
        return front


class TLSFront(Protocol):
    """Buffers the first record until the server name is known, then steps aside."""

    transport: IConnectionTransport  # the listener's TCP connection, or the PROXY-protocol wrapper around it

    def __init__(self, factory: TLSFrontFactory) -> None:
        self.factory = factory
        self.address: Any = None
        self._buffer = b""
        self._timer: Optional[IDelayedCall] = None

    def connectionMade(self) -> None:
        self._timer = self.factory.reactor.callLater(self.factory.hello_timeout, self.transport.abortConnection)

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        status, name = sni.client_hello_server_name(self._buffer)
        if status == sni.NEED_MORE and len(self._buffer) < sni.MAX_RECORD:
            return
        if status == sni.NOT_TLS and _PLAIN_HTTP.match(self._buffer):
            self._answer_plain_http()
            return
        self._cancel_timer()
        challenges = self.factory.challenges.contexts
        if challenges and name in challenges and sni.client_hello_offers(self._buffer, ACME_TLS_1):
            self._hand_to(challenge_protocol(challenges[name], self.address, self.factory.reactor, self.factory.hello_timeout))
            return
        table = self.factory.live.table
        if table.addresses:  # Gateways with addresses of their own: the address reached decides what the name means
            table = table.addresses.get(str(getattr(self.transport.getHost(), "host", "")), table)
        if name and table.rejects_unknown_tls_names and not table.serves_tls_name(name):
            self.transport.abortConnection()  # a Gateway TLS listener's name without a route: refused (reset)
            return
        if name and table.reads_server_name:
            upstream = table.passthrough_for(name)
            if upstream is None:
                stream = table.terminated_for(name)
                if stream is not None:
                    self._terminate_stream(stream)
                    return
        else:
            upstream = None
        if upstream is None:
            self._terminate()
            return
        buffered, self._buffer = self._buffer, b""
        self.factory.passthrough.adopt(self.transport, self.factory.route_for(upstream), buffered)

    def _answer_plain_http(self) -> None:
        """
        Plain HTTP sent to the TLS port: a 400 in clear text that says so, as
        nginx answers, instead of a failed handshake the client cannot read.
        The head is read first (up to a limit), so that closing does not reset
        the connection under the answer.
        """
        if b"\r\n\r\n" not in self._buffer and len(self._buffer) < _PLAIN_HTTP_READ_LIMIT:
            return
        self._cancel_timer()
        self._buffer = b""
        self.factory.metrics.malformed_requests.labels("400").inc()
        self.transport.write(plain_http_on_tls_port(self.factory.server_name))
        self.transport.loseConnection()

    def _terminate(self) -> None:
        """Give the connection (and what was read) to the terminating protocol."""
        inner = self.factory.terminate.buildProtocol(self.address)
        if inner is None:  # the terminating factory refused the connection
            self.transport.abortConnection()
            return
        hand_over(self.transport, inner)
        inner.makeConnection(self.transport)
        buffered, self._buffer = self._buffer, b""
        inner.dataReceived(buffered)

    def _terminate_stream(self, upstream: Upstream) -> None:
        """TLS terminated here with the name's certificate; the bytes inside go to C{upstream} as a TCP stream."""
        creator = self.factory.creator
        if creator is None:
            self._terminate()
            return
        relays = _OneRelay(self.factory.passthrough, self.factory.route_for(upstream, "tls-terminated"))
        inner = tls_factory(creator, False, relays).buildProtocol(self.address)
        hand_over(self.transport, inner)
        inner.makeConnection(self.transport)
        buffered, self._buffer = self._buffer, b""
        inner.dataReceived(buffered)

    def _hand_to(self, inner: Protocol) -> None:
        """Give the connection (and what was read) to C{inner}."""
        hand_over(self.transport, inner)
        inner.makeConnection(self.transport)
        buffered, self._buffer = self._buffer, b""
        inner.dataReceived(buffered)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_timer()


class _OneRelay(Factory):
    """The protocol inside one terminated TLS connection: the client side of a TCP relay to the route's upstream."""

    noisy = False

    def __init__(self, streams: TCPStreamFactory, route: StreamRoute) -> None:
        self.streams = streams
        self.route = route

    def buildProtocol(self, addr: Any) -> Protocol:
        return TCPRelay(self.streams, self.route).client_side
