# -*- test-case-name: tests.proxy.test_workers -*-
"""
The primary's side of the stream listeners when worker processes hold them (C{--workers N}).

Each worker opens every stream port of its table itself, as one socket of a
C{SO_REUSEPORT} group (L{ingress.proxy.streams.listeners.StreamListeners}
with C{reuse_port}), and closes it when a table drops the port: a table
change opens and closes the port in every worker.  A group is what UDP needs:
the kernel hashes each client's flow to one socket, so its session, and the
replies, stay in one worker; a single socket shared by the workers would
hand a client's datagrams to whichever woke first.  TCP stream ports are
spread the same way as the HTTP sockets.  Unlike those, a stream socket is
the worker's own, so connections still in a dead worker's accept queue are
reset (the HTTP sockets outlive their worker; stream ports come and go with
tables, and passing descriptors on every change was not worth that).

The primary does not listen, but it must know at once whether a new port can
be bound, so that the table's status (StreamIngress Accepted, /debug/routes)
is written with the answer, as in a single process.  It binds and closes a
probe socket in the same group for each port it has not seen open; the
workers report their own failures with every table they serve, and both are
merged.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any, Optional

from twisted.logger import Logger

from ingress.observe.metrics import Metrics
from ingress.process.sockets import address_family, bound_socket
from ingress.proxy.streams.listeners import Key, describe, show_listen_failures
from ingress.routing.streams import TCP, StreamRoute, stream_key
from ingress.routing.table import RoutingTable

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from


class WorkerStreams:
    """What the primary knows of the workers' stream listeners: which ports bind, which do not."""

    def __init__(self, metrics: Metrics, interface: str = "", gateway_interface: Optional[str] = None) -> None:
        self.metrics = metrics
        self.interface = interface
        self.gateway_interface = interface if gateway_interface is None else gateway_interface
        self.routes: dict[Key, StreamRoute] = {}
        self.probed: dict[Key, Optional[str]] = {}  # the primary's own answer per port of the table
        self.reported: Callable[[], Mapping[Key, str]] = dict  # the workers' failures (the pool sets it)

    def apply(self, table: RoutingTable) -> None:
        """A new live table (a L{LiveTable} listener, before the workers get it): probe its new ports."""
        self.routes = dict(table.streams)
        self.probed = {key: self.probed[key] if key in self.probed and self.probed[key] is None else self._probe(key) for key in self.routes}

    def _probe(self, key: Key) -> Optional[str]:
        protocol, port = key
        kind = socket.SOCK_STREAM if protocol == TCP else socket.SOCK_DGRAM
        interface = self.gateway_interface if self.routes[key].serves else self.interface
        try:
            bound_socket(address_family(interface), kind, interface, port, reuse_port=True).close()
        except OSError as error:
            detail = str(error)  # as the workers (and a single process) say it
            if self.probed.get(key) != detail:
                self.metrics.stream_listener_errors.labels(protocol, str(port)).inc()
                log.error(
                    "{listener} cannot be opened: {detail}; the other listeners keep working",
                    listener=describe(key, self.routes[key], "for"), protocol=protocol, port=port, route=self.routes[key].name, detail=detail,
                )
            return detail
        return None

    @property
    def failures(self) -> dict[Key, str]:
        """The ports of the live table that did not bind, here or in a worker."""
        merged = {key: detail for key, detail in self.probed.items() if detail is not None}
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
