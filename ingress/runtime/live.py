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

from ingress.routing.report import EMPTY_REPORT, BuildReport, Built
from ingress.routing.table import EMPTY_TABLE, RoutingTable

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

TableListener = Callable[[RoutingTable], None]
BuiltListener = Callable[[Built], None]


class TableView(Protocol):
    """What a listener reads on every request: the table live now (whole, or one Gateway port's part)."""

    @property
    def table(self) -> RoutingTable: ...


class LiveTable:
    """
    Holds the current L{RoutingTable}; listeners (metrics, TLS, streams) hear every swap.  In the
    primary it holds the build's report too (L{BuildReport}: problems, status), which the report's
    listeners (the controllers) hear after the table's; a worker's is empty, as no report reaches it.
    """

    def __init__(self) -> None:
        self.table: RoutingTable = EMPTY_TABLE
        self.report: BuildReport = EMPTY_REPORT
        self.ready = False
        self._listeners: list[TableListener] = []
        self._report_listeners: list[BuiltListener] = []

    def subscribe(self, listener: TableListener) -> None:
        self._listeners.append(listener)

    def subscribe_report(self, listener: BuiltListener) -> None:
        """C{listener} hears each table with its report, after every table listener (the streams' bind failures are known then)."""
        self._report_listeners.append(listener)

    def swap(self, table: RoutingTable, report: BuildReport = EMPTY_REPORT) -> None:
        """Make C{table} (and C{report}, the build's findings beside it) live (reactor thread only) and tell the listeners."""
        self.table, self.report = table, report
        self.ready = True
        for listener in self._listeners:
            try:
                listener(table)
            except Exception:  # one listener's failure must not keep the others on the old table
                log.failure("a routing table listener failed")
        built = Built(table, report)
        for report_listener in self._report_listeners:
            try:
                report_listener(built)
            except Exception:  # as above
                log.failure("a build report listener failed")
