# -*- test-case-name: tests.proxy.test_http2 -*-
"""
One HTTP/2 request's client side: its stream.

An L{H2Stream} is the L{ingress.proxy.request.client.ClientSide} of one
L{ingress.proxy.request.exchange.Exchange}, as an HTTP/1.1 connection is of each of its
requests: routing, guards, endpoint choice, pooled connections, retries and the ewma
scores are the exchange's, the same code for both.  What the stream does is HTTP/2's:
the request body arrives in DATA frames and is acknowledged (WINDOW_UPDATE) only while
the upstream takes it; the response goes out through its L{StreamOutput} as the client's
window allows, and a stream holding more than L{HIGH_WATER} bytes its client has made no
room for pauses its own upstream connection's reads, and no other stream's.  A route whose
endpoints speak HTTP/2 (gRPC, h2c) hands the stream to an L{H2Exchange} instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Optional

from h2.errors import ErrorCodes
from h2.exceptions import StreamClosedError
from twisted.logger import Logger

from ingress.proxy.http2.exchange import H2Exchange
from ingress.proxy.http2.fields import Headers
from ingress.proxy.http2.response import StreamConnection, StreamOutput
from ingress.proxy.idle import Deadline, GroupDeadline
from ingress.proxy.message import h1
from ingress.proxy.request import failures
from ingress.proxy.request.exchange import Exchange
from ingress.proxy.request.forwarding import UNKNOWN_PEER, ForwardedFor
from ingress.proxy.request.states import AUTH, BODY, CLOSED

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

HIGH_WATER: Final = 1 << 16  # response bytes a stream holds for a client that gives no window, before its upstream is paused


class H2Stream:
    """A request on an HTTP/2 connection: the client side of its exchange."""

    tunnels = False  # a 101 is answered 502
    # A stream's state starts as these values, read from the class until the stream writes its own:
    # a stream per request, and each attribute store in __init__ is a cost of the HTTP/2 bench.
    client_full = False
    _unacknowledged = 0  # request bytes received while the upstream pushed back
    _body_received = 0
    _chunked_upstream = False
    _h2_exchange: Optional[H2Exchange] = None  # an HTTP/2 endpoint's stream (backend-protocol GRPC, GRPCS, H2C)
    _headers: Optional[Headers] = None  # the request's fields as received, for an HTTP/2 endpoint
    _held_end = False

    def __init__(self, connection: StreamConnection, stream_id: int) -> None:
        self.connection = connection
        self.stream_id = stream_id
        factory = connection.factory
        self.transport = connection.transport
        self.timer: Deadline = GroupDeadline(connection.deadlines, self._timed_out)
        self.exchange = Exchange(self, factory, factory.settings, connection.limits, UNKNOWN_PEER, "h2")
        self.out = StreamOutput(connection, stream_id)
        self._read_pauses: set[str] = set()
        self._held: list[tuple[bytes, int]] = []  # request DATA while a guard decides (basic or external auth)

    # -- the request ------------------------------------------------------------

    def begin(self, head: h1.Head, headers: Headers, has_body: bool) -> None:
        """The request's HEADERS arrived (C{head}: as L{ingress.proxy.http2.fields.request_head} read them): its exchange runs it."""
        self._headers = headers
        self.exchange.run(head, has_body)

    def refuse_request(self, error: h1.HTTPError, has_body: bool) -> None:
        """The request's HEADERS ask for what HTTP/1.1 would refuse too: its answer, on this stream."""
        if not has_body:
            self.exchange.body_done()
        self.refuse(error.status, error.detail)

    def guarded(self, passed: bool) -> None:
        """Basic or external auth decided: the request's DATA, held (not acknowledged) until now, goes on or is dropped."""
        held, self._held = self._held, []
        if not passed:
            for _, flow_length in held:
                self._acknowledge(flow_length)
            if self._held_end:
                self.exchange.body_done()
            return
        for data, flow_length in held:
            self.receive_body(data, flow_length)
        if self._held_end:
            self.end_of_body()

    def read_body(self, framing: h1.Framing, max_body: int) -> None:
        self._chunked_upstream = framing.chunked

    def relay_http2(self) -> None:
        """To an HTTP/2 endpoint's stream (L{H2Exchange}), frames as they come."""
        exchange, headers = self.exchange, self._headers
        assert headers is not None
        self._h2_exchange = H2Exchange(exchange, self, headers, exchange.request_complete)
        self._h2_exchange.start()

    def local_host(self) -> str:
        return self.connection.local_host()

    def local_port(self) -> bytes:
        return self.connection.local_port()

    def receive_body(self, data: bytes, flow_length: int) -> None:
        """A DATA frame of the request: on upstream, acknowledged now or once the upstream takes more."""
        exchange = self.exchange
        state = exchange.state
        if state == AUTH:
            self._held.append((data, flow_length))
            return
        if self._h2_exchange is not None and state == BODY:
            self._h2_exchange.client_data(data, flow_length)
            return
        if state != BODY:  # answered already: the bytes are dropped, the window kept open
            self._acknowledge(flow_length)
            return
        self._body_received += len(data)
        if self._body_received > exchange.limits.max_body:
            self._acknowledge(flow_length)
            self.refuse(413, "request body too large")
            return
        if self._read_pauses:
            self._unacknowledged += flow_length
        else:
            self._acknowledge(flow_length)
        if data:
            exchange.touch_timer()
            exchange.send_upstream(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked_upstream else data)

    def end_of_body(self) -> None:
        """The client's half is closed (END_STREAM)."""
        exchange = self.exchange
        state = exchange.state
        if state == AUTH:
            self._held_end = True
            return
        if state == BODY:
            if self._h2_exchange is not None:
                exchange.body_done()
                self._h2_exchange.client_end()
                return
            if self._chunked_upstream:
                exchange.send_upstream(b"0\r\n\r\n")
        exchange.body_done()

    def trailers(self, headers: Headers) -> None:
        """The request's trailers: an HTTP/2 endpoint gets them; an HTTP/1.1 one does not (not forwarded)."""
        if self._h2_exchange is not None and self.exchange.state == BODY:
            self._h2_exchange.client_trailers(headers)

    def acknowledge(self, size: int) -> None:
        """An HTTP/2 endpoint took C{size} bytes of the request: the client may send as many more."""
        if self.exchange.state != CLOSED:
            self._acknowledge(size)

    def _acknowledge(self, size: int) -> None:
        if size:
            self.connection.h2.acknowledge_received_data(size, self.stream_id)
            self.connection.flush()

    def peer(self) -> ForwardedFor:
        return self.connection.peer()

    def pause_reading(self, reason: str) -> None:
        self._read_pauses.add(reason)

    def resume_reading(self, reason: str) -> None:
        self._read_pauses.discard(reason)
        if not self._read_pauses and self._unacknowledged and self.exchange.state != CLOSED:
            size, self._unacknowledged = self._unacknowledged, 0
            self._acknowledge(size)

    # -- the response (ClientSide) -------------------------------------------------

    def send_interim(self, head: h1.Head) -> None:
        pass  # interim responses are not passed on

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> int:
        sent = self.out.send_head(self.exchange, head, body, complete, added)
        if self.out.size:  # the body read with the head, held for the window
            self.exchange.touch_timer()
            self.pump()
        return sent

    def send_body(self, data: bytes) -> int:
        sent = self.out.add(data)
        if sent:
            self.pump()
        return sent

    def end_response(self) -> None:
        self.timer.cancel()
        exchange = self.exchange
        if self.out.ended:  # with the response's head, or its only DATA frame
            self._finish(exchange.status)
            return
        self.out.finish_body(exchange)
        self.pump()

    def open_tunnel(self, head: h1.Head, body: bytes) -> None:
        raise AssertionError("an HTTP/2 stream is no tunnel")  # the exchange answers a 101 with 502 first (tunnels is False)

    def send_tunnel(self, data: bytes) -> None:
        failures.fail_upstream(self.exchange, 502, "tunnel data for an HTTP/2 request")

    def pump(self) -> None:
        """Send what the flow-control windows allow; end the stream once everything is sent."""
        if self.exchange.state == CLOSED:
            return
        if self.out.pump():
            self._finish(self.exchange.status)
            return
        self.update_client_full()

    def update_client_full(self) -> None:
        """Pause this stream's upstream while the client holds it back (its window, or the connection's socket)."""
        full = self.out.size > HIGH_WATER or self.connection.paused
        if full == self.client_full:
            return
        self.client_full = full
        upstream = self.exchange.upstream
        if upstream is not None:
            if full:
                upstream.transport.pauseProducing()
            else:
                upstream.transport.resumeProducing()

    # -- answers of our own, failures and the end --------------------------------

    def answer(self, status: int, close: bool, location: bytes, fields: bytes) -> None:
        if self.out.answer(self.exchange, status, location, fields):
            self._finish(status)
        else:
            self.pump()

    def refuse(self, status: int, detail: str) -> None:
        """A request that cannot mean anything: a 4xx on its stream; the connection serves on."""
        exchange = self.exchange
        exchange.shared.metrics.malformed_requests.labels(str(status)).inc()
        log.info("refused HTTP/2 request from {peer}: {status} {detail}", peer=self.connection.peer().ip or "?", status=status, detail=detail)
        exchange.drop_upstream()
        if exchange.responded:
            exchange.done(status)
            self._reset(ErrorCodes.PROTOCOL_ERROR)
            return
        self.answer(status, False, b"", b"")

    def cut_off(self) -> None:
        self._reset(ErrorCodes.INTERNAL_ERROR)

    def close(self) -> None:
        self._reset(ErrorCodes.CANCEL)

    def _reset(self, code: ErrorCodes) -> None:
        if not self.exchange.end():
            return
        self.timer.cancel()
        self.connection.h2.reset_stream(self.stream_id, code)
        self.connection.flush()
        self.connection.stream_closed(self)

    def detach(self) -> None:
        """
        Its connection has let this stream go (closed, reset, or the connection lost): what refers
        back to the stream lets go of it (the exchange, the timer, an HTTP/2 endpoint's exchange),
        so that reference counting frees the request's objects now, not the cyclic collector later.
        """
        self.exchange.let_go()
        self.timer.retire()
        self._h2_exchange = None
        self.out.on_sent = None

    def _timed_out(self, kind: str) -> None:
        if self._h2_exchange is not None:
            self.exchange.shared.metrics.upstream_failures.labels("timeout").inc()
            self._h2_exchange.timed_out()
            return
        if kind == "body" and not self._read_pauses:
            self.refuse(408, "request body not received in time")
            return
        self.exchange.timed_out()

    def _finish(self, status: int) -> None:
        """The response is sent whole; a request body still coming is declined (RFC 9113 8.1: RST_STREAM NO_ERROR)."""
        exchange = self.exchange
        if exchange.state == CLOSED:
            return
        exchange.done(status)
        exchange.end()
        self.timer.cancel()
        if not exchange.request_complete:
            exchange.drop_upstream()
            try:
                self.connection.h2.reset_stream(self.stream_id, ErrorCodes.NO_ERROR)
            except StreamClosedError:
                pass  # the client's END_STREAM came in the same read, its event not handled yet: closed both ways already
            self.connection.flush()
        self.connection.stream_closed(self)

    def abandon(self) -> None:
        """The client reset the stream, or the connection is gone: the upstream exchange is cut too."""
        exchange = self.exchange
        if exchange.state == CLOSED:
            return
        if self._h2_exchange is not None:
            self._h2_exchange.cancel()
        exchange.end()
        self.timer.cancel()
        exchange.drop_upstream()
        exchange.done(499)  # nginx's code for a request the client gave up on

    # -- what an HTTP/2 endpoint's exchange (L{H2Exchange}) asks of its client stream --

    def respond(self, status: int, headers: Headers, trailers: Optional[Headers] = None) -> None:
        """The response head (C{trailers}: a trailers-only answer, the stream ends with them)."""
        if self.exchange.state != CLOSED and self.out.respond(self.exchange, status, headers, trailers):
            self._finish(status)

    def queue(self, data: bytes, on_sent: Callable[[int], None]) -> None:
        """Response DATA; C{on_sent} hears how much the client's window let out."""
        if self.exchange.state == CLOSED:
            return
        self.out.on_sent = on_sent
        self.exchange.sent(len(data))
        self.out.queue(data)
        self.pump()

    def end_with(self, trailers: Optional[Headers]) -> None:
        """The response is complete: after its DATA, end the stream (with C{trailers}, if any)."""
        out = self.out
        if self.exchange.state == CLOSED or out.end_pending:
            return
        out.trailers = trailers
        out.end_pending = True
        self.pump()

    def reset_client(self, code: ErrorCodes) -> None:
        exchange = self.exchange
        if exchange.state != CLOSED:
            exchange.done(exchange.status or 502)
        self._reset(code)
