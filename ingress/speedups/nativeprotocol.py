"""
The base of the request path's connection protocols: what Twisted asks of a protocol
(L{IProtocol}: C{makeConnection}, C{connectionMade}, C{dataReceived}, C{connectionLost};
L{ILoggingContext}'s C{logPrefix}), without Twisted's L{Protocol} class under it.

Why not L{Protocol}: the compiled build (mypyc) makes a class that derives from a Python class
a Python class, whatever it holds.  Every read of one of its own attributes is then a Python
attribute lookup (the type's method cache, then the instance dict), every call to one of its
own methods a Python call, and every object that holds one (an HTTP/2 stream holds its
connection) reads it the same way.  A connection protocol on this base is a native class:
its attributes are fields of a C struct, its methods are called through a table.
(bench/README.md, "twenty-seventh session": the HTTP/2 connection on it, per request.)

The interfaces are declared with C{classImplements} after each class, where a protocol would
use C{@implementer}: mypyc makes a class with any other decorator a Python class too.

Measured: an h2 request 367-371k instructions live, from 385k; HTTPS/1.1 165-167k, from 185k
(docs/performance.md).  It has no plain form that the switch (L{ingress.speedups.ENABLED})
selects: a base class is the classes' layout, fixed when they are compiled, not a path taken at
run time; in the pure build it is an ordinary Python class doing what L{Protocol} does for them.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import ILoggingContext, IProtocol
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from zope.interface import classImplements


class NativeProtocol:
    """A connection's protocol as Twisted's L{Protocol} is one: told of its transport, then of its bytes, then of its end."""

    transport: Any = None  # set by makeConnection: the TCP connection, or TLS over it
    connected = 0

    def makeConnection(self, transport: Any) -> None:
        """The transport is connected: keep it, then C{connectionMade} (L{IProtocol}'s order)."""
        self.connected = 1
        self.transport = transport
        self.connectionMade()

    def connectionMade(self) -> None:
        """Nothing, unless a subclass has something to do once connected."""

    def dataReceived(self, data: bytes) -> None:
        """Nothing, unless a subclass reads."""

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """Nothing, unless a subclass cleans up."""

    def logPrefix(self) -> str:
        """The class's name, as L{Protocol}'s: what Twisted's log lines about the connection start with."""
        return type(self).__name__


classImplements(NativeProtocol, IProtocol, ILoggingContext)
