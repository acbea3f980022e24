# -*- test-case-name: tests.proxy.test_tcp_streams -*-
"""
The TCP stream proxy: each accepted connection is spliced to one upstream
endpoint, byte for byte, both ways.

Backpressure is Twisted's: each transport is registered as the streaming
producer of the other, so a full send buffer on one side stops reads on the
other and memory stays flat whatever the transfer size.  Half-close is
passed on (a client's EOF shuts down the write side towards the upstream and
vice versa), so request/response protocols that signal "done" with EOF work;
the connection ends when both directions are done, or when either side is
reset, or after C{idle_timeout} seconds without a byte.

Endpoints are chosen by the shared L{UpstreamPool}: round-robin with passive
health (an endpoint that refused or timed out is skipped for a while, and a
failed connect is retried once on another endpoint; nothing of the client's
has been sent yet at that point, so the retry is safe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from twisted.internet import tcp
from twisted.internet.error import TimeoutError as ConnectTimeout
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import ClientFactory, Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ingress.observe.metrics import Metrics
from ingress.proxy.idle import IdleTimer
from ingress.proxy.request.upstream import Address, UpstreamPool
from ingress.proxy.streams import proxyproto
from ingress.proxy.transport import hand_over
from ingress.routing.streams import TCP, StreamRoute
from ingress.speedups.fastwrite import direct_writer

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

READ_SIZE = 1 << 18  # bytes per recv(); also how much a transport buffers before it pauses its producer


class TCPStreamFactory(Factory):
    """
    The factory of one TCP stream listener.

    C{route} is replaced when the table moves the listener's traffic: new
    connections use the new route, open ones keep the one they started with.
    """

    noisy = False

    def __init__(self, route: Optional[StreamRoute], pool: UpstreamPool, metrics: Metrics, reactor: Any) -> None:
        self.route = route  # None for the TLS passthrough, whose route is chosen per connection
        self.pool = pool
        self.metrics = metrics
        self.reactor = reactor
        self.relays: set[TCPRelay] = set()

    def buildProtocol(self, addr: Any) -> _Side:
        assert self.route is not None
        return TCPRelay(self, self.route).client_side

    def adopt(self, transport: Any, route: StreamRoute, first_bytes: bytes) -> None:
        """
        Splice an already accepted connection (the TLS front door, once the
        SNI name chose passthrough): C{first_bytes}, read before the choice,
        go to the upstream first.
        """
        relay = TCPRelay(self, route, first_bytes)
        hand_over(transport, relay.client_side)
        relay.client_side.makeConnection(transport)

    def abort_all(self) -> int:
        """Cut off every open connection (the listener was removed and its drain time is over)."""
        relays = list(self.relays)
        for relay in relays:
            relay.abort()
        return len(relays)


@implementer(IHalfCloseableProtocol)
class _Side(Protocol):
    """One of the two connections of a relay; its bytes go to the other's transport."""

    transport: tcp.Connection  # streams are plain TCP: its read size is set below

    def __init__(self, relay: TCPRelay, is_client: bool) -> None:
        self.relay = relay
        self.is_client = is_client
        self.forward: Callable[[bytes], None] = _discard
        self.count: Callable[[float], None] = _discard_count
        self.eof = False

    def connectionMade(self) -> None:
        self.transport.bufferSize = READ_SIZE
        self.transport.setTcpNoDelay(True)  # interactive protocols must not wait for Nagle
        if self.is_client:
            self.relay.client_connected(self.transport)
        else:
            self.relay.upstream_connected(self.transport)

    def dataReceived(self, data: bytes) -> None:
        self.relay.last_active = self.relay.clock()
        self.count(len(data))
        self.forward(data)

    def readConnectionLost(self) -> None:
        if not self.eof:
            self.eof = True
            self.relay.eof(self.is_client)

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.relay.side_lost(self.is_client)


def _discard(data: bytes) -> None:
    pass


def _discard_count(amount: float) -> None:
    pass


class TCPRelay:
    """One client connection and its upstream connection, joined."""

    def __init__(self, factory: TCPStreamFactory, route: StreamRoute, first_bytes: bytes = b"") -> None:
        self.factory = factory
        self.route = route
        self.first_bytes = first_bytes
        self.clock: Callable[[], float] = factory.reactor.seconds
        self.last_active = 0.0
        self.client_side = _Side(self, is_client=True)
        self.upstream_side = _Side(self, is_client=False)
        self.client: Any = None
        self.upstream: Any = None
        self.attempts = 0
        self.tried: Optional[Address] = None
        self.connecting: Any = None
        self.closed = False
        self._idle: Optional[IdleTimer] = None

    # -- setting up

    def client_connected(self, transport: Any) -> None:
        self.client = transport
        transport.pauseProducing()  # nothing is read until the upstream is there to take it
        self.factory.relays.add(self)
        metrics = self.factory.metrics
        metrics.stream_connections.labels(self.route.name, TCP).inc()
        metrics.stream_active.labels(self.route.name, TCP).inc()
        self._connect()

    def _connect(self) -> None:
        pool = self.factory.pool
        address = pool.choose(self.route.upstream, exclude=self.tried)
        if address is None:
            self._upstream_failed("no-endpoint", "no ready endpoint" if self.tried is None else "no other endpoint")
            return
        self.attempts += 1
        self.tried = address
        self.connecting = _UpstreamConnector(self, address)
        self.factory.reactor.connectTCP(address[0], address[1], self.connecting, timeout=pool.settings.connect_timeout)

    def upstream_connected(self, transport: Any) -> None:
        self.connecting = None
        if self.closed:
            transport.abortConnection()
            return
        self.upstream = transport
        if self.tried is not None:
            self.factory.pool.mark_up(self.tried)
        client = self.client
        if self.route.proxy_protocol:
            transport.write(proxyproto.header(self.route.proxy_protocol, _ip_port(client.getPeer()), _ip_port(client.getHost())))
        if self.first_bytes:
            transport.write(self.first_bytes)
            self.first_bytes = b""
        bytes_ = self.factory.metrics.stream_bytes
        self.client_side.forward = direct_writer(transport)
        self.client_side.count = bytes_.labels(self.route.name, TCP, "upstream").inc
        self.upstream_side.forward = direct_writer(client)
        self.upstream_side.count = bytes_.labels(self.route.name, TCP, "downstream").inc
        client.registerProducer(transport, True)
        transport.registerProducer(client, True)
        self.last_active = self.clock()
        self._idle = IdleTimer(self.factory.reactor, self.route.idle_timeout, lambda: self.last_active, self._idle_out)
        client.resumeProducing()

    def connect_failed(self, address: Address, reason: Failure) -> None:
        self.connecting = None
        if self.closed:
            return
        pool = self.factory.pool
        pool.mark_down(address)
        timed_out = reason.check(ConnectTimeout) is not None
        detail = f"{address[0]}:{address[1]}: {reason.getErrorMessage()}"
        if self.attempts < 2 and len(self.route.upstream.targets) > 1:
            self._count_error("connect-timeout" if timed_out else "connect")
            log.info("stream {route}: upstream {detail}; trying another endpoint", route=self.route.name, detail=detail)
            self._connect()
            return
        self._upstream_failed("connect-timeout" if timed_out else "connect", detail)

    def _upstream_failed(self, reason: str, detail: str) -> None:
        self._count_error(reason)
        log.info("stream {route}: {detail}; closing the client connection", route=self.route.name, detail=detail)
        self.abort()

    def _count_error(self, reason: str) -> None:
        self.factory.metrics.stream_upstream_errors.labels(self.route.name, TCP, reason).inc()

    # -- running

    def eof(self, from_client: bool) -> None:
        """One direction is done: pass the EOF on, and end the relay when both are."""
        reader, writer = (self.client, self.upstream) if from_client else (self.upstream, self.client)
        if writer is None:
            self.abort()
            return
        writer.unregisterProducer()  # the reader has nothing more to produce into it
        if self.client_side.eof and self.upstream_side.eof:
            self._close()
        else:
            writer.loseWriteConnection()

    def _idle_out(self) -> None:
        """No byte moved either way for idle_timeout."""
        log.info("stream {route}: idle for {seconds}s, closing", route=self.route.name, seconds=self.route.idle_timeout)
        self._close()

    # -- ending

    def _close(self) -> None:
        """Both sides closed after their buffered bytes are written."""
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.loseConnection()
        self._finished()

    def abort(self) -> None:
        """Both sides cut off at once (upstream failure, drain over)."""
        self._cancel_connect()
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.abortConnection()
        self._finished()

    def side_lost(self, is_client: bool) -> None:
        """A connection is gone (closed by us, reset, or both halves done): the other goes too."""
        other = self.upstream if is_client else self.client
        if is_client:
            self.client = None
        else:
            self.upstream = None
        if other is not None:
            other.loseConnection()
        if is_client:
            self._cancel_connect()
        if self.client is None and self.upstream is None:
            self._finished()

    def _cancel_connect(self) -> None:
        connecting, self.connecting = self.connecting, None
        if connecting is not None:
            connecting.cancel()

    def _finished(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._idle is not None:
            self._idle.cancel()
        self.factory.relays.discard(self)
        self.factory.metrics.stream_active.labels(self.route.name, TCP).dec()


class _UpstreamConnector(ClientFactory):
    """Connects one relay's upstream side and reports a failure to it."""

    noisy = False

    def __init__(self, relay: TCPRelay, address: Address) -> None:
        self.relay = relay
        self.address = address
        self.connector: Any = None
        self.cancelled = False

    def startedConnecting(self, connector: Any) -> None:
        self.connector = connector

    def cancel(self) -> None:
        """Stop connecting because the client is gone: not the endpoint's fault, so no failure is reported."""
        self.cancelled = True
        if self.connector is not None and self.connector.state == "connecting":
            self.connector.stopConnecting()

    def buildProtocol(self, addr: Any) -> _Side:
        return self.relay.upstream_side

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        if not self.cancelled:
            self.relay.connect_failed(self.address, reason)


def _ip_port(address: Any) -> Optional[Address]:
    """(host, port) of an IPv4/IPv6 address object, None for anything else (UNIX sockets)."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    return (host, port) if isinstance(host, str) and isinstance(port, int) else None
