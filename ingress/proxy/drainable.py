"""
What holds client connections open, as the drain sees it (L{Drainable}): the HTTP listeners'
connections, the TLS passthrough relays.  Here, beside the protocols they count, so that the proxy's
own listeners (a Gateway port's, L{ingress.proxy.streams.gatewayports}) and the processes' drain
(L{ingress.process.drain}) share one view without the proxy importing the process above it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

from ingress.proxy.http2.connection import H2ServerProtocol


class Drainable(Protocol):
    """Something that holds client connections or streams open: an HTTP listener, the stream listeners."""

    def drain(self) -> None:
        """Take no new work; close what is idle; let the rest finish."""

    def open_count(self) -> int:
        """Connections (or sessions) still open."""

    def open_kinds(self) -> Mapping[str, int]:
        """
        What is open, for the log: a count for each kind, the kind a phrase with "{s}" (or "{es}")
        where its plural takes one ("HTTP/1.1 connection{s} on http", "worker process{es}").
        """

    def abort_all(self) -> int:
        """Cut everything still open; returns how many."""


class HTTPConnections:
    """The L{Drainable} view of one HTTP listener's client connections (an L{HTTPProxyFactory})."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def drain(self) -> None:
        self.factory.draining = True
        for connection in list(self.factory.connections):
            connection.drain()

    def open_count(self) -> int:
        return len(self.factory.connections)

    def open_kinds(self) -> Mapping[str, int]:
        listener = self.factory.listener
        return Counter(
            f"{'HTTP/2' if isinstance(connection, H2ServerProtocol) else 'HTTP/1.1'} connection{{s}} on {listener}"
            for connection in self.factory.connections
        )

    def abort_all(self) -> int:
        connections = list(self.factory.connections)
        for connection in connections:
            connection.transport.abortConnection()
        return len(connections)


class PassthroughConnections:
    """The L{Drainable} view of the TLS passthrough relays: they finish on their own, or are cut at the timeout."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def drain(self) -> None:
        pass  # raw TLS: nothing to tell the client; the relay ends when either side closes

    def open_count(self) -> int:
        return len(self.factory.relays)

    def open_kinds(self) -> Mapping[str, int]:
        return {"TLS passthrough connection{s}": len(self.factory.relays)}

    def abort_all(self) -> int:
        return int(self.factory.abort_all())
