"""
In-memory pieces for driving a real L{ingress.proxy.http.exchange.Exchange}: a listener's shared
state over a routing table built from objects (tests.unit.objects), on Twisted's
MemoryReactorClock, and endpoints answered over StringTransports.

What the exchange asks of the network goes to the memory reactor (C{connectTCP} is recorded):
L{Endpoints} connects or refuses each recorded connection and answers with raw HTTP/1.1 bytes,
so the upstream side runs its real code (pool, UpstreamConnection, framing) without a socket.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from ingress.observe.metrics import Metrics
from ingress.proxy.http import h1
from ingress.proxy.http.factory import HTTPProxyFactory
from ingress.proxy.http.guards import Guards
from ingress.proxy.http.ratelimit import RequestRates
from ingress.proxy.http.settings import ProxySettings
from ingress.proxy.http.upstream import UpstreamPool
from ingress.routing import RoutingTable
from tests.unit.objects import endpoints, ingress, path, rule, service, table

NGINX = "nginx.ingress.kubernetes.io/"


class Live:
    """A listener's view of the table live now."""

    def __init__(self, routes: RoutingTable) -> None:
        self.table = routes


class Reactor(MemoryReactorClock):
    """
    A memory reactor with a loop step: what the proxy runs before the next poll (its HTTP/2 writes) runs at each
    C{doIteration}, the step of ingress.speedups.reactorstep or, with the speed-ups off, the C{callLater(0)} calls due.
    """

    def doIteration(self, delay: float | None) -> None:
        self.advance(0)  # what a real reactor's iteration runs besides its poll: the calls due now


class Transport(StringTransport):
    """A StringTransport with what a TCP connection also offers the proxy."""

    def setTcpNoDelay(self, enabled: bool) -> None:
        pass

    def abortConnection(self) -> None:
        self.loseConnection()


def routes(*extra: dict[str, Any], annotations: dict[str, str] | None = None, addresses: tuple[str, ...] = ("10.0.0.1", "10.0.0.2")) -> RoutingTable:
    """a.test/ to the service "web" (its endpoints: C{addresses}, port 8080), and C{extra} objects."""
    return table(
        ingress("web", rule("a.test", path("/")), annotations=annotations),
        service("web"),
        endpoints("web", *addresses),
        *extra,
    ).table


def shared(routes: RoutingTable, settings: ProxySettings | None = None) -> tuple[HTTPProxyFactory, Reactor]:
    """A listener's shared state over C{routes}, on a memory reactor (its rate limits on the reactor's clock)."""
    reactor = Reactor()
    settings = settings or ProxySettings()
    pool = UpstreamPool(reactor, settings)  # type: ignore[arg-type]  # a memory reactor does what the process reactor does here
    guards = Guards(reactor, RequestRates(reactor.seconds))
    return HTTPProxyFactory(Live(routes), pool, settings, Metrics(), reactor, guards=guards), reactor


def request(target: bytes = b"/", host: bytes = b"a.test", method: bytes = b"GET", fields: bytes = b"") -> h1.Head:
    return h1.parse_request_head(b"%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (method, target, host, fields), 100)


class Endpoints:
    """The connections the proxy opened (in the memory reactor), connected, refused and answered by the test."""

    def __init__(self, reactor: MemoryReactorClock) -> None:
        self.reactor = reactor
        self.transports: list[Transport] = []
        self.protocols: list[Any] = []

    def addresses(self) -> list[tuple[str, int]]:
        """Where the proxy tried to connect, in order."""
        return [(host, port) for host, port, *_ in self.reactor.tcpClients]

    def refuse(self, index: int = -1) -> None:
        factory = self.reactor.tcpClients[index][2]
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError("refused")))

    def accept(self, index: int = -1) -> Transport:
        """The connection made: what the proxy sent on it is in the returned transport."""
        protocol = self.reactor.tcpClients[index][2].buildProtocol(None)
        transport = Transport()
        protocol.makeConnection(transport)
        self.transports.append(transport)
        self.protocols.append(protocol)
        return transport

    def answer(self, response: bytes, index: int = -1) -> None:
        self.protocols[index].dataReceived(response)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
