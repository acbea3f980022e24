# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
The HTTP listener's factory: what every client connection of one listener
shares (table, pools, settings, metrics, access log), and the set of open
connections the drain walks.
"""

from __future__ import annotations

from typing import Optional, Union

from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.internet.protocol import Factory

from ingress.observe.metrics import Metrics
from ingress.observe.nginx_metrics import RequestRecorder
from ingress.proxy.http1.server import HTTPProxyProtocol
from ingress.proxy.http2.connection import H2ServerProtocol
from ingress.proxy.http2.upstream import H2UpstreamPool
from ingress.proxy.request.guards import Guards
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.runtime.live import TableView

ClientConnection = Union[HTTPProxyProtocol, H2ServerProtocol]


class HTTPProxyFactory(Factory):
    """Shared pieces of every client connection on one listener."""

    noisy = False

    def __init__(
        self,
        live: TableView,
        pool: UpstreamPool,
        settings: ProxySettings,
        metrics: Metrics,
        reactor: IReactorTime,
        scheme: bytes = b"http",
        listener: str = "http",
        access_log: Optional[RequestRecorder] = None,
        http2: Optional[HTTP2Settings] = None,
        http2_upstreams: Optional[H2UpstreamPool] = None,
        guards: Optional[Guards] = None,
    ) -> None:
        self.live = live
        self.pool = pool
        self.settings = settings
        self.metrics = metrics
        self.reactor = reactor
        self.scheme = scheme
        self.listener = listener
        self.access_log = access_log  # None when off
        self.http2 = http2 if http2 is not None else HTTP2Settings()
        # HTTP/2 to endpoints (backend-protocol GRPC, GRPCS, H2C), shared by the listeners like the pool
        self.http2_upstreams = http2_upstreams if http2_upstreams is not None else H2UpstreamPool(reactor, settings, self.http2)  # type: ignore[arg-type]  # typed IReactorTime here; the same reactor connects (it is the process reactor, an IReactorTCP too)
        self.connections: set[ClientConnection] = set()
        self.draining = False  # shutdown: every response says Connection: close
        self.guards = guards if guards is not None else Guards(reactor)  # rate limits, basic and external auth
        self._open_gauge = metrics.open_connections.labels(listener)

    def buildProtocol(self, addr: Optional[IAddress]) -> HTTPProxyProtocol:  # type: ignore[override]  # Twisted types a protocol as its Protocol class (with a factory attribute of Factory type); ours is an IProtocol on nativeprotocol.NativeProtocol
        return HTTPProxyProtocol(self)

    def opened(self, protocol: ClientConnection) -> None:
        self.connections.add(protocol)
        self._open_gauge.inc()

    def closed(self, protocol: ClientConnection) -> None:
        self.connections.discard(protocol)
        self._open_gauge.dec()
