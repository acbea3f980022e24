"""
The transport a proxy connection uses, as the type checker should see it.

Twisted types C{Protocol.transport} as C{Optional[ITransport]}: true before
C{makeConnection}, and true of every kind of transport.  Our connection
protocols run between C{connectionMade} and C{connectionLost}, on a TCP
connection or TLS over one, and use its flow control and abort as well.
This interface names exactly that, so each use is checked rather than cast.
"""

from __future__ import annotations

from twisted.internet.interfaces import IConsumer, IPushProducer, ITCPTransport


class IConnectionTransport(ITCPTransport, IConsumer, IPushProducer):
    """A connected TCP (or TLS-over-TCP) transport: write, close, abort, and flow control both ways."""
