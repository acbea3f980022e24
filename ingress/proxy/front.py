# -*- test-case-name: tests.proxy.test_tls_passthrough -*-
"""
The front door of the TLS listener: read the ClientHello's server name, then
either pass the raw stream through to a backend (SSL passthrough) or hand the
connection to TLS termination.

Handing over replaces the transport's protocol with the terminating one and
replays the bytes read so far, so the terminated path costs one extra
C{dataReceived} per connection and nothing per request.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import ClientFactory, Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from ingress.live import LiveTable
from ingress.proxy import sni
from ingress.proxy.upstream import UpstreamPool

log = Logger()


class TLSFrontFactory(Factory):
    """Wraps the terminating factory (a TLSMemoryBIOFactory) with SNI-based passthrough."""

    noisy = False

    def __init__(self, terminate: Factory, live: LiveTable, pool: UpstreamPool, reactor: Any, hello_timeout: float) -> None:
        self.terminate = terminate
        self.live = live
        self.pool = pool
        self.reactor = reactor
        self.hello_timeout = hello_timeout

    def doStart(self) -> None:
        self.terminate.doStart()

    def doStop(self) -> None:
        self.terminate.doStop()

    def buildProtocol(self, addr: Any) -> "TLSFront":
        front = TLSFront(self)
        front.address = addr
        return front


class TLSFront(Protocol):
    """Buffers the first record until the server name is known, then steps aside."""

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
        address = self.factory.pool.choose(upstream)
        if address is None:
            log.info("passthrough for {name}: no ready endpoint", name=name)
            self.transport.abortConnection()
            return
        self._pass_through(address)

    def _terminate(self) -> None:
        """Give the connection (and what was read) to the terminating protocol."""
        inner = self.factory.terminate.buildProtocol(self.address)
        self.transport.protocol = inner
        inner.makeConnection(self.transport)
        buffered, self._buffer = self._buffer, b""
        inner.dataReceived(buffered)

    def _pass_through(self, address: tuple[str, int]) -> None:
        splice = Splice(self.transport, self._buffer)
        self._buffer = b""
        self.transport.protocol = splice.client_side
        self.transport.pauseProducing()  # until the backend answers the connect
        self.factory.reactor.connectTCP(address[0], address[1], _SpliceConnector(splice), timeout=self.factory.pool.settings.connect_timeout)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_timer()


class Splice:
    """Two TCP connections joined byte for byte, each the other's producer (backpressure both ways)."""

    def __init__(self, client: Any, first_bytes: bytes) -> None:
        self.client = client
        self.first_bytes = first_bytes
        self.backend: Any = None
        self.client_side = _SpliceSide(self, is_client=True)

    def backend_connected(self, transport: Any) -> None:
        self.backend = transport
        transport.write(self.first_bytes)
        self.first_bytes = b""
        self.client.registerProducer(transport, True)
        transport.registerProducer(self.client, True)
        self.client.resumeProducing()

    def closed(self, is_client: bool) -> None:
        other = self.backend if is_client else self.client
        if other is not None:
            other.loseConnection()


class _SpliceSide(Protocol):
    def __init__(self, splice: Splice, is_client: bool) -> None:
        self.splice = splice
        self.is_client = is_client

    def dataReceived(self, data: bytes) -> None:
        other = self.splice.backend if self.is_client else self.splice.client
        if other is not None:
            other.write(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.splice.closed(self.is_client)


class _SpliceConnector(ClientFactory):
    noisy = False

    def __init__(self, splice: Splice) -> None:
        self.splice = splice

    def buildProtocol(self, addr: Any) -> _SpliceSide:
        side = _SpliceSide(self.splice, is_client=False)
        original = side.makeConnection

        def connected(transport: Any) -> None:
            original(transport)
            self.splice.backend_connected(transport)

        side.makeConnection = connected  # type: ignore[method-assign]
        return side

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        log.info("passthrough backend unreachable: {reason}", reason=reason.getErrorMessage())
        self.splice.client.abortConnection()
