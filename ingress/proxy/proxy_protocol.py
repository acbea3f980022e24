# -*- test-case-name: tests.proxy.test_nginx_configmap -*-
"""
PROXY protocol on the HTTP and HTTPS listeners while the live table asks for it.

The ingress-nginx ConfigMap's C{use-proxy-protocol} turns it on and off live:
each new connection is built behind Twisted's PROXY-protocol wrapper (v1 and
v2; a connection without the header is closed) when the table live at its
accept says so, and as it is otherwise, with nothing in between.  A listener
given as C{haproxy:tcp:...} on the command line always expects the header and
is not wrapped again.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort, IProtocol, IProtocolFactory, IStreamServerEndpoint
from twisted.internet.protocol import Factory
from twisted.protocols.haproxy import proxyEndpoint
from zope.interface import implementer

from ingress.runtime.live import TableView


@implementer(IStreamServerEndpoint)
class _FactoryOf:
    """
    An endpoint that only keeps the factory it is asked to listen with: Twisted's public PROXY
    protocol API is C{proxyEndpoint}, whose C{listen} wraps the factory it is given, so
    listening on this through it yields the wrapping factory (its class is private).
    """

    factory: Optional[IProtocolFactory] = None

    def listen(self, protocolFactory: IProtocolFactory) -> Deferred[IListeningPort]:
        self.factory = protocolFactory
        return Deferred()  # never fires: nothing listens


def behind_proxy_protocol(factory: IProtocolFactory) -> IProtocolFactory:
    """C{factory} wrapped as a C{haproxy:} endpoint wraps it."""
    capture = _FactoryOf()
    proxyEndpoint(capture).listen(factory)
    assert capture.factory is not None
    return capture.factory


class ProxyProtocolWhenAsked(Factory):
    """Builds the wrapped factory's protocols, behind the PROXY-protocol wrapper while the table asks."""

    noisy = False  # the listener's startup line says what it serves (L{ingress.observe.startup})

    def __init__(self, wrapped: IProtocolFactory, live: TableView) -> None:
        self.wrapped = wrapped
        self.live = live
        self._behind_proxy = behind_proxy_protocol(wrapped)

    def doStart(self) -> None:
        self.wrapped.doStart()

    def doStop(self) -> None:
        self.wrapped.doStop()

    def buildProtocol(self, addr: Any) -> Optional[IProtocol]:  # type: ignore[override]  # any protocol, as IProtocolFactory says
        listener = self.live.table.listener
        if listener is not None and listener.proxy_protocol:
            return self._behind_proxy.buildProtocol(addr)
        return self.wrapped.buildProtocol(addr)
