# -*- test-case-name: tests.proxy.test_grpc -*-
"""
An HTTP/2 request relayed to an HTTP/2 endpoint: gRPC, and h2c or h2 backends.

Frames pass stream to stream: the request's headers (as routing and the
policies made them), DATA both ways, trailers both ways (gRPC's status lives
there), and resets both ways (a cancelled call reaches the endpoint).  Each
side's window is opened only as the other side takes the bytes, so a slow
reader on either end holds back its peer, and no more than a window waits
here.  An endpoint that cannot be reached, refuses, or dies mid-call gives a
gRPC client C{UNAVAILABLE} (14) in trailers, as gRPC's HTTP/2 mapping asks,
rather than a reset or an HTML 502.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final, Optional, Protocol, cast

from h2.errors import ErrorCodes
from h2.exceptions import ProtocolError, StreamClosedError
from twisted.internet.interfaces import IConnector
from twisted.logger import Logger

from ingress.proxy.http2.fields import Headers, upstream_request_headers
from ingress.proxy.http2.upstream import H2UpstreamConnection, H2UpstreamPool
from ingress.proxy.message import h1
from ingress.proxy.request.exchange import Exchange
from ingress.proxy.request.shared import Shared
from ingress.proxy.request.upstream import Address

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

GRPC_UNAVAILABLE: Final = b"14"
_CONNECTION_SPECIFIC: Final = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"server"})


class H2Shared(Shared, Protocol):
    """
    A listener's shared pieces as the HTTP/2 relay reads them: L{Shared} and the HTTP/2 endpoints'
    pool.  Named here, not in L{Shared}, so that the request path names nothing of HTTP/2 (the
    factory, L{ingress.proxy.http1.factory.HTTPProxyFactory}, has both).
    """

    http2_upstreams: H2UpstreamPool


class StreamClient(Protocol):
    """What an L{H2Exchange} asks of its client's stream (L{ingress.proxy.http2.stream.H2Stream}): frames, not an HTTP/1.1 head."""

    def acknowledge(self, size: int) -> None:
        """C{size} bytes of the request were taken: the client may send as many more."""

    def respond(self, status: int, headers: Headers, trailers: Optional[Headers] = None) -> None:
        """The response head (with C{trailers}: a trailers-only answer)."""

    def queue(self, data: bytes, on_sent: Callable[[int], None]) -> None:
        """Response DATA; C{on_sent} hears how much the client's window let out."""

    def end_with(self, trailers: Optional[Headers]) -> None:
        """The response is complete (with C{trailers}, if any)."""

    def reset_client(self, code: ErrorCodes) -> None:
        """The response cannot be finished: the client's stream is reset."""


class H2Exchange:
    """
    One client stream's counterpart on an endpoint's HTTP/2 connection (an L{ExchangeSink}): the
    request's L{Exchange} chooses the endpoint and keeps the request's record, the frames go
    to the client through its L{StreamClient}.
    """

    def __init__(self, exchange: Exchange, stream: StreamClient, client_headers: Headers, client_done: bool) -> None:
        self.exchange = exchange
        self.stream = stream
        route = exchange.route
        assert route is not None and route.policies is not None
        self.route = route
        self.tls = route.policies.backend_tls
        self.grpc = any(name == b"content-type" and value.startswith(b"application/grpc") for name, value in client_headers)
        te = [(name, value) for name, value in client_headers if name == b"te" and value == b"trailers"]
        self.headers = upstream_request_headers(exchange.head_bytes, b"https" if self.tls is not None else b"http") + te
        self.client_done = client_done
        self.connection: Optional[H2UpstreamConnection] = None
        self.upstream_id = 0
        self._connecting: Optional[IConnector] = None
        self._tried: set[Address] = set()
        self._to_upstream: deque[tuple[bytes, int]] = deque()  # request DATA not sent yet, with its flow-controlled length
        self._client_trailers: Optional[Headers] = None
        self._trailers_sent = False
        self._gone = False

    # -- choosing and reaching an endpoint ----------------------------------------

    def start(self) -> None:
        exchange = self.exchange
        pool = exchange.shared.pool
        tried = self._tried
        address = exchange.choose_endpoint(self.route)  # affinity, hash, ewma as for HTTP/1.1
        for _ in range(len(self.route.upstream.targets)):
            if address is None or address not in tried:
                break
            address = pool.choose(self.route.upstream)
        if address is None or address in tried:
            self._unavailable(503, "no endpoint" if not tried else "every endpoint failed")
            return
        tried.add(address)
        exchange.attempt(address, sent=False)
        upstreams = cast(H2Shared, exchange.shared).http2_upstreams  # the factory that made the stream has it
        self._connecting = upstreams.get(
            address, self.tls, self._ready, lambda detail, timed_out: self._failed(address, detail, timed_out), exchange.limits.connect_timeout
        )

    def _ready(self, connection: H2UpstreamConnection) -> None:
        self._connecting = None
        if self._gone:
            return
        exchange = self.exchange
        exchange.shared.pool.mark_up(exchange.tried or ("", 0))
        self.connection = connection
        exchange.attempt(exchange.tried, sent=True)
        self.upstream_id = connection.open_stream(self, self.headers, end_stream=self.client_done and not self._to_upstream)
        if self.client_done and not self._to_upstream:
            self._trailers_sent = True
        self.upstream_window()

    def _failed(self, address: Address, detail: str, timed_out: bool) -> None:
        self._connecting = None
        if self._gone:
            return
        factory = self.exchange.shared
        factory.pool.mark_down(address)
        factory.metrics.upstream_failures.labels("connect-timeout" if timed_out else "connect").inc()
        log.warn("upstream {address} failed: {detail}", address=f"{address[0]}:{address[1]}", detail=detail)
        self.start()  # the next endpoint, until each was tried once

    # -- the request's body and trailers -------------------------------------------

    def client_data(self, data: bytes, flow_length: int) -> None:
        self.exchange.touch_timer()
        self._to_upstream.append((data, flow_length))
        self.upstream_window()

    def client_trailers(self, headers: Headers) -> None:
        self._client_trailers = headers

    def client_end(self) -> None:
        self.client_done = True
        self.upstream_window()

    def upstream_window(self) -> None:
        """Send what the endpoint's window allows; the client's window reopens by what left."""
        connection = self.connection
        if connection is None or self._gone or not self.upstream_id:
            return
        h2 = connection.h2
        queue = self._to_upstream
        try:
            while queue:
                room = min(h2.local_flow_control_window(self.upstream_id), h2.max_outbound_frame_size)
                if room <= 0:
                    break
                data, flow_length = queue[0]
                if len(data) <= room:
                    queue.popleft()
                    h2.send_data(self.upstream_id, data)
                    self.stream.acknowledge(flow_length)
                else:
                    queue[0] = (data[room:], flow_length - room)
                    h2.send_data(self.upstream_id, data[:room])
                    self.stream.acknowledge(room)
            if not queue and self.client_done and not self._trailers_sent:
                self._trailers_sent = True
                if self._client_trailers is not None:
                    h2.send_headers(self.upstream_id, self._client_trailers, end_stream=True)
                else:
                    h2.end_stream(self.upstream_id)
        except (StreamClosedError, ProtocolError):
            queue.clear()  # the endpoint closed its side (it answered early): the rest is dropped
        connection.flush()

    # -- the response ----------------------------------------------------------------

    def upstream_headers(self, headers: Headers, ended: bool) -> None:
        """The response head; with C{ended}, a trailers-only response (gRPC's status without a message)."""
        exchange = self.exchange
        exchange.touch_timer()
        status = next((int(value) for name, value in headers if name == b":status"), 502)
        out = [(name, value) for name, value in headers if name not in _CONNECTION_SPECIFIC]
        out.append((b"server", exchange.settings.server_name))
        fields = exchange.fields  # the affinity cookie, CORS fields, an auth service's cookie
        added = fields.added(status) if fields is not None else b""
        if added:
            out.extend((lower, value) for _, lower, value in h1.split_fields(added))
        hsts = self.route.hsts if exchange.shared.scheme == b"https" else ""
        if hsts:
            out.append((b"strict-transport-security", hsts.encode("ascii")))
        if ended:
            self.stream.respond(status, out, [])
            self._release()
        else:
            self.stream.respond(status, out)

    def upstream_data(self, data: bytes, flow_length: int) -> None:
        self.exchange.touch_timer()
        connection = self.connection
        padding = flow_length - len(data)
        if padding and connection is not None:
            connection.h2.acknowledge_received_data(padding, self.upstream_id)
        self.stream.queue(data, self._sent_to_client)

    def _sent_to_client(self, size: int) -> None:
        """The client took C{size} bytes of the response: the endpoint may send as many more."""
        connection = self.connection
        if connection is not None and not self._gone and connection.connected:
            try:
                connection.h2.acknowledge_received_data(size, self.upstream_id)
            except (StreamClosedError, ProtocolError):
                return
            connection.flush()

    def upstream_trailers(self, headers: Headers) -> None:
        self.stream.end_with(headers)

    def upstream_ended(self) -> None:
        self.stream.end_with(None)
        self._release()

    def upstream_reset(self, code: int) -> None:
        self._release()
        self._fail(f"upstream reset the stream ({_error_code(code).name})", code)

    def upstream_lost(self, detail: str) -> None:
        self.connection = None
        self._fail(detail, ErrorCodes.INTERNAL_ERROR)

    def _fail(self, detail: str, code: int) -> None:
        if self._gone:
            return
        self.exchange.shared.metrics.upstream_failures.labels("reset").inc()
        log.info("upstream error for {route}: {detail}", route=self.route.name, detail=detail)
        self._unavailable(502, detail, code)

    def _unavailable(self, status: int, detail: str, code: int = ErrorCodes.INTERNAL_ERROR) -> None:
        """A failed exchange: gRPC's UNAVAILABLE in trailers, or a status (or a reset once answered) otherwise."""
        self._gone = True
        stream, exchange = self.stream, self.exchange
        if self.grpc:
            trailers = [(b"grpc-status", GRPC_UNAVAILABLE), (b"grpc-message", _grpc_message(detail))]
            if not exchange.responded:
                stream.respond(200, [(b"content-type", b"application/grpc"), (b"server", exchange.settings.server_name)], trailers)
            else:
                stream.end_with(trailers)
        elif not exchange.responded:
            exchange.answer(status)
        else:
            stream.reset_client(_error_code(code))

    def timed_out(self) -> None:
        """No frame either way for the route's read timeout (proxy-read-timeout, 60 s by default): ended."""
        if self._gone:
            return
        detail = f"no frame either way for {self.exchange.limits.read_timeout:g} s"
        log.info("upstream timeout for {route}: {detail}", route=self.route.name, detail=detail)
        self.cancel()
        self._gone = False  # cancel() marked it gone; the client still gets its answer
        self._unavailable(504, "upstream timed out: " + detail)

    def cancel(self) -> None:
        """The client reset its stream or went away: the endpoint's stream is reset too."""
        if self._gone:
            return
        self._gone = True
        if self._connecting is not None:
            self._connecting = None
        connection, self.connection = self.connection, None
        if connection is not None and self.upstream_id:
            connection.cancel(self.upstream_id)

    def _release(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.release(self.upstream_id)


def _grpc_message(detail: str) -> bytes:
    """grpc-message is percent-encoded (gRPC's HTTP/2 protocol): printable ASCII but "%" passes as is."""
    raw = detail.encode("utf-8", "replace")
    return b"".join(bytes([byte]) if 0x20 <= byte <= 0x7E and byte != 0x25 else b"%%%02X" % byte for byte in raw)


def _error_code(code: int) -> ErrorCodes:
    try:
        return ErrorCodes(code)
    except ValueError:
        return ErrorCodes.INTERNAL_ERROR
