# -*- test-case-name: tests.unit.test_exchange_direct -*-
"""
One attempt at an endpoint for an exchange's request: an L{UpstreamAttempt} (Envoy's UpstreamRequest).

An attempt holds what one try at an endpoint is: the endpoint, the upstream connection (or the
connector opening one), and the request bytes held for it while the connection is being opened.
It is the L{ResponseSink} its upstream connection reports to; it keeps the connection's side of
each report (the connection is let go, resumed, pooled or closed) and passes the response on to
its exchange through L{AttemptOwner}, a few methods and the three attributes it reads.  The
exchange makes one attempt for a request it sends upstream, and another for each retry (which
takes over the bytes the last one held unsent, L{UpstreamAttempt.__init__}'s C{previous}).
The owner is a base class, not a typing protocol (like L{ResponseSink}), so that, compiled, the
attempt's calls to its exchange are native; this module imports nothing of the exchange's.
"""

from __future__ import annotations

from typing import Final, Optional

from twisted.internet.interfaces import IConnector
from twisted.logger import Logger

from ingress.proxy.http import h1
from ingress.proxy.http.client import ClientSide
from ingress.proxy.http.shared import Shared
from ingress.proxy.http.sink import ResponseSink
from ingress.proxy.http.states import CLOSED, TUNNEL
from ingress.proxy.http.upstream import Address, UpstreamConnection
from ingress.routing.policies import EWMA
from ingress.routing.policies.backend import BackendTLS
from ingress.routing.table import Route

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

PENDING_LIMIT: Final = 1 << 20  # request bytes held while the upstream connection is being opened


class AttemptOwner:
    """
    What an attempt reports to the exchange that made it (the base class of
    L{ingress.proxy.http.exchange.Exchange}), and the three of its attributes the attempt reads.
    """

    __slots__ = ()

    client: ClientSide  # the response goes to it; paused while too much is held; its fullness pauses the upstream
    state: int  # CLOSED: a connection opened too late is closed; TUNNEL: the upstream's close ends the tunnel
    request_method: bytes  # how the upstream's response is framed (HEAD, CONNECT)
    request_complete: bool  # the whole request was read: a connection whose response ended is pooled

    def sending(self) -> None:
        """The request goes to the endpoint now (its response time starts)."""
        raise NotImplementedError

    def attempt_connect_failed(self, detail: str, timed_out: bool) -> None:
        raise NotImplementedError

    def attempt_failed(self, status: int, detail: str, responded: bool, reused: bool) -> None:
        raise NotImplementedError

    def fail(self, status: int, detail: str) -> None:
        raise NotImplementedError

    def response_head(self, head: h1.Head, body: bytes, complete: bool) -> None:
        """A final response head, or a 101 the client side can make a tunnel of."""
        raise NotImplementedError

    def touch_timer(self) -> None:
        raise NotImplementedError

    def send_paused(self, paused: bool) -> None:
        raise NotImplementedError


class UpstreamAttempt(ResponseSink):
    """One try at an endpoint: its connection (or connector) and the request bytes held for it."""

    __slots__ = ("owner", "shared", "request_method", "address", "head_bytes", "connection", "connecting", "pending", "pending_size")

    def __init__(self, owner: AttemptOwner, shared: Shared, previous: Optional[UpstreamAttempt]) -> None:
        self.owner = owner
        self.shared = shared
        self.request_method = owner.request_method
        self.address: Optional[Address] = None  # the endpoint, once chosen
        self.head_bytes = b""  # the head it sends (the request's, or the one asking an error backend)
        self.connection: Optional[UpstreamConnection] = None
        self.connecting: Optional[IConnector] = None
        # request bytes held while the connection is being opened (a retry's: what the last attempt never sent)
        self.pending: Optional[list[bytes]] = previous.pending if previous is not None else None
        self.pending_size: int = previous.pending_size if previous is not None else 0

    def start(self, address: Address, tls: Optional[BackendTLS], connect_timeout: float, head_bytes: bytes) -> None:
        """Send the request to C{address}: on a pooled connection to it if there is one, else on a new one."""
        self.address = address
        self.head_bytes = head_bytes
        pool = self.shared.pool
        connection = pool.take_idle(address, tls)
        if connection is not None:
            self._bind(connection)
        else:
            self.connecting = pool.connect(address, self._connected, self._connect_failed, connect_timeout, tls)

    def _connected(self, connection: UpstreamConnection) -> None:
        if self.owner.state == CLOSED:
            connection.transport.loseConnection()  # the request was answered meanwhile
            return
        self.connecting = None
        self.shared.pool.mark_up(connection.address)
        self._bind(connection)

    def _connect_failed(self, address: Address, detail: str, timed_out: bool) -> None:
        if self.owner.state == CLOSED:
            return
        self.connecting = None
        shared = self.shared
        shared.pool.mark_down(address)
        shared.metrics.upstream_failures.labels("connect-timeout" if timed_out else "connect").inc()
        log.warn("upstream {address} failed: {detail}", address=f"{address[0]}:{address[1]}", detail=detail)
        self.owner.attempt_connect_failed(detail, timed_out)

    def _bind(self, connection: UpstreamConnection) -> None:
        self.connection = connection
        owner = self.owner
        client = owner.client
        if client.client_full:
            connection.transport.pauseProducing()
        pending = self.pending
        owner.sending()
        if pending:
            data = self.head_bytes + b"".join(pending)
            self.pending = None
            self.pending_size = 0
            client.resume_reading("connecting")
        else:
            data = self.head_bytes
        connection.start(self, data)

    def write(self, data: bytes) -> None:
        """Request bytes: to the connection, or held (up to a limit: then the client's reading pauses) while it is being opened."""
        connection = self.connection
        if connection is not None:
            connection.write(data)
            return
        if self.pending is None:
            self.pending = [data]
        else:
            self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size > PENDING_LIMIT:
            self.owner.client.pause_reading("connecting")

    def forget_pending(self) -> None:
        """What was held is not to be sent (an error backend is asked instead)."""
        self.pending, self.pending_size = None, 0

    def hold(self, held: bool) -> None:
        """The client takes no more response for now (C{held}), or takes it again: the connection's reading follows."""
        connection = self.connection
        if connection is not None:
            if held:
                connection.transport.pauseProducing()
            else:
                connection.transport.resumeProducing()

    def drop(self) -> None:
        """Abort the connection (or the opening of one); what was held stays for a retry."""
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.owner = None
            connection.transport.abortConnection()
        connecting, self.connecting = self.connecting, None
        if connecting is not None:
            connecting.disconnect()

    def release(self, request_complete: bool) -> None:
        """The response is over: the connection goes back to the pool, or closes if the request was cut short."""
        connection, self.connection = self.connection, None
        if connection is not None:
            if self.owner.client.client_full:
                connection.transport.resumeProducing()
            if request_complete:
                self.shared.pool.release(connection)
            else:
                connection.transport.loseConnection()

    def answered(self, route: Route, waited: float) -> None:
        """The first response head taken came C{waited} seconds after the request was sent: counted, and scored for ewma."""
        shared = self.shared
        shared.metrics.upstream_answered(route.name, waited)
        policies = route.policies
        if policies is not None and policies.load_balance == EWMA and self.address is not None:
            shared.pool.ewma.observe(self.address, waited)

    def idle(self) -> bool:
        """Neither connected nor connecting (given up, or not started)."""
        return self.connection is None and self.connecting is None

    def write_tunnel(self, data: bytes) -> None:
        """A tunnel's bytes from the client, while the upstream's side of it is open."""
        if self.connection is not None:
            self.connection.write(data)

    # -- ResponseSink: what the upstream connection reports ------------------------------

    def upstream_head(self, head: h1.Head, body: bytes, complete: bool) -> None:
        owner = self.owner
        status = head.status
        if status < 200 and status != 101:
            owner.client.send_interim(head)
        elif status == 101 and not owner.client.tunnels:
            owner.fail(502, "101 for an HTTP/2 request")
        else:
            owner.response_head(head, body, complete)

    def upstream_data(self, data: bytes) -> None:
        owner = self.owner
        owner.client.send_body(data)
        owner.touch_timer()

    def upstream_tunnel_data(self, data: bytes) -> None:
        self.owner.client.send_tunnel(data)

    def upstream_write_paused(self, paused: bool) -> None:
        self.owner.send_paused(paused)

    def upstream_done(self) -> None:
        """The response ended: the client side ends it too (or, for a tunnel, closes), and the connection is let go."""
        owner = self.owner
        if owner.state == TUNNEL:
            self.connection = None
            owner.client.close()
            return
        self.release(owner.request_complete)
        owner.client.end_response()

    def upstream_failed(self, status: int, detail: str, responded: bool) -> None:
        """The connection failed (C{responded}: it sent something that was not a response)."""
        connection, self.connection = self.connection, None
        owner = self.owner
        if owner.state == CLOSED:
            return
        if connection is not None and owner.client.client_full:
            connection.transport.resumeProducing()
        owner.attempt_failed(status, detail, responded, connection is not None and connection.reused)
