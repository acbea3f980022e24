"""
What a listener's requests share, as the request path sees it: the factory's attributes
(L{ingress.proxy.http1.factory.HTTPProxyFactory} is the one implementation).

A typing protocol, so that the connection, the HTTP/2 stream and the exchange can name the
factory's type without importing the factory, which imports them (no import circle).  The
HTTP/2 endpoints' pool is the HTTP/2 relay's (L{ingress.proxy.http2.exchange.H2Shared}): the
request path names nothing of either framing.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from ingress.observe.metrics import Metrics
from ingress.observe.nginx_metrics import RequestRecorder
from ingress.proxy.request.guards import Guards
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.runtime.live import TableView


class Shared(Protocol):
    """A listener's table, pools, settings, metrics and access log."""

    live: TableView
    pool: UpstreamPool
    settings: ProxySettings
    metrics: Metrics
    reactor: Any
    scheme: bytes
    access_log: Optional[RequestRecorder]
    http2: HTTP2Settings
    draining: bool
    guards: Guards

    def opened(self, protocol: Any) -> None: ...

    def closed(self, protocol: Any) -> None: ...
