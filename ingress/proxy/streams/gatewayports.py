# -*- test-case-name: tests.proxy.test_gateway_ports -*-
"""
Gateway API listeners on ports of their own: the HTTP (or TLS-terminating) factories that answer
there, each reading only its port's table (C{RoutingTable.gateway_ports}).

Such a listener reaches the proxy as a stream route with C{serves} set, so the stream listener
manager (L{ingress.proxy.streams.listeners}) opens, moves and closes its port as it does any
stream port, in one process and in every worker, on the primary's sockets of the port
(L{ingress.process.streamsockets}: a SO_REUSEPORT group, handed over with C{--handover}), and a
port that cannot be bound is reported the same way.  Here is what answers on the port: the same protocol factories as the
C{--http} and C{--https} listeners, given a view of the live table that is the port's table.
Certificates of HTTPS ports are prepared with every table, off the reactor thread, as the main
listener's are (L{PortCertificates}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from twisted.internet.interfaces import IProtocolFactory

from ingress.proxy.drainable import HTTPConnections
from ingress.proxy.http1.factory import HTTPProxyFactory
from ingress.proxy.streams.tcp import TCPStreamFactory
from ingress.proxy.tls.termination import CertificateStore
from ingress.routing.streams import StreamRoute
from ingress.routing.table import EMPTY_TABLE, RoutingTable
from ingress.runtime.live import LiveTable


class PortView:
    """The live table as one Gateway port sees it: that port's table, swapped with the live one."""

    def __init__(self, live: LiveTable, port: int) -> None:
        self.live = live
        self.port = port

    @property
    def table(self) -> RoutingTable:
        return self.live.table.gateway_ports.get(self.port, EMPTY_TABLE)

    @property
    def ready(self) -> bool:
        return self.live.ready


class GatewayListener:
    """
    A stream listener handler (route, relays, abort_all, drain) that answers HTTP: C{factory} is what
    listens on the port, C{http} the HTTP factory whose connections it counts.
    """

    def __init__(self, route: StreamRoute, factory: IProtocolFactory, http: HTTPProxyFactory, streams: Optional[TCPStreamFactory] = None) -> None:
        self.route = route
        self.factory = factory
        self.http = http
        self.streams = streams  # an HTTPS port's TLS front: connections passed through or terminated to TCP backends
        self._connections = HTTPConnections(http)

    @property
    def relays(self) -> list[Any]:
        """The open client connections, HTTP and streams (what the stream listener manager counts)."""
        return [*self.http.connections, *(self.streams.relays if self.streams is not None else ())]

    def drain(self) -> None:
        """Idle keep-alive connections close now; busy ones after their response."""
        self._connections.drain()

    def abort_all(self) -> int:
        return self._connections.abort_all() + (self.streams.abort_all() if self.streams is not None else 0)


class PortCertificates:
    """One certificate store per HTTPS Gateway port, prepared with each table like the main listener's."""

    def __init__(self, make_store: Callable[[], CertificateStore]) -> None:
        self.make_store = make_store
        self.stores: dict[int, CertificateStore] = {}

    def prepare(self, table: RoutingTable) -> Callable[[], None]:
        """Contexts for every HTTPS port of C{table} (build thread); the commit swaps them in (reactor thread)."""
        ports = [route.port for route in table.streams.values() if route.serves == "https"]
        commits = []
        for port in ports:
            store = self.stores.get(port)
            if store is None:
                store = self.stores[port] = self.make_store()
            commits.append(store.prepare(table.gateway_ports.get(port, EMPTY_TABLE)))

        def commit() -> None:
            for each in commits:
                each()

        return commit

    def ready_store(self, port: int, table: RoutingTable) -> CertificateStore:
        """The port's store; made and filled now (reactor thread) if no table prepared it before the port opened."""
        store = self.stores.get(port)
        if store is None:
            store = self.stores[port] = self.make_store()
            store.prepare(table)()
        return store
