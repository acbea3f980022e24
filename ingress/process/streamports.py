# -*- test-case-name: tests.proxy.test_workers -*-
"""
The primary's view of the stream listeners when worker processes serve them (C{--workers N}).

The primary binds every stream and Gateway port of the table itself, a C{SO_REUSEPORT} group of one
socket per worker (L{ingress.process.streamsockets}), and hands each worker its share; the workers
listen on them.  So the primary knows at once whether a new port can be bound, and the table's
status (StreamIngress Accepted, /debug/routes) is written with that answer, as in a single process;
the workers report what they could not serve with every table they serve, and both are merged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

from ingress.observe.metrics import Metrics
from ingress.process.streamsockets import StreamSockets
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import Key, StreamListeners, show_listen_failures
from ingress.routing.streams import StreamRoute, stream_key
from ingress.routing.table import RoutingTable
from ingress.runtime.live import LiveTable


class WorkerStreams:
    """What the primary knows of the workers' stream listeners: which ports bind, which do not."""

    def __init__(self, sockets: StreamSockets) -> None:
        self.sockets = sockets
        self.routes: dict[Key, StreamRoute] = {}
        self.reported: Callable[[], Mapping[Key, str]] = dict  # the workers' failures (the pool sets it)

    def apply(self, table: RoutingTable) -> None:
        """A new live table (a L{LiveTable} listener, after the sockets' own): its routes, for the status."""
        self.routes = dict(table.streams)

    @property
    def failures(self) -> dict[Key, str]:
        """The ports of the live table that did not bind, here or in a worker."""
        merged = dict(self.sockets.failures)
        for key, detail in self.reported().items():
            if key in self.routes:
                merged.setdefault(key, detail)
        return merged

    def show(self, routes: dict[str, Any]) -> None:
        show_listen_failures(routes, self.failures)

    def to_json(self) -> dict[str, Any]:
        """As a single process's listeners, without open counts (each worker has its own: see "workers")."""
        failures = self.failures
        return {
            "listening": {
                stream_key(protocol, port): {
                    "route": route.name,
                    "upstream": route.upstream.key,
                    "endpoints": [f"{h}:{p}" for h, p in route.upstream.targets],
                    "proxyProtocol": route.proxy_protocol,
                }
                for (protocol, port), route in sorted(self.routes.items())
                if (protocol, port) not in failures
            },
            "failed": {stream_key(protocol, port): detail for (protocol, port), detail in sorted(failures.items())},
        }


def primary_streams(
    reactor: Any, options: Mapping[str, Any], metrics: Metrics, pool: UpstreamPool, live: LiveTable, preparers: list[Callable[[RoutingTable], Callable[[], None]]]
) -> tuple[StreamSockets, Union[StreamListeners, WorkerStreams]]:
    """
    The primary's stream sockets, and what serves them: its own listeners in a single process, the
    workers otherwise (this process's view of theirs).  Subscribed here, before the controllers, so
    that a table's bind failures are known when status is written; the sockets are bound in the
    builder's commit, before the workers get the table that adds a port.
    """
    count = options["worker-count"]
    sockets = StreamSockets(
        reactor, metrics, options["stream-interface"], options["gateway-interface"], count, options["stream-drain-timeout"], report=count > 1
    )
    preparers.append(sockets.commit)
    live.subscribe(sockets.apply)
    streams: Union[StreamListeners, WorkerStreams]
    if count > 1:
        streams = WorkerStreams(sockets)
    else:
        streams = StreamListeners(
            reactor, pool, metrics, options["stream-interface"], options["stream-drain-timeout"], gateway_interface=options["gateway-interface"],
            sockets=sockets.give,
        )
    live.subscribe(streams.apply)
    if count == 1:
        live.subscribe(lambda table: sockets.served(table.generation))  # our listeners hold their copies now
    return sockets, streams
