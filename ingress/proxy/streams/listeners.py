# -*- test-case-name: tests.proxy.test_tcp_streams -*-
"""
The stream listener manager: keeps one listening socket per (protocol, port)
of the live table's C{streams}.

On every table it compares the routes with the open listeners: a new key is
opened, a changed route moves the listener's traffic (its factory or
protocol gets the new route: new connections and sessions follow it, open
ones keep theirs), a removed key stops listening at once and its remaining
connections are cut off after the drain timeout.  A port that cannot be
bound is logged once, counted, and remembered in L{failures} (for
/debug/routes and the StreamIngress status); the other listeners are not
affected, and binding is tried again with each new table.

Given C{sockets} (the sockets the primary owns, L{ingress.process.streamsockets}), a
listener is made on copies of the port's sockets instead of binding its own: one or several
(a hand-over from a predecessor with more workers), all served by the one handler (every socket
of a group is bound to the same address, so a UDP reply leaves from it whichever socket it
takes).  Stopping a listener closes only those copies.

A Gateway API listener on a port of its own is a stream route too (C{serves}):
its handler answers HTTP (L{ingress.proxy.streams.gatewayports}), made by the
C{gateway_listener} the data plane gives; a change of what it serves reopens
the port.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from twisted.internet.endpoints import quoteStringArgument, serverFromString
from twisted.internet.error import CannotListenError
from twisted.logger import Logger

from ingress.observe.metrics import Metrics
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.gatewayports import GatewayListener
from ingress.proxy.streams.given import GivenPorts, MoreDatagrams, close_all, same_sockets
from ingress.proxy.streams.tcp import TCPStreamFactory
from ingress.proxy.streams.udp import DEFAULT_MAX_SESSIONS, UDPStreamListener
from ingress.routing.streams import TCP, StreamRoute, stream_key
from ingress.routing.table import RoutingTable
from ingress.runtime.sockets import default_backlog

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

Key = tuple[str, int]
Handler = Union[TCPStreamFactory, UDPStreamListener, GatewayListener]
GivenSockets = Callable[[Key, StreamRoute], Sequence[socket.socket]]  # the port's sockets, the caller's to close; raises OSError


@dataclass
class _Listener:
    route: StreamRoute
    handler: Handler
    port: Any  # IListeningPort


@dataclass
class _Draining:
    key: Key
    listener: _Listener
    timer: Any  # IDelayedCall


class StreamListeners:
    """Opens, moves and closes the stream listeners as tables arrive (reactor thread only)."""

    def __init__(
        self,
        reactor: Any,
        pool: UpstreamPool,
        metrics: Metrics,
        interface: str = "",
        drain_timeout: float = 30.0,
        max_udp_sessions: int = DEFAULT_MAX_SESSIONS,
        reuse_port: bool = False,
        gateway_listener: Optional[Callable[[StreamRoute], GatewayListener]] = None,
        gateway_interface: Optional[str] = None,
        announce: bool = True,
        sockets: Optional[GivenSockets] = None,
    ) -> None:
        self.reactor = reactor
        self.announce = announce  # a line for each port opened (workers: only the first; N copies say nothing more)
        self.pool = pool
        self.metrics = metrics
        self.interface = interface
        self.gateway_interface = interface if gateway_interface is None else gateway_interface  # Gateway listeners' own ports
        self.drain_timeout = drain_timeout
        self.max_udp_sessions = max_udp_sessions
        self.reuse_port = reuse_port  # in a worker process: the primary logs and counts a port that does not bind
        self.sockets = sockets  # the primary's sockets of each port (L{ingress.process.streamsockets}); None: bind our own
        self.gateway_listener = gateway_listener  # makes the handler of a Gateway listener's port (None: refused)
        self.listeners: dict[Key, _Listener] = {}
        self.failures: dict[Key, str] = {}
        self._draining: dict[int, _Draining] = {}
        self._shutting_down = False

    def apply(self, table: RoutingTable) -> None:
        """Make the listeners match C{table.streams} (a L{LiveTable} listener)."""
        self.update(table.streams)

    def update(self, streams: Mapping[Key, StreamRoute]) -> None:
        if self._shutting_down:
            return  # a table that arrives during the shutdown drain opens nothing
        for key in [k for k in self.listeners if k not in streams]:
            self._close(key)
        for key in [k for k in self.failures if k not in streams]:
            del self.failures[key]
        for key, route in streams.items():
            listener = self.listeners.get(key)
            if listener is not None and listener.route.serves != route.serves:
                self._close(key)  # another kind of listener on the port: a new socket and handler
                listener = None
            if listener is None:
                self._open(key, route)
            elif listener.route != route:
                listener.route = listener.handler.route = route

    def _open(self, key: Key, route: StreamRoute) -> None:
        try:
            given = self._given(key, route)
        except CannotListenError as error:
            if not self._revive(key, route, None):
                self._failed(key, route, str(error.socketError or error))
            return
        if self._revive(key, route, given):
            return
        try:
            handler, port = self._listen(route, given)
        except CannotListenError as error:
            self._failed(key, route, str(error.socketError or error))
            return
        at = bound_address(self._interface(route), route.port)
        if self.failures.pop(key, None) is not None:
            log.info("{listener} is open now on {at}", listener=describe(key, route), protocol=key[0], port=key[1], route=route.name, at=at)
        elif self.announce:
            log.info(
                "{listener} open on {at}" + ("" if route.serves else ", to {upstream}"),
                listener=describe(key, route), protocol=key[0], port=key[1], route=route.name, at=at, upstream=route.upstream.key,
            )
        self.listeners[key] = _Listener(route, handler, port)

    def _given(self, key: Key, route: StreamRoute) -> Optional[list[socket.socket]]:
        """The port's sockets from the primary (L{sockets}), or None where this process binds its own."""
        if self.sockets is None:
            return None
        try:
            return list(self.sockets(key, route))
        except OSError as error:
            raise CannotListenError(self._interface(route), route.port, error) from None

    def _listen(self, route: StreamRoute, given: Optional[list[socket.socket]]) -> tuple[Handler, Any]:
        """Listen on the given sockets, or bind one listener; raises CannotListenError."""
        try:
            handler = self._handler(route)
            if given is not None:  # a UDP handler takes one transport: the others' datagrams are passed to it
                return handler, GivenPorts([self._adopt(sock, handler if n == 0 or not isinstance(handler, UDPStreamListener) else MoreDatagrams(handler)) for n, sock in enumerate(given)])
        finally:
            close_all(given)  # the reactor listens on its own duplicates
        if isinstance(handler, UDPStreamListener):
            return handler, self.reactor.listenUDP(route.port, handler, interface=self.interface, maxPacketSize=65535)
        return handler, self._listen_tcp(route.port, _listening(handler), self._interface(route))

    def _handler(self, route: StreamRoute) -> Handler:
        if route.serves:
            if self.gateway_listener is None:
                raise CannotListenError(self.gateway_interface, route.port, OSError(f"no {route.serves} listener can be made here"))
            return self.gateway_listener(route)
        if route.protocol == TCP:
            return TCPStreamFactory(route, self.pool, self.metrics, self.reactor)
        return UDPStreamListener(route, self.pool, self.metrics, self.reactor, self.max_udp_sessions)

    def _adopt(self, sock: socket.socket, handler: Any) -> Any:
        if isinstance(handler, (UDPStreamListener, MoreDatagrams)):
            return self.reactor.adoptDatagramPort(sock.fileno(), sock.family, handler, maxPacketSize=65535)
        return self.reactor.adoptStreamPort(sock.fileno(), sock.family, _listening(handler))

    def _interface(self, route: StreamRoute) -> str:
        return self.gateway_interface if route.serves else self.interface

    def _listen_tcp(self, port: int, factory: Any, interface: str) -> Any:
        """
        serverFromString(...).listen() with the result taken synchronously:
        the TCP endpoints bind before returning their Deferred, so the failure
        (or the port) is known here and recorded with the rest of this table.
        """
        description = f"tcp:{port}:backlog={default_backlog()}"
        if interface:
            description += ":interface=" + quoteStringArgument(interface)
        outcome: list[Any] = []
        serverFromString(self.reactor, description).listen(factory).addBoth(outcome.append)
        if not outcome:
            raise CannotListenError(interface, port, OSError("the endpoint did not bind synchronously"))
        result = outcome[0]
        if hasattr(result, "raiseException"):
            result.raiseException()
        return result

    def _failed(self, key: Key, route: StreamRoute, detail: str) -> None:
        known = self.failures.get(key)
        self.failures[key] = detail
        if known == detail:
            return  # retried with a newer table, same answer: already logged and counted
        if not self.reuse_port:  # a worker's failure is counted once, by the primary's probe (L{ingress.process.streamports})
            self.metrics.stream_listener_errors.labels(key[0], str(key[1])).inc()
        log.error(
            "{listener} cannot be opened: {detail}; the other listeners keep working",
            listener=describe(key, route, "for"),
            protocol=key[0],
            port=key[1],
            route=route.name,
            detail=detail,
        )

    def _close(self, key: Key) -> None:
        """Stop listening now; cut the remaining connections after the drain timeout."""
        listener = self.listeners.pop(key)
        handler = listener.handler
        if isinstance(handler, UDPStreamListener):
            # A UDP session's replies leave through the listening socket, so it stays bound until the
            # drain ends; it only stops taking new clients.
            handler.accepting = False
        else:
            listener.port.stopListening()
            if isinstance(handler, GatewayListener):
                handler.drain()
        draining = _Draining(key, listener, None)
        draining.timer = self.reactor.callLater(self.drain_timeout, self._end_drain, draining)
        self._draining[id(draining)] = draining
        log.info("{listener} closed: the table no longer has it", listener=describe(key, listener.route), protocol=key[0], port=key[1], route=listener.route.name)

    def _revive(self, key: Key, route: StreamRoute, given: Optional[list[socket.socket]]) -> bool:
        """
        A UDP port whose route comes back while it drains is still bound: take it back into service,
        when the primary's sockets for it (C{given}) are the ones it drains on, or there are none.
        """
        for ident, draining in list(self._draining.items()):
            handler = draining.listener.handler
            if draining.key == key and isinstance(handler, UDPStreamListener) and (given is None or same_sockets(given, draining.listener.port)):
                del self._draining[ident]
                draining.timer.cancel()
                handler.accepting = True
                draining.listener.route = handler.route = route
                self.listeners[key] = draining.listener
                close_all(given)
                return True
        return False

    def _end_drain(self, draining: _Draining) -> None:
        self._draining.pop(id(draining), None)
        key, handler = draining.key, draining.listener.handler
        if isinstance(handler, UDPStreamListener):
            count = handler.close_sessions()
            draining.listener.port.stopListening()
        else:
            count = handler.abort_all()
        if count:
            log.info("stream {protocol}/{port}: drain over, closed {count} connections", protocol=key[0], port=key[1], count=count)

    def drain(self) -> None:
        """
        Shutdown drain (L{ingress.process.drain}): take no new connections; open TCP streams go on.

        A UDP port closes now, with its sessions: a session is no connection to finish, only
        a client address and an upstream socket, and it ended only by going idle, so one
        datagram held every stop for the whole drain timeout, which then counted it as a
        connection aborted, with the port still bound after "listeners closed".
        """
        self._shutting_down = True
        for key, listener in list(self.listeners.items()):
            if isinstance(listener.handler, UDPStreamListener):
                del self.listeners[key]
                self._close_udp(key, listener, listener.handler)
            else:
                listener.port.stopListening()
                if isinstance(listener.handler, GatewayListener):
                    listener.handler.drain()
        for ident, draining in list(self._draining.items()):  # removed from the table, still bound for its sessions' replies
            if isinstance(draining.listener.handler, UDPStreamListener):
                del self._draining[ident]
                draining.timer.cancel()
                self._close_udp(draining.key, draining.listener, draining.listener.handler)

    def _close_udp(self, key: Key, listener: _Listener, handler: UDPStreamListener) -> None:
        """End a UDP port's sessions and close this process's socket of it."""
        count = handler.close_sessions()
        listener.port.stopListening()
        log.info("stream listener {protocol}/{port} closed, {count} sessions ended (UDP: nothing to wait for)", protocol=key[0], port=key[1], count=count)

    def open_count(self) -> int:
        """TCP connections and UDP sessions open, on every listener, draining ones included (polled while a drain waits)."""
        handlers = [listener.handler for _, listener, _ in self._every_listener()]
        return sum(len(h.sessions) if isinstance(h, UDPStreamListener) else len(h.relays) for h in handlers)

    def open_kinds(self) -> dict[str, int]:
        """What L{open_count} counts, by port (L{ingress.process.drain.Drainable.open_kinds})."""
        kinds: dict[str, int] = {}
        for key, listener, removed in self._every_listener():
            handler = listener.handler
            if isinstance(handler, UDPStreamListener):
                kind, count = f"UDP session{{s}} on :{key[1]}", len(handler.sessions)
            elif isinstance(handler, GatewayListener):
                kind, count = f"{listener.route.serves.upper()} connection{{s}} on Gateway port :{key[1]}", len(handler.relays)
            else:
                kind, count = f"TCP stream{{s}} on :{key[1]}", len(handler.relays)
            kind += " (removed)" if removed else ""
            kinds[kind] = kinds.get(kind, 0) + count
        return kinds

    def _every_listener(self) -> list[tuple[Key, _Listener, bool]]:
        """The open listeners and the removed ones still draining (C{True})."""
        return [(key, listener, False) for key, listener in self.listeners.items()] + [(d.key, d.listener, True) for d in self._draining.values()]

    def abort_all(self) -> int:
        """End of the shutdown drain: close everything; returns how many connections and sessions were open."""
        count = self.open_count()
        self.stop()
        return count

    def stop(self) -> None:
        """Close everything now (shutdown), draining listeners too."""
        for draining in list(self._draining.values()):
            draining.timer.cancel()
            self._end_drain(draining)
        for key in list(self.listeners):
            listener = self.listeners.pop(key)
            listener.port.stopListening()
            if isinstance(listener.handler, UDPStreamListener):
                listener.handler.close_sessions()
            else:
                listener.handler.abort_all()

    def show(self, routes: dict[str, Any]) -> None:
        """/debug/routes: a stream whose port did not bind is not listening, whatever the table asked."""
        show_listen_failures(routes, self.failures)

    def to_json(self) -> dict[str, Any]:
        """Listener state for /debug/routes: what is open, to where, and what failed to bind."""
        return {
            "listening": {
                stream_key(protocol, port): {
                    "route": listener.route.name,
                    "upstream": listener.route.upstream.key,
                    "endpoints": [f"{h}:{p}" for h, p in listener.route.upstream.targets],
                    "proxyProtocol": listener.route.proxy_protocol,
                    "open": len(listener.handler.sessions if isinstance(listener.handler, UDPStreamListener) else listener.handler.relays),
                    **({"serves": listener.route.serves} if listener.route.serves else {}),
                }
                for (protocol, port), listener in sorted(self.listeners.items())
            },
            "failed": {stream_key(protocol, port): detail for (protocol, port), detail in sorted(self.failures.items())},
        }


def describe(key: Key, route: StreamRoute, joint: str = "") -> str:
    """
    How the log names a listener: a stream's by its protocol and port, a Gateway listener on a port
    of its own (C{serves}) as the HTTP or HTTPS listener it is: C{Gateway HTTP listener on port 8080
    (infra/shared)}.  C{joint} comes before the route's name instead of parentheses.
    """
    owner = f"{joint} {route.name}" if joint else f"({route.name})"
    if route.serves:
        return f"Gateway {route.serves.upper()} listener on port {key[1]} {owner}"
    return f"stream listener {key[0]}/{key[1]} {owner}"


def bound_address(interface: str, port: int) -> str:
    """Where a listener on C{interface} is bound, as C{ss} shows it ('' is every IPv4 address)."""
    host = interface or "0.0.0.0"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listening(handler: Union[TCPStreamFactory, GatewayListener]) -> Any:
    """The protocol factory a TCP port listens with."""
    return handler.factory if isinstance(handler, GatewayListener) else handler


def show_listen_failures(routes: dict[str, Any], failures: Mapping[Key, str]) -> None:
    """
    /debug/routes: a stream whose port did not bind is not listening, whatever
    the table asked; its source's Accepted condition and the problems say so.
    """
    failed_sources = {}
    for key, entry in routes.get("streams", {}).items():
        protocol, _, port = key.partition("/")
        detail = failures.get((protocol, int(port)))
        entry["listening"] = detail is None
        if detail is not None:
            entry["error"] = detail
            failed_sources[entry["source"]] = f"port {key} could not be opened: {detail}"
    for source, message in failed_sources.items():
        routes["problems"] = routes["problems"] + [{"object": source, "reason": "PortUnavailable", "message": message}]
        name = source.partition("/")[2]  # "StreamIngress/ns/name": its conditions are under "ns/name"
        for condition in routes.get("streamConditions", {}).get(name, ()):
            if condition.get("type") == "Accepted":
                condition.update(status="False", reason="PortUnavailable", message=message)
