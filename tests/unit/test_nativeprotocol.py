"""
The request path's connection protocols on L{ingress.speedups.nativeprotocol.NativeProtocol}: what
Twisted asks of a protocol, and (in the compiled build) native classes.
"""

from __future__ import annotations

import importlib

import pytest
from twisted.internet.interfaces import IHandshakeListener, ILoggingContext, IProtocol, IPushProducer
from twisted.internet.testing import MemoryReactorClock, StringTransport
from zope.interface import Interface

from ingress.proxy.http1.server import HTTPProxyProtocol
from ingress.proxy.http2.connection import H2ServerProtocol
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamConnection, UpstreamPool
from ingress.speedups.nativeprotocol import NativeProtocol


class NoDelayTransport(StringTransport):
    """A TCP transport's Nagle switch too, which a connection protocol turns off when it connects."""

    no_delay = False

    def setTcpNoDelay(self, enabled: bool) -> None:
        self.no_delay = enabled


def _upstream_connection() -> UpstreamConnection:
    """An upstream connection not yet connected, of a pool on a testing reactor."""
    reactor = MemoryReactorClock()
    return UpstreamConnection(UpstreamPool(reactor, ProxySettings()), ("127.0.0.1", 80))  # type: ignore[arg-type]  # the testing reactor stands for the process's


def test_make_connection_keeps_the_transport_then_calls_connection_made() -> None:
    """
    IProtocol's order, which Protocol.makeConnection kept: the transport is set, then
    connectionMade runs (an upstream connection's reports it connected, transport in hand).
    """
    connection = _upstream_connection()
    seen: list[object] = []
    connection._on_connect = lambda made: seen.append(made.transport)
    transport = NoDelayTransport()
    connection.makeConnection(transport)
    assert connection.transport is transport
    assert connection.connected == 1
    assert seen == [transport]
    assert transport.no_delay and transport.producer is connection


def test_the_base_alone_is_connected_and_says_its_name() -> None:
    protocol = NativeProtocol()
    assert protocol.connected == 0 and protocol.transport is None
    protocol.makeConnection(StringTransport())
    assert protocol.connected == 1
    assert protocol.logPrefix() == "NativeProtocol"


def test_a_protocol_s_log_prefix_names_its_own_class() -> None:
    connection = _upstream_connection()
    assert connection.logPrefix() == "UpstreamConnection"


@pytest.mark.parametrize(
    ("protocol", "interfaces"),
    [
        (HTTPProxyProtocol, (IProtocol, ILoggingContext, IPushProducer, IHandshakeListener)),
        (H2ServerProtocol, (IProtocol, ILoggingContext, IPushProducer)),
        (UpstreamConnection, (IProtocol, ILoggingContext, IPushProducer)),
    ],
)
def test_each_protocol_declares_what_twisted_asks_of_it(protocol: type, interfaces: tuple[type[Interface], ...]) -> None:
    """
    Declared with classImplements, not @implementer: TLS calls handshakeCompleted only on an
    IHandshakeListener (ALPN's switch to HTTP/2), and a transport's log prefix asks for an ILoggingContext.
    """
    for interface in interfaces:
        assert interface.implementedBy(protocol), interface
        for name in interface.names(all=True):
            assert callable(getattr(protocol, name, None)), f"{protocol.__name__}.{name}"


@pytest.mark.parametrize("protocol", [HTTPProxyProtocol, H2ServerProtocol, UpstreamConnection])
def test_each_protocol_is_a_native_class_in_the_compiled_build(protocol: type) -> None:
    """
    Compiled, a class whose instances have no dict (a C struct: attributes read natively); on
    Twisted's Protocol it would be a Python class, with a dict, in the compiled build too. In the
    pure build every class has a dict.
    """
    module = importlib.import_module(protocol.__module__)
    compiled = (module.__file__ or "").endswith(".so")
    assert (protocol.__dictoffset__ == 0) is compiled, (protocol.__name__, "compiled" if compiled else "pure")
