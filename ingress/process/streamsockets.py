# -*- test-case-name: tests.proxy.test_workers -*-
"""
The stream and Gateway listener sockets, owned by the primary: bound (or taken over from a
predecessor) when a table adds a port, closed when a table drops it, given to whoever serves them.

Each port of the live table's C{streams} (TCP and UDP stream ports, Gateway listeners on ports of
their own) is a C{SO_REUSEPORT} group of one socket per worker, as the HTTP sockets are
(L{ingress.process.sockets}): the kernel hashes a UDP client's flow to one socket, so its session and
its replies stay in one worker.  The primary holds every socket of a group for the port's life, so a
killed worker's replacement is given the same socket and whatever its queue holds is served (a
socket a worker bound itself died, and reset its queue, with the worker), and a successor started
with C{--handover} is handed them with the HTTP sockets.

The workers are given their sockets over the channel they get tables on (SCM_RIGHTS,
L{ingress.process.channel}), not as inherited descriptors as the HTTP sockets are: stream ports
come and go with tables long after a worker started, and a descriptor can reach a running process
only over a unix socket.  A group's sockets are sent before the table that adds the port (the
builder's first preparer, L{commit}), so a worker has them when the table arrives.

A dropped TCP port closes once every worker serves a table without it: a descriptor queued on a
channel must stay open until it is written.  A dropped UDP port stays bound as long as a worker
drains its sessions (their replies leave through it), and one that comes back meanwhile is the same
socket again.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from ingress.observe.metrics import Metrics
from ingress.process.handoverwire import SocketEntry
from ingress.process.sockets import address_family, bound_socket, default_backlog
from ingress.process.takeover import Taken
from ingress.proxy.streams.listeners import describe
from ingress.routing.streams import TCP, StreamRoute
from ingress.routing.table import RoutingTable

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

Key = tuple[str, int]
Where = tuple[int, str, int, int]  # family, interface, port, socket type
UDP_HOLD_MARGIN = 5.0  # a dropped UDP group outlives the workers' drain of it by this much


@dataclass
class Group:
    """The sockets of one port: where they are bound, what kind of listener serves them."""

    where: Where
    serves: str
    sockets: list[socket.socket]
    retire: Optional[IDelayedCall] = field(default=None, compare=False)


def listener_name(key: Key, serves: str) -> str:
    """The name of a stream socket in a hand-over's C{sockets} message: C{stream:TCP/9000}, C{gateway-http:TCP/8080}."""
    return f"{'gateway-' + serves if serves else 'stream'}:{key[0]}/{key[1]}"


def bound_where(sock: socket.socket, where: Where) -> bool:
    """Whether C{sock} is bound where C{where} says: family, type, port and address (as an IP)."""
    family, interface, port, kind = where
    try:
        host, bound_port = sock.getsockname()[:2]
        if sock.family != family or sock.type != kind or bound_port != port:
            return False
        wanted = interface or ("::" if family == socket.AF_INET6 else "0.0.0.0")
        return ipaddress.ip_address(str(host).split("%")[0]) == ipaddress.ip_address(wanted)
    except (OSError, ValueError):
        return False


class StreamSockets:
    """
    The primary's stream sockets (reactor thread).  C{count} is the size of each group (the workers);
    C{inherited} what a predecessor handed over for these ports (L{ingress.process.takeover}): a port
    of the first table bound where a socket says is served from it; what the first table lacks is
    closed once it is live.  C{sent} hears each group that is new to the workers.
    """

    def __init__(
        self,
        reactor: Any,
        metrics: Metrics,
        interface: str = "",
        gateway_interface: Optional[str] = None,
        count: int = 1,
        drain_timeout: float = 30.0,
        inherited: Optional[list[tuple[SocketEntry, socket.socket]]] = None,
        report: bool = True,
    ) -> None:
        self.reactor = reactor
        self.metrics = metrics
        self.interface = interface
        self.gateway_interface = interface if gateway_interface is None else gateway_interface
        self.count = count
        self.drain_timeout = drain_timeout
        self.report = report  # log and count a port that does not bind (with workers; a single process's listeners do)
        self.groups: dict[Key, Group] = {}
        self.errors: dict[Key, OSError] = {}  # the ports of the live table that did not bind
        self.held: dict[Key, Group] = {}  # dropped UDP groups, bound while the workers drain them
        self.retired: list[tuple[int, list[socket.socket]]] = []  # dropped TCP groups, closed once the workers serve past them
        self.inherited = list(inherited or [])
        self.sent: Callable[[Key, list[socket.socket]], None] = lambda key, sockets: None
        self.generation = 0

    # -- tables

    def commit(self, table: RoutingTable) -> Callable[[], None]:
        """The builder's preparer: the table's groups bound (reactor thread, before the swap) before the workers get it."""
        return lambda: self.update(table)

    def apply(self, table: RoutingTable) -> None:
        """A table is live (a L{LiveTable} listener): its ports bound, and the predecessor's sockets it has no port for closed."""
        self.update(table)
        self._close_unclaimed()

    def update(self, table: RoutingTable) -> None:
        """Bind the new ports of C{table}, retire the dropped ones (idempotent: the commit and the swap both call it)."""
        if table.generation < self.generation:
            return
        self.generation = table.generation
        for key in [key for key in self.groups if key not in table.streams]:
            self._retire(key, self.groups.pop(key))
        for key in [key for key in self.errors if key not in table.streams]:
            del self.errors[key]
        for key, route in table.streams.items():
            where, group = self._where(route), self.groups.get(key)
            if group is not None and group.where == where and group.serves == route.serves:
                continue
            if group is not None:
                self._retire(key, self.groups.pop(key))
            self._open(key, route, where)

    def _where(self, route: StreamRoute) -> Where:
        interface = self.gateway_interface if route.serves else self.interface
        return address_family(interface), interface, route.port, socket.SOCK_STREAM if route.protocol == TCP else socket.SOCK_DGRAM

    def _open(self, key: Key, route: StreamRoute, where: Where) -> None:
        group = self._held_again(key, route, where) or self._adopted(key, route, where)
        try:
            if group is None:
                group = Group(where, route.serves, [])
            group.sockets.extend(self._bind(where) for _ in range(self.count - len(group.sockets)))
        except OSError as error:
            if group is not None:
                for sock in group.sockets:
                    sock.close()
            self._failed(key, route, error)
            return
        self.errors.pop(key, None)
        self.groups[key] = group
        self.sent(key, group.sockets)

    def _held_again(self, key: Key, route: StreamRoute, where: Where) -> Optional[Group]:
        """A dropped UDP port back while it is still bound: the same sockets (the workers revive their listeners on them)."""
        group = self.held.get(key)
        if group is None or group.where != where or group.serves != route.serves:
            return None
        del self.held[key]
        if group.retire is not None and group.retire.active():
            group.retire.cancel()
        group.retire = None
        return group

    def _adopted(self, key: Key, route: StreamRoute, where: Where) -> Optional[Group]:
        """The predecessor's sockets of this port, those bound where our options say (the others are left to close)."""
        name = listener_name(key, route.serves)
        mine = [(entry, sock) for entry, sock in self.inherited if entry.listener == name]
        if not mine:
            return None
        self.inherited = [(entry, sock) for entry, sock in self.inherited if entry.listener != name]
        fitting = []
        for entry, sock in mine:
            if bound_where(sock, where):
                fitting.append(sock)
                continue
            log.warn(
                "handover: the predecessor's {name} socket is bound to {address}, not where this process's options say: not adopted",
                name=name, address=tuple(entry.address),
            )
            sock.close()
        if fitting:
            log.info("handover: {listener} served from {count} sockets of the predecessor", listener=name, count=len(fitting))
        return Group(where, route.serves, fitting) if fitting else None

    def _close_unclaimed(self) -> None:
        """After the first table: the predecessor's stream sockets no port of ours wants are dropped for good (ours was their last copy)."""
        for entry, sock in self.inherited:
            log.info("handover: the predecessor's {name} socket is closed: this process's table has no such port", name=entry.listener)
            sock.close()
        self.inherited = []

    def _bind(self, where: Where) -> socket.socket:
        family, interface, port, kind = where
        return bound_socket(family, kind, interface, port, reuse_port=True, backlog=default_backlog() if kind == socket.SOCK_STREAM else None)

    def _failed(self, key: Key, route: StreamRoute, error: OSError) -> None:
        known = self.errors.get(key)
        self.errors[key] = error
        if not self.report or (known is not None and str(known) == str(error)):
            return
        self.metrics.stream_listener_errors.labels(key[0], str(key[1])).inc()
        log.error(
            "{listener} cannot be opened: {detail}; the other listeners keep working",
            listener=describe(key, route, "for"), protocol=key[0], port=key[1], route=route.name, detail=str(error),
        )

    def _retire(self, key: Key, group: Group) -> None:
        if group.where[3] == socket.SOCK_DGRAM:
            previous = self.held.pop(key, None)
            if previous is not None:
                self._close(previous)
            self.held[key] = group
            group.retire = self.reactor.callLater(self.drain_timeout + UDP_HOLD_MARGIN, self._unhold, key, group)
        else:
            self.retired.append((self.generation, group.sockets))

    def _unhold(self, key: Key, group: Group) -> None:
        if self.held.get(key) is group:
            del self.held[key]
        self._close(group)

    def _close(self, group: Group) -> None:
        if group.retire is not None and group.retire.active():
            group.retire.cancel()
        for sock in group.sockets:
            sock.close()

    def served(self, generation: int) -> None:
        """Every worker serves C{generation} or a later table: the TCP groups dropped by then are no worker's to be sent now."""
        keep = []
        for dropped, sockets in self.retired:
            if dropped <= generation:
                for sock in sockets:
                    sock.close()
            else:
                keep.append((dropped, sockets))
        self.retired = keep

    # -- what is given and handed over

    def give(self, key: Key, route: StreamRoute) -> list[socket.socket]:
        """Copies of C{key}'s sockets for a listener in this process (the caller closes them); raises the bind's OSError."""
        group = self.groups.get(key)
        if group is None:
            raise self.errors.get(key) or OSError(f"port {key[1]} is not bound")
        return [sock.dup() for sock in group.sockets]

    def listed(self) -> Iterator[tuple[str, socket.socket]]:
        """Every socket of every group, live or held, named for a hand-over (L{listener_name})."""
        for groups in (self.groups, self.held):
            for key, group in groups.items():
                for sock in group.sockets:
                    yield listener_name(key, group.serves), sock

    @property
    def failures(self) -> dict[Key, str]:
        return {key: str(error) for key, error in self.errors.items()}

    def close(self) -> None:
        """The primary's drain: its copies close (a worker's close when it stops listening; a successor keeps its own)."""
        for group in [*self.groups.values(), *self.held.values()]:
            self._close(group)
        self.served(1 << 62)
        self._close_unclaimed()
        self.groups, self.held = {}, {}


def inherited_streams(taken: Optional[Taken]) -> list[tuple[SocketEntry, socket.socket]]:
    """The stream and Gateway ports' sockets among what a predecessor handed over (the HTTP ones are L{ingress.process.adoption}'s)."""
    return [(entry, sock) for entry, sock in taken.sockets if entry.listener.partition(":")[1]] if taken is not None else []


class ClosedAtDrain:
    """A single process's drain closes the primary's copies of the stream sockets (its listeners close theirs)."""

    def __init__(self, sockets: StreamSockets) -> None:
        self.sockets = sockets

    def drain(self) -> None:
        self.sockets.close()

    def open_count(self) -> int:
        return 0

    def open_kinds(self) -> dict[str, int]:
        return {}

    def abort_all(self) -> int:
        return 0
