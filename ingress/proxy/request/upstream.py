# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
Upstream side of the HTTP proxy: connections to endpoints, their keep-alive
pools, round-robin balancing and passive health.

Pools are keyed by endpoint address, not by route, so a new routing table
that keeps an endpoint keeps its warm connections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Optional

from twisted.internet.error import TimeoutError as ConnectTimeout
from twisted.internet.interfaces import IConnector, IDelayedCall, IPushProducer
from twisted.internet.protocol import ClientFactory, connectionDone
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python.failure import Failure
from zope.interface import classImplements

from ingress.proxy.message import h1, headend
from ingress.proxy.message.chunked import ChunkedFramer
from ingress.proxy.request.backend_tls import connection_creator
from ingress.proxy.request.ewma import EwmaScores
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.sink import ResponseSink
from ingress.proxy.transport import release_connector
from ingress.routing.policies.backend import BackendTLS
from ingress.routing.table import Upstream
from ingress.runtime.reactor import IProcessReactor
from ingress.speedups.fastwrite import direct_writer
from ingress.speedups.nativeprotocol import NativeProtocol

Address = tuple[str, int]
PoolKey = tuple[Address, str]  # an endpoint, and "" (plain) or the key of a TLS configuration

# A response's framing: its head, its body, a tunnel after a 101, done (Final literals: see states.py).
_HEAD: Final = 0
_BODY: Final = 1
_TUNNEL: Final = 2
_DONE: Final = 3


class UpstreamConnection(NativeProtocol):
    """
    One connection to an endpoint; owned by one request at a time, pooled between.

    It frames the response (head, then body by length, chunks or close) and
    hands the raw bytes to its owner, and registers itself as the producer of
    its own transport so a full upstream send buffer pauses the client.
    """

    def __init__(self, pool: UpstreamPool, address: Address, tls: str = "") -> None:
        self.pool = pool
        self.address = address
        self.pool_key: PoolKey = (address, tls)  # TLS connections (and each TLS configuration) pool apart
        self.owner: Optional[ResponseSink] = None
        self.reused = False
        self.got_bytes = False
        self._buffer = b""
        self._state = _HEAD
        self._remaining = 0
        self._framer: Optional[ChunkedFramer] = None
        self._keep_alive = False
        self.idle_since = 0.0
        self._on_connect: Optional[Callable[[UpstreamConnection], None]] = None

    def connectionMade(self) -> None:
        self.pool.opened += 1
        self.transport.setTcpNoDelay(True)  # heads are written whole; never wait for an ACK
        self.transport.registerProducer(self, True)
        self.write = direct_writer(self.transport)
        callback, self._on_connect = self._on_connect, None
        if callback is not None:
            callback(self)

    # IPushProducer for our own transport: a full send buffer pauses the client's reads.
    def pauseProducing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_write_paused(True)

    def resumeProducing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_write_paused(False)

    def stopProducing(self) -> None:
        pass

    def start(self, owner: ResponseSink, data: bytes) -> None:
        """Take a request: reset response framing and send its first bytes."""
        self.owner = owner
        self.got_bytes = False
        self._state = _HEAD
        self._buffer = b""
        self.write(data)

    def dataReceived(self, data: bytes) -> None:
        owner = self.owner
        if owner is None:
            # An idle connection must stay silent; anything else desynchronises it.
            self.transport.abortConnection()
            return
        self.got_bytes = True
        state = self._state
        if state == _BODY:
            self._body(owner, data)
        elif state == _HEAD:
            self._head(owner, data)
        elif state == _TUNNEL:
            owner.upstream_tunnel_data(data)
        else:
            self.transport.abortConnection()

    def _head(self, owner: ResponseSink, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        while True:
            end = headend.find_head_end(buffer)
            if end < 0:
                if len(buffer) > self.pool.settings.max_head_bytes:
                    self._fail(owner, 502, "upstream response head too large")
                else:
                    self._buffer = buffer
                return
            try:
                head = h1.parse_response_head(buffer[:end], owner.request_method)
            except h1.HTTPError as error:
                self._fail(owner, 502, error.detail)
                return
            rest = buffer[end:]
            if head.status == 101:
                self._buffer = b""
                self._state = _TUNNEL
                owner.upstream_head(head, rest, False)
                return
            if head.status < 200:
                owner.upstream_head(head, b"", False)
                buffer = rest
                continue
            self._buffer = b""
            self._start_body(owner, head, rest)
            return

    def _start_body(self, owner: ResponseSink, head: h1.Head, rest: bytes) -> None:
        framing = head.framing
        self._keep_alive = head.keep_alive and not framing.until_close
        if framing.content_length is not None:
            length = framing.content_length
            if len(rest) >= length:
                if len(rest) > length:
                    self._keep_alive = False
                self._state = _DONE
                owner.upstream_head(head, rest[:length], True)
                if self.owner is owner:  # not let go of on seeing the head (a retry on another endpoint)
                    self._finish(owner)
                return
            self._remaining = length - len(rest)
            self._state = _BODY
            owner.upstream_head(head, rest, False)
            return
        self._framer = ChunkedFramer() if framing.chunked else None
        self._state = _BODY
        owner.upstream_head(head, b"", False)
        if rest and self.owner is owner:
            self._body(owner, rest)

    def _body(self, owner: ResponseSink, data: bytes) -> None:
        framer = self._framer
        if framer is not None:
            try:
                used = framer.feed(data)
            except h1.HTTPError as error:
                self._fail(owner, 502, f"upstream: {error.detail}")
                return
            if used:
                owner.upstream_data(data[:used] if used < len(data) else data)
            if framer.done:
                if used < len(data):
                    self._keep_alive = False
                self._framer = None
                self._finish(owner)
            return
        if self._remaining:
            size = len(data)
            if size >= self._remaining:
                if size > self._remaining:
                    self._keep_alive = False
                    data = data[: self._remaining]
                self._remaining = 0
                owner.upstream_data(data)
                self._finish(owner)
            else:
                self._remaining -= size
                owner.upstream_data(data)
            return
        owner.upstream_data(data)  # delimited by close

    def _finish(self, owner: ResponseSink) -> None:
        self._state = _DONE
        self.owner = None
        owner.upstream_done()
        # The owner hands us back with release() when its request is fully sent.

    def _fail(self, owner: ResponseSink, status: int, detail: str) -> None:
        self.owner = None
        self._state = _DONE
        self.transport.abortConnection()
        owner.upstream_failed(status, detail, responded=self.got_bytes)

    @property
    def reusable(self) -> bool:
        """A connection whose last response ended cleanly and asked for no close."""
        return self._state == _DONE and self._keep_alive and bool(self.connected)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.connected = False
        self.pool.forget(self)
        owner, self.owner = self.owner, None
        if owner is None:
            return
        if (self._state == _BODY and self._framer is None and not self._remaining) or self._state == _TUNNEL:
            owner.upstream_done()  # a close-delimited body (or a tunnel) ends here
        else:
            owner.upstream_failed(502, "upstream closed the connection", responded=self.got_bytes)


classImplements(UpstreamConnection, IPushProducer)


class _Connector(ClientFactory):
    """Builds one L{UpstreamConnection} and reports success or failure once."""

    noisy = False

    def __init__(
        self,
        pool: UpstreamPool,
        address: Address,
        connected: Callable[[UpstreamConnection], None],
        failed: Callable[[Address, str, bool], None],
        tls: str = "",
    ) -> None:
        self.pool = pool
        self.address = address
        self.connected = connected
        self.failed = failed
        self.tls = tls

    def buildProtocol(self, addr: object) -> UpstreamConnection:  # type: ignore[override]  # Twisted's stubs want a Protocol subclass; an IProtocol is what connectTCP uses
        connection = UpstreamConnection(self.pool, self.address, self.tls)
        connection._on_connect = self.connected
        return connection

    def clientConnectionFailed(self, connector: object, reason: Failure) -> None:
        timed_out = reason.check(ConnectTimeout) is not None
        self.failed(self.address, reason.getErrorMessage(), timed_out)

    def clientConnectionLost(self, connector: object, reason: Failure) -> None:
        release_connector(connector)


class UpstreamPool:
    """
    Idle keep-alive connections per endpoint, round-robin positions per
    upstream, and passive health: an endpoint that refused or timed out is
    skipped for C{fail_timeout} seconds unless nothing else is left.
    """

    def __init__(self, reactor: IProcessReactor, settings: ProxySettings) -> None:
        self.reactor = reactor
        self.settings = settings
        self._idle: dict[PoolKey, list[UpstreamConnection]] = {}
        self._next: dict[str, int] = {}
        self._down_until: dict[Address, float] = {}
        self._sweeper: Optional[IDelayedCall] = None
        self.ewma = EwmaScores(reactor.seconds)  # for the routes with load-balance: ewma
        self.opened = 0  # connections made (ingress.observe.upstream_metrics)
        self.pool_full = 0  # reusable connections closed because their endpoint's idle list was full

    def choose(self, upstream: Upstream, exclude: Optional[Address] = None) -> Optional[Address]:
        """The next endpoint in turn that is not marked down (or any, if all are)."""
        targets = upstream.targets
        count = len(targets)
        if not count:
            return None
        start = self._next.get(upstream.key, 0)
        down = self._down_until
        now = self.reactor.seconds() if down else 0.0
        fallback = None
        for step in range(count):
            index = (start + step) % count
            address = targets[index]
            if address == exclude:
                continue
            if down and down.get(address, 0.0) > now:
                fallback = fallback or (index, address)
                continue
            self._next[upstream.key] = index + 1
            return address
        if fallback is None:
            return None
        self._next[upstream.key] = fallback[0] + 1
        return fallback[1]

    def is_down(self, address: Address) -> bool:
        """Whether C{address} failed within the last C{fail_timeout} seconds."""
        until = self._down_until.get(address)
        return until is not None and until > self.reactor.seconds()

    def mark_down(self, address: Address) -> None:
        self._down_until[address] = self.reactor.seconds() + self.settings.fail_timeout

    def mark_up(self, address: Address) -> None:
        self._down_until.pop(address, None)

    def take_idle(self, address: Address, tls: Optional[BackendTLS] = None) -> Optional[UpstreamConnection]:
        """A pooled connection to C{address} (with this TLS, or plain), most recently used first (warmest)."""
        idle = self._idle.get((address, tls.key if tls is not None else ""))
        while idle:
            connection = idle.pop()
            if connection.connected:
                connection.reused = True
                return connection
        return None

    def connect(
        self,
        address: Address,
        connected: Callable[[UpstreamConnection], None],
        failed: Callable[[Address, str, bool], None],
        timeout: float = 0.0,
        tls: Optional[BackendTLS] = None,
    ) -> IConnector:
        """Open a new connection (within C{timeout} seconds, or --connect-timeout); exactly one of the callbacks runs later."""
        connector = _Connector(self, address, connected, failed, tls.key if tls is not None else "")
        factory: ClientFactory = connector if tls is None else TLSMemoryBIOFactory(connection_creator(tls), True, connector)  # type: ignore[assignment]  # TLSMemoryBIOFactory is a WrappingFactory to the stubs, not a ClientFactory; connectTCP takes it as one
        return self.reactor.connectTCP(address[0], address[1], factory, timeout=timeout or self.settings.connect_timeout)

    def release(self, connection: UpstreamConnection) -> None:
        """Pool a connection whose exchange finished, or close it if it can't be reused."""
        idle = self._idle.setdefault(connection.pool_key, [])
        if not connection.reusable:
            connection.transport.loseConnection()
            return
        if len(idle) >= self.settings.max_idle_per_endpoint:
            self.pool_full += 1
            connection.transport.loseConnection()
            return
        connection.reused = False
        connection.idle_since = self.reactor.seconds()
        idle.append(connection)
        if self._sweeper is None:
            self._sweeper = self.reactor.callLater(self.settings.upstream_idle_timeout / 2, self._sweep)

    def idle_count(self) -> int:
        """Connections parked now, for every endpoint."""
        return sum(len(idle) for idle in self._idle.values())

    def _sweep(self) -> None:
        """
        Close connections idle longer than the idle timeout.

        One timer for the whole pool instead of one per parked connection:
        parking and unparking happen on every request, sweeping twice per
        timeout.  Idle lists are most-recently-used last, so the stale ones
        are at the front.
        """
        self._sweeper = None
        deadline = self.reactor.seconds() - self.settings.upstream_idle_timeout
        for idle in list(self._idle.values()):
            while idle and idle[0].idle_since <= deadline:
                idle.pop(0).transport.loseConnection()
        if any(self._idle.values()):
            self._sweeper = self.reactor.callLater(self.settings.upstream_idle_timeout / 2, self._sweep)

    def forget(self, connection: UpstreamConnection) -> None:
        idle = self._idle.get(connection.pool_key)
        if idle and connection in idle:
            idle.remove(connection)
            if not idle:
                del self._idle[connection.pool_key]
