"""
The live routing table: one reference, swapped whole on the reactor thread.

Requests read C{live.table} once when their head is parsed and keep that
table to the end, so a swap never changes a request in flight and never
touches open connections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.logger import Logger

from ingress.routing.table import EMPTY_TABLE, RoutingTable

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

TableListener = Callable[[RoutingTable], None]


class TableView(Protocol):
    """What a listener reads on every request: the table live now (whole, or one Gateway port's part)."""

    @property
    def table(self) -> RoutingTable: ...


class LiveTable:
    """Holds the current L{RoutingTable}; listeners (metrics, TLS, streams) hear every swap."""

    def __init__(self) -> None:
        self.table: RoutingTable = EMPTY_TABLE
        self.ready = False
        self._listeners: list[TableListener] = []

    def subscribe(self, listener: TableListener) -> None:
        self._listeners.append(listener)

    def swap(self, table: RoutingTable) -> None:
        """Make C{table} live (reactor thread only) and tell the listeners."""
        self.table = table
        self.ready = True
        for listener in self._listeners:
            try:
                listener(table)
            except Exception:  # one listener's failure must not keep the others on the old table
                log.failure("a routing table listener failed")
