# -*- test-case-name: tests.proxy.test_udp_streams -*-
"""
UDP forwarding: a session per client address, each with its own connected
upstream socket.

A session's socket is connected to one endpoint, so the kernel delivers only
that endpoint's replies to it and they go back to exactly the client that
owns the session; replies from anyone else are dropped by the kernel.  A
session ends after C{idle_timeout} seconds without a datagram either way, or
when its endpoint refuses (ICMP port unreachable): the client's next
datagram then opens a new session, on another endpoint, since the refusing
one is marked down in the shared L{UpstreamPool}.  The number of sessions is
capped: datagrams of new clients beyond the cap are dropped and counted.

Datagrams are sent with the sockets' own C{send}/C{sendto}: Twisted's
C{write} checks the address on every call, and a full socket buffer
(EAGAIN, ENOBUFS) must drop the datagram, as a router would, not raise.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, Optional

from twisted.internet import udp
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.interfaces import IReadDescriptor
from twisted.internet.protocol import DatagramProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ingress.observe.metrics import Metrics
from ingress.proxy.idle import IdleTimer
from ingress.proxy.request.upstream import Address, UpstreamPool
from ingress.routing.streams import UDP, StreamRoute

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

MAX_DATAGRAM = 65535  # Twisted's default of 8192 would truncate larger datagrams
DEFAULT_MAX_SESSIONS = 10000
MAX_PENDING = 16  # datagrams kept while an external upstream's name resolves
READ_BATCH = 64  # replies read per wake-up of a session socket, as Twisted's UDP ports do by bytes
FLUSH_BYTES = 1 << 20  # byte metrics are added per MiB and when a session ends


class UDPStreamListener(DatagramProtocol):
    """
    The listening socket of one UDP stream route.

    C{route} is replaced when the table moves the listener's traffic: new
    sessions use the new route, open ones keep their endpoint.
    """

    noisy = False
    transport: udp.Port  # its socket's sendto is called directly, skipping Port.write's checks

    def __init__(
        self, route: StreamRoute, pool: UpstreamPool, metrics: Metrics, reactor: Any, max_sessions: int = DEFAULT_MAX_SESSIONS
    ) -> None:
        self.route = route
        self.pool = pool
        self.metrics = metrics
        self.reactor = reactor
        self.max_sessions = max_sessions
        self.sessions: dict[Any, UDPSession] = {}
        self.accepting = True  # False while a removed listener drains
        self._sendto: Callable[[bytes, Any], int] = _no_socket

    def startProtocol(self) -> None:
        self._sendto = self.transport.socket.sendto

    def datagramReceived(self, data: bytes, addr: Any) -> None:
        session = self.sessions.get(addr)
        if session is None:
            session = self._open(addr)
            if session is None:
                return
        session.send(data)

    def _open(self, client: Any) -> Optional[UDPSession]:
        route = self.route
        if len(self.sessions) >= self.max_sessions or not self.accepting:
            self.drop(route, "session-limit" if self.accepting else "listener-closed")
            return None
        target = self.pool.choose(route.upstream)
        if target is None:
            self.drop(route, "no-endpoint")
            return None
        session = UDPSession(self, client, route, target)
        try:
            session.start()
        except OSError as error:  # out of sockets or ports: this datagram is lost, the listener lives
            log.warn("stream {route}: cannot open an upstream socket: {error}", route=route.name, error=error)
            self.drop(route, "socket")
            return None
        self.sessions[client] = session
        self.metrics.stream_connections.labels(route.name, UDP).inc()
        self.metrics.stream_active.labels(route.name, UDP).inc()
        return session

    def reply(self, data: bytes, client: Any, route: StreamRoute) -> None:
        """Send an upstream's datagram to the client of its session."""
        try:
            self._sendto(data, client)
        except OSError:
            self.drop(route, "send")

    def drop(self, route: StreamRoute, reason: str) -> None:
        self.metrics.stream_dropped.labels(route.name, reason).inc()

    def session_closed(self, session: UDPSession) -> None:
        if self.sessions.get(session.client) is session:
            del self.sessions[session.client]
        self.metrics.stream_active.labels(session.route.name, UDP).dec()

    def close_sessions(self) -> int:
        """End every session (the listener was removed and its drain time is over)."""
        sessions = list(self.sessions.values())
        for session in sessions:
            session.close()
        return len(sessions)

    def stopProtocol(self) -> None:
        self._sendto = _no_socket


@implementer(IReadDescriptor)
class UDPSession:
    """
    One client's traffic: a socket connected to the endpoint chosen for it.

    The socket is read by the reactor directly (an L{IReadDescriptor}), not
    through C{listenUDP}: a Twisted UDP port logs a line each time one is
    opened, which for a session per client would be a log line per client,
    and its generic read loop costs more than this one, which does nothing
    but hand each reply to the listening socket.
    """

    def __init__(self, listener: UDPStreamListener, client: Any, route: StreamRoute, target: Address) -> None:
        self.listener = listener
        self.client = client
        self.route = route
        self.target = target
        self.clock: Callable[[], float] = listener.reactor.seconds
        self.last_active: float = self.clock()
        self.closed = False
        self.socket: Optional[socket.socket] = None
        self._pending: Optional[list[bytes]] = []
        self._send: Callable[[bytes], int] = _no_socket
        self._idle: Optional[IdleTimer] = None
        self._up = self._down = 0  # bytes not yet added to the metrics

    def start(self) -> None:
        """Open the session's socket (raises OSError), and connect it once the target's IP is known."""
        host = self.target[0]
        self.socket = socket.socket(socket.AF_INET6 if isIPv6Address(host) else socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.setblocking(False)
        self._idle = IdleTimer(self.listener.reactor, self.route.idle_timeout, self._last_active_flushed, self.close)
        if isIPAddress(host) or isIPv6Address(host):
            self._connect(host)
        else:
            self.listener.reactor.resolve(host).addCallbacks(self._connect, self._unresolved)

    def _connect(self, ip: str) -> None:
        if self.closed or self.socket is None:
            return
        try:
            self.socket.connect((ip, self.target[1]))
        except OSError as error:
            self._error("socket", str(error))
            return
        self._send = self.socket.send
        self.listener.reactor.addReader(self)
        pending, self._pending = self._pending, None
        for data in pending or ():
            self._forward(data)

    def _unresolved(self, reason: Failure) -> None:
        self._error("resolve", reason.getErrorMessage())

    def send(self, data: bytes) -> None:
        """A datagram from the client."""
        self.last_active = self.clock()
        pending = self._pending
        if pending is None:
            self._forward(data)
        elif len(pending) < MAX_PENDING:
            pending.append(data)
        else:
            self.listener.drop(self.route, "pending")

    def _forward(self, data: bytes) -> None:
        try:
            self._send(data)
        except ConnectionRefusedError:
            self.connectionRefused()
            return
        except OSError:
            self.listener.drop(self.route, "send")
            return
        self._up += len(data)
        if self._up >= FLUSH_BYTES:
            self._flush()

    # IReadDescriptor

    def fileno(self) -> int:
        return self.socket.fileno() if self.socket is not None else -1

    def logPrefix(self) -> str:
        return "UDPSession"

    def doRead(self) -> None:
        """The endpoint's replies, up to a batch per wake-up, to the client of this session."""
        if self.socket is None:  # closed: the reactor no longer reads it
            return
        recv = self.socket.recv
        reply, client, route = self.listener.reply, self.client, self.route
        for _ in range(READ_BATCH):
            try:
                data = recv(MAX_DATAGRAM)
            except BlockingIOError:
                break
            except ConnectionRefusedError:
                self.connectionRefused()
                return
            except OSError as error:
                self._error("recv", str(error))
                return
            self._down += len(data)
            reply(data, client, route)
        self.last_active = self.clock()
        if self._down >= FLUSH_BYTES:
            self._flush()

    def connectionLost(self, reason: Failure) -> None:
        """
        The reactor dropped the socket: epoll reports a queued ICMP "port
        unreachable" as an error event before any recv() sees ECONNREFUSED.
        """
        if not self.closed:
            self.connectionRefused()

    def connectionRefused(self) -> None:
        """ICMP port unreachable from the endpoint: skip it for a while, end this session."""
        self.listener.pool.mark_down(self.target)
        self._error("refused", "port unreachable")

    def _error(self, reason: str, detail: str) -> None:
        self.listener.metrics.stream_upstream_errors.labels(self.route.name, UDP, reason).inc()
        log.info("stream {route}: upstream {host}:{port}: {detail}", route=self.route.name, host=self.target[0], port=self.target[1], detail=detail)
        self.close()

    def _flush(self) -> None:
        """Add the bytes counted since the last flush to the metrics (per MiB, and at the end: not per datagram)."""
        counter = self.listener.metrics.stream_bytes
        if self._up:
            counter.labels(self.route.name, UDP, "upstream").inc(self._up)
        if self._down:
            counter.labels(self.route.name, UDP, "downstream").inc(self._down)
        self._up = self._down = 0

    def _last_active_flushed(self) -> float:
        """For the idle timer, which also brings the byte metrics of a long session up to date."""
        self._flush()
        return self.last_active

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._idle is not None:
            self._idle.cancel()
        self._send = _no_socket
        self._flush()
        if self.socket is not None:
            if self._pending is None:
                self.listener.reactor.removeReader(self)
            self.socket.close()
        self.listener.session_closed(self)


def _no_socket(*args: Any) -> int:
    raise OSError("socket closed")
