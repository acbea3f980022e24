# -*- test-case-name: tests.proxy.test_tls_passthrough -*-
"""
The front door of the TLS listener: read the ClientHello's server name, then
either pass the raw stream through to a backend (SSL passthrough) or hand the
connection to TLS termination.

Handing over replaces the transport's protocol with the terminating one and
replays the bytes read so far, so the terminated path costs one extra
C{dataReceived} per connection and nothing per request.  A passed-through
connection becomes a TCP stream relay (L{ingress.proxy.streams.tcp}): backpressure,
half-close, connect and idle timeouts, a retry on another endpoint, passive
health, the stream metrics (route C{passthrough/<namespace>/<service>:<port>})
and the shutdown drain come with it.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet import tcp
from twisted.internet.interfaces import IDelayedCall, IProtocolFactory
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from ingress.model import ObjectRef
from ingress.observe.metrics import Metrics
from ingress.process.live import LiveTable
from ingress.proxy.http.upstream import UpstreamPool
from ingress.proxy.streams.tcp import TCPStreamFactory
from ingress.proxy.tls import sni
from ingress.routing.route import Upstream
from ingress.routing.streams import TCP, StreamRoute


class TLSFrontFactory(Factory):
    """Wraps the terminating factory (a TLSMemoryBIOFactory) with SNI-based passthrough."""

    noisy = False

    def __init__(
        self, terminate: IProtocolFactory, live: LiveTable, pool: UpstreamPool, reactor: Any, hello_timeout: float, metrics: Metrics
    ) -> None:
        self.terminate = terminate
        self.live = live
        self.pool = pool
        self.reactor = reactor
        self.hello_timeout = hello_timeout
        self.passthrough = TCPStreamFactory(None, pool, metrics, reactor)  # its relays: what the drain waits for
        self._routes: dict[Upstream, StreamRoute] = {}

    def doStart(self) -> None:
        self.terminate.doStart()

    def doStop(self) -> None:
        self.terminate.doStop()

    def route_for(self, upstream: Upstream) -> StreamRoute:
        """The stream route of a passthrough upstream (one per upstream value: the metrics label is its key)."""
        route = self._routes.get(upstream)
        if route is None:
            if len(self._routes) > 10_000:  # upstreams of old tables: start over rather than grow
                self._routes.clear()
            name = f"passthrough/{upstream.key}"
            route = self._routes[upstream] = StreamRoute(TCP, 0, name, ObjectRef("Passthrough", "", upstream.key), upstream)
        return route

    def buildProtocol(self, addr: Any) -> TLSFront:
        front = TLSFront(self)
        front.address = addr
        return front


class TLSFront(Protocol):
    """Buffers the first record until the server name is known, then steps aside."""

    transport: tcp.Server  # the listener's own TCP connection: its protocol is replaced below

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
        self._cancel_timer()
        upstream = self.factory.live.table.passthrough_for(name) if name and self.factory.live.table.passthrough else None
        if upstream is None:
            self._terminate()
            return
        buffered, self._buffer = self._buffer, b""
        self.factory.passthrough.adopt(self.transport, self.factory.route_for(upstream), buffered)

    def _terminate(self) -> None:
        """Give the connection (and what was read) to the terminating protocol."""
        inner = self.factory.terminate.buildProtocol(self.address)
        if inner is None:  # the terminating factory refused the connection
            self.transport.abortConnection()
            return
        self.transport.protocol = inner
        inner.makeConnection(self.transport)
        buffered, self._buffer = self._buffer, b""
        inner.dataReceived(buffered)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_timer()
