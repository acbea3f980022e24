"""
The proxy in memory: one listener's L{HTTPProxyFactory} on a fake clock, its client connections
and the upstream connections it opens on L{StringTransport}s, for the request path's logic.

Everything goes through the surfaces the reactor itself uses: the factory's C{buildProtocol},
a protocol's C{makeConnection}/C{dataReceived}/C{connectionLost}, the C{connectTCP} calls the
proxy makes (L{MemoryReactorClock.tcpClients}) answered by the connector factory they name, and
the clock for every timeout.  No exchange, stream or pool internals are touched, so these tests
hold while the request path is rebuilt inside.  Kernel behaviour (TLS, backpressure on a full
socket, workers, drain) stays with the tests on real sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone, ConnectionLost, ConnectionRefusedError
from twisted.internet.interfaces import IProtocol, IProtocolFactory
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from ingress.observe.metrics import Metrics
from ingress.proxy.http1.factory import HTTPProxyFactory
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.runtime.live import LiveTable
from tests.unit.objects import endpoints, ingress, path, rule, service, table

HOST = "echo.test"
POD = "10.244.0.5"
POD_PORT = 8080
CLIENT = IPv4Address("TCP", "10.0.0.9", 40000)
LISTENER = IPv4Address("TCP", "127.0.0.1", 8080)


class Reactor(MemoryReactorClock):
    """
    A L{MemoryReactorClock} with a loop step: what the proxy asks to run "before the next poll"
    (L{ingress.speedups.reactorstep.run_before_next_poll}: an HTTP/2 connection's frames) runs at
    L{turn}, with the speed-ups on (the step) or off (a C{callLater(0)}).
    """

    def doIteration(self, delay: Optional[float]) -> None:
        """Nothing to poll in memory; the speed-ups wrap this to run their calls first."""

    def turn(self) -> None:
        """One loop iteration: the calls due before the poll, then the timers due now."""
        self.doIteration(0)
        self.advance(0)


class Wire(StringTransport):
    """
    A L{StringTransport} that takes the TCP option the proxy sets on its sockets and, as a
    reactor does, tells its protocol the connection is lost at the next turn after a close.
    """

    no_delay = False

    def __init__(self, reactor: Reactor, lost: Callable[[Failure], None], **addresses: Any) -> None:
        super().__init__(**addresses)
        self._reactor, self._lost = reactor, lost

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.no_delay = enabled

    def unregisterProducer(self) -> None:
        """As a TCP transport does, none registered is no error (the proxy unregisters at its close and again at the loss)."""
        self.producer = self.streaming = None

    def loseConnection(self) -> None:
        if not self.disconnecting:
            self._reactor.callLater(0, self._lost, Failure(ConnectionDone()))
        super().loseConnection()

    def take(self) -> bytes:
        """What was written since the last take."""
        data = self.value()
        self.clear()
        return data


class Upstream:
    """One connection the proxy asked for (C{connectTCP}): accept it in memory, or refuse it."""

    def __init__(self, reactor: Reactor, index: int) -> None:
        self.host, self.port, self._factory, self.timeout, _ = reactor.tcpClients[index]
        self._connector = reactor.connectors[index]
        self.protocol: Optional[IProtocol] = None
        self.wire = Wire(reactor, self._end, peerAddress=IPv4Address("TCP", self.host, self.port))
        self._ended = False

    def accept(self) -> Upstream:
        """The endpoint accepts: the proxy's upstream protocol is connected to L{wire}."""
        self.protocol = self._factory.buildProtocol(IPv4Address("TCP", self.host, self.port))
        assert self.protocol is not None
        self.protocol.makeConnection(self.wire)
        return self

    def refuse(self) -> None:
        """The endpoint refuses the connection (nothing listens on its port)."""
        self._factory.clientConnectionFailed(self._connector, Failure(ConnectionRefusedError()))

    def received(self) -> bytes:
        """What the proxy sent this endpoint since the last look."""
        return self.wire.take()

    def respond(self, data: bytes) -> None:
        assert self.protocol is not None
        self.protocol.dataReceived(data)

    def close(self) -> None:
        """The endpoint closes its side: the proxy's protocol hears the connection is lost."""
        self._end(Failure(ConnectionDone()))

    def _end(self, reason: Failure) -> None:
        if self._ended or self.protocol is None:
            return
        self._ended = True
        self.protocol.connectionLost(reason)
        self._factory.clientConnectionLost(self._connector, reason)

    @property
    def closed(self) -> bool:
        """The proxy closed (or aborted) this connection."""
        return bool(self.wire.disconnecting)

    @property
    def aborted(self) -> bool:
        """The proxy aborted this connection (no clean close: it held half a request or response)."""
        return bool(self.wire.disconnected)


class Client:
    """One client connection to the listener, on a L{Wire}."""

    def __init__(self, factory: IProtocolFactory, reactor: Reactor) -> None:
        self.protocol = factory.buildProtocol(CLIENT)
        assert self.protocol is not None
        self.wire = Wire(reactor, self._end, hostAddress=LISTENER, peerAddress=CLIENT)
        self._ended = False
        self.protocol.makeConnection(self.wire)

    def _receiver(self) -> IProtocol:
        """The protocol the wire's reads go to: after a switch to HTTP/2, the one it was handed to."""
        receiver: IProtocol = getattr(self.wire, "protocol", None) or self.protocol
        return receiver

    def send(self, data: bytes) -> None:
        self._receiver().dataReceived(data)

    def received(self) -> bytes:
        return self.wire.take()

    def leave(self) -> None:
        """The client goes away: its connection is lost."""
        self._end(Failure(ConnectionLost()))

    def _end(self, reason: Failure) -> None:
        if not self._ended:
            self._ended = True
            self._receiver().connectionLost(reason)

    @property
    def closed(self) -> bool:
        return bool(self.wire.disconnecting)


def echo_objects(host: str = HOST, **annotations: str) -> tuple[dict[str, Any], ...]:
    """An Ingress routing C{host} to the Service "web", whose one ready endpoint is L{POD}:L{POD_PORT}."""
    return (
        ingress("web", rule(host, path("/")), annotations=dict(annotations)),
        service("web"),
        endpoints("web", POD, ports=(("http", POD_PORT),)),
    )


class InMemoryProxy:
    """An HTTP listener's factory on C{objects}' table, a fake reactor, and the upstream connections it opened."""

    def __init__(self, *objects: dict[str, Any], settings: Optional[ProxySettings] = None, http2: Optional[HTTP2Settings] = None) -> None:
        self.reactor = Reactor()
        self.live = LiveTable()
        self.live.swap(table(*(objects or echo_objects())).table)
        self.metrics = Metrics()
        settings = settings if settings is not None else ProxySettings()
        pool = UpstreamPool(self.reactor, settings)
        self.factory = HTTPProxyFactory(self.live, pool, settings, self.metrics, self.reactor, http2=http2)
        self._seen = 0

    def connect(self) -> Client:
        return Client(self.factory, self.reactor)

    def connections_asked(self) -> int:
        return len(self.reactor.tcpClients)

    def upstream(self) -> Upstream:
        """The next connection the proxy asked for (in the order asked); fails if it asked for none."""
        assert len(self.reactor.tcpClients) > self._seen, f"the proxy asked for {len(self.reactor.tcpClients)} upstream connections, {self._seen} taken"
        upstream = Upstream(self.reactor, self._seen)
        self._seen += 1
        return upstream


def parse_head(data: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """A head's first line, its fields (names lower-cased; the last of a name wins) and the bytes after it."""
    head, _, rest = data.partition(b"\r\n\r\n")
    first, *lines = head.split(b"\r\n")
    fields = {}
    for line in lines:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    return first, fields, rest


def status_of(data: bytes) -> int:
    """An HTTP/1.1 response's status code."""
    return int(data.split(b" ", 2)[1])
