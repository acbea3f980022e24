# -*- test-case-name: tests.proxy.test_workers -*-
"""
The HTTP and HTTPS listeners' protocol factories, built the same way in a
single process and in each worker process (L{ingress.process.worker}), and
those of Gateway API listeners on ports of their own (L{DataPlane.gateway_listener}).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from twisted.internet.interfaces import IProtocolFactory

from ingress.observe.metrics import Metrics
from ingress.observe.nginx_metrics import RequestRecorder
from ingress.observe.upstream_metrics import UpstreamConnectionMetrics
from ingress.proxy.drainable import Drainable, HTTPConnections, PassthroughConnections
from ingress.proxy.http1.factory import HTTPProxyFactory
from ingress.proxy.http2.upstream import H2UpstreamPool
from ingress.proxy.proxy_protocol import ProxyProtocolWhenAsked
from ingress.proxy.request.guards import Guards
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings, with_listener
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.gatewayports import GatewayListener, PortCertificates, PortView
from ingress.proxy.tls.acme_tls import NO_CHALLENGES, ChallengeContexts
from ingress.proxy.tls.front import TLSFrontFactory
from ingress.proxy.tls.termination import CertificateStore, SNIConnectionCreator, load_certificate, self_signed_certificate
from ingress.routing.streams import StreamRoute
from ingress.routing.table import RoutingTable
from ingress.runtime.live import LiveTable, TableView
from ingress.runtime.reactor import IProcessReactor
from ingress.speedups import patch_libraries
from ingress.speedups.tlsdirect import tls_factory


@dataclass
class DataPlane:
    """The factories to listen with, what the drain waits for, and the certificate store (HTTPS only)."""

    http: Optional[IProtocolFactory] = None
    https: Optional[IProtocolFactory] = None
    store: Optional[CertificateStore] = None
    drainables: list[Drainable] = field(default_factory=list)
    gateway_listener: Optional[Callable[[StreamRoute], GatewayListener]] = None  # for the stream listeners
    port_certificates: Optional[PortCertificates] = None  # the HTTPS Gateway ports' stores
    challenges: Optional[ChallengeContexts] = None  # the HTTPS listener's TLS-ALPN-01 challenge certificates

    def prepare(self, table: RoutingTable) -> Callable[[], None]:
        """Every TLS context C{table} needs, main and Gateway ports (build thread); the commit swaps them in."""
        commits = [each.prepare(table) for each in (self.store, self.port_certificates, self.challenges) if each is not None]

        def commit() -> None:
            for each in commits:
                each()

        return commit


@dataclass(frozen=True, slots=True)
class ListenerOptions:
    """
    The HTTP and HTTPS listeners to make and how they listen: the command line's in a single process,
    the primary's L{ingress.process.workersettings.WorkerConfig} in a worker.

    A listener not in C{behind_proxy} (those given as C{haproxy:} endpoints) expects a PROXY
    header on new connections while the table says so (the ConfigMap's use-proxy-protocol).
    """

    http: bool
    https: bool
    tls_min_version: str
    tls_ciphers: str
    behind_proxy: frozenset[str] = frozenset()  # "http", "https": the names of those behind a haproxy: endpoint
    http2: Optional[HTTP2Settings] = None  # None: HTTP/2's defaults


def data_plane(
    reactor: IProcessReactor,
    live: LiveTable,
    pool: UpstreamPool,
    settings: ProxySettings,
    metrics: Metrics,
    access_log: Optional[RequestRecorder],
    listeners: ListenerOptions,
    guards: Optional[Guards] = None,
) -> DataPlane:
    """Factories for the listeners asked for; the caller listens (on endpoints, or on adopted sockets)."""
    plane = DataPlane()
    http2, behind_proxy = listeners.http2, listeners.behind_proxy
    patch_libraries()  # hpack's debug records dropped, h2's Enums hashed by identity (ingress.speedups; none when off)
    guards = guards if guards is not None else Guards(reactor)  # one for both listeners: their rate limits are one count
    factories: weakref.WeakSet[HTTPProxyFactory] = weakref.WeakSet()
    http2_upstreams = H2UpstreamPool(reactor, settings, http2 or HTTP2Settings())
    metrics.registry.register(UpstreamConnectionMetrics(pool, http2_upstreams))
    if listeners.http:
        factory = HTTPProxyFactory(live, pool, settings, metrics, reactor, access_log=access_log, http2=http2, http2_upstreams=http2_upstreams, guards=guards)
        plane.http = factory if "http" in behind_proxy else ProxyProtocolWhenAsked(factory, live)
        plane.drainables.append(HTTPConnections(factory))
        factories.add(factory)
    offer_h2 = http2 is None or http2.enabled
    default_certificate: list[tuple[bytes, bytes]] = []  # the self-signed default, made once

    def new_store(exports_expiry: bool = True) -> CertificateStore:
        """A certificate store whose default is the self-signed certificate (made on first use)."""
        if not default_certificate:
            default_certificate.append(self_signed_certificate())
        generated = default_certificate[0]
        return CertificateStore(metrics, load_certificate(*generated, http2=offer_h2), listeners.tls_min_version, listeners.tls_ciphers, generated, offer_h2, exports_expiry)

    def tls_front(store: CertificateStore, terminating: HTTPProxyFactory, view: TableView, challenges: ChallengeContexts = NO_CHALLENGES) -> TLSFrontFactory:
        """The TLS listener's front door: SNI passthrough, TLS to TCP backends, TLS-ALPN-01 answers, or HTTP over TLS with C{store}'s certificates."""
        creator = SNIConnectionCreator(store)
        terminate = tls_factory(creator, False, terminating)
        return TLSFrontFactory(terminate, view, pool, reactor, settings.header_timeout, metrics, settings.server_name, creator, challenges)

    if listeners.https:
        store = new_store()
        terminating = HTTPProxyFactory(
            live, pool, settings, metrics, reactor, scheme=b"https", listener="https", access_log=access_log, http2=http2, http2_upstreams=http2_upstreams, guards=guards
        )
        plane.drainables.append(HTTPConnections(terminating))
        factories.add(terminating)
        challenges = plane.challenges = ChallengeContexts()
        front = tls_front(store, terminating, live, challenges)
        plane.drainables.append(PassthroughConnections(front.passthrough))
        plane.https = front if "https" in behind_proxy else ProxyProtocolWhenAsked(front, live)
        plane.store = store

    certificates = plane.port_certificates = PortCertificates(lambda: new_store(exports_expiry=False))

    def gateway_listener(route: StreamRoute) -> GatewayListener:
        """What answers on a Gateway listener's own port: HTTP, or TLS terminated with the port's certificates."""
        view = PortView(live, route.port)
        scheme = route.serves.encode()
        factory = HTTPProxyFactory(
            view, pool, pool.settings, metrics, reactor, scheme=scheme, listener=f"{route.serves}:{route.port}",  # pool.settings: the live table's
            access_log=access_log, http2=http2, http2_upstreams=http2_upstreams, guards=guards,
        )
        factories.add(factory)  # weakly: it goes when its port's drain ends
        if scheme == b"http":
            return GatewayListener(route, ProxyProtocolWhenAsked(factory, view), factory)
        front = tls_front(certificates.ready_store(route.port, view.table), factory, view)
        return GatewayListener(route, ProxyProtocolWhenAsked(front, view), factory, front.passthrough)

    plane.gateway_listener = gateway_listener

    def connection_settings(table: RoutingTable) -> None:
        """A table with the ingress-nginx ConfigMap's connection settings replaces the command line's."""
        effective = with_listener(settings, table.listener)
        pool.settings = effective
        http2_upstreams.settings = effective
        for each in factories:
            each.settings = effective

    live.subscribe(connection_settings)
    return plane

