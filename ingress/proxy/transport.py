"""
The transport a proxy connection uses, as the type checker should see it.

Twisted types C{Protocol.transport} as C{Optional[ITransport]}: true before
C{makeConnection}, and true of every kind of transport.  Our connection
protocols run between C{connectionMade} and C{connectionLost}, on a TCP
connection or TLS over one, and use its flow control and abort as well.
This interface names exactly that, so each use is checked rather than cast.
"""

from __future__ import annotations

from twisted.internet.interfaces import IConsumer, IProtocol, IPushProducer, ITCPTransport
from twisted.protocols.policies import ProtocolWrapper


class IConnectionTransport(ITCPTransport, IConsumer, IPushProducer):
    """A connected TCP (or TLS-over-TCP) transport: write, close, abort, and flow control both ways."""


def hand_over(transport: object, protocol: IProtocol) -> None:
    """
    Make C{protocol} the receiver of C{transport}'s events from now on (the
    TLS front door handing a connection to termination or passthrough).

    A TCP connection delivers to its C{protocol} attribute; a protocol wrapper
    (the PROXY-protocol listener, C{haproxy:} endpoints) to its
    C{wrappedProtocol}, and setting C{protocol} on it would change nothing.
    """
    if isinstance(transport, ProtocolWrapper):
        transport.wrappedProtocol = protocol
    else:
        transport.protocol = protocol  # type: ignore[attr-defined]  # tcp.Connection (or TLS over it): the attribute its reads go to


def release_connector(connector: object) -> None:
    """
    A client connection is over: its connector lets go of it.  Twisted's TCP client
    connection and its connector hold each other (C{Client.connector}, C{Connector.transport}),
    and through the connector its factory and what that holds (an exchange's callbacks): a
    reference cycle left for the cyclic collector, once per upstream connection.  Cut here,
    reference counting frees them when the connection ends.
    """
    if getattr(connector, "transport", None) is not None:
        connector.transport = None  # type: ignore[attr-defined]  # a connector of any kind, typed object: Twisted declares no interface with it
