# -*- test-case-name: tests.proxy.test_http2 -*-
"""
One HTTP/2 stream's response on its way out: HEADERS, DATA no faster than the client's
flow-control windows allow, then the stream's end (or trailers).

L{StreamOutput} is what an L{ingress.proxy.http2.stream.H2Stream} sends with: an HTTP/1.1
upstream's response (its head turned into HEADERS, its body decoded from chunks or gzipped),
frames from an HTTP/2 endpoint's exchange, or an answer of the proxy's own.
L{StreamConnection} is what a stream uses of its connection: the base class of
L{ingress.proxy.http2.connection.H2ServerProtocol}, here so that the stream need not import the
connection that imports it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Optional

from ingress.proxy.http2.fields import Headers, local_response, response_headers
from ingress.proxy.http2.goaway import GoawayTolerant
from ingress.proxy.idle import DeadlineGroup
from ingress.proxy.message import h1
from ingress.proxy.message.chunked import ChunkedFramer
from ingress.proxy.message.compression import ADDED_FIELDS, GzipBody, compressed_block, should_compress
from ingress.proxy.request.exchange import Exchange
from ingress.proxy.request.forwarding import ForwardedFor
from ingress.proxy.request.limits import RequestLimits
from ingress.proxy.request.shared import Shared
from ingress.speedups.nativeprotocol import NativeProtocol


class StreamConnection(NativeProtocol):
    """
    What a stream uses of its HTTP/2 connection: the connection's base class.  A class, not a
    typing protocol, so that in the compiled build a stream reads these attributes and calls these
    methods natively; through a typing protocol each was a Python attribute lookup.
    """

    factory: Shared
    paused: bool  # the client's socket is full: every stream's upstream waits
    limits: RequestLimits  # every stream's on a route without limits of its own
    deadlines: DeadlineGroup  # the streams' deadlines, on the connection's one DelayedCall
    h2: GoawayTolerant

    def flush(self) -> None:
        raise NotImplementedError

    def stream_closed(self, stream: Any) -> None:
        raise NotImplementedError

    def peer(self) -> ForwardedFor:
        raise NotImplementedError

    def local_host(self) -> str:
        raise NotImplementedError

    def local_port(self) -> bytes:
        raise NotImplementedError


class StreamOutput:
    """A stream's response bytes not yet let out by the windows, and how the response ends."""

    __slots__ = ("_connection", "_stream_id", "_out", "size", "end_pending", "ended", "trailers", "on_sent", "decode")

    def __init__(self, connection: StreamConnection, stream_id: int) -> None:
        self._connection = connection
        self._stream_id = stream_id
        self._out: deque[bytes] = deque()
        self.size = 0  # bytes held for the client's window
        self.end_pending = False  # the stream ends once what is held is sent
        self.ended = False  # the stream was ended with the response's HEADERS or its only DATA frame
        self.trailers: Optional[Headers] = None  # sent after the last DATA, ending the stream
        self.on_sent: Optional[Callable[[int], None]] = None  # an HTTP/2 endpoint's exchange hears what left
        self.decode: Optional[ChunkedFramer | GzipBody] = None  # the upstream body's transform: from chunks, or gzip

    def send_head(self, exchange: Exchange, head: h1.Head, body: bytes, complete: bool, added: bytes) -> int:
        """An HTTP/1.1 upstream's final response head as HEADERS, and how many body bytes came with it; a small whole response ends the stream in one DATA frame."""
        request, route = exchange.request, exchange.route
        assert request is not None and route is not None
        settings = exchange.settings
        bodiless = complete and not body
        gzip = settings.gzip
        if gzip is not None and not bodiless and should_compress(
            gzip, request.method, request.version, request.block, head.status, head.block, head.framing.content_length
        ):
            self.decode = GzipBody(gzip.level, head.framing.chunked, chunked=False, length=head.framing.content_length)
            head = replace(head, block=compressed_block(head.block))
            added += ADDED_FIELDS
        elif head.framing.chunked:
            self.decode = ChunkedFramer(decode=True)
        hsts = route.hsts if exchange.shared.scheme == b"https" else ""
        changes = route.policies.response_headers if route.policies is not None else None
        headers = response_headers(head, request, settings.server_name, hsts, added, changes, exchange.forwarded)
        connection = self._connection
        h2 = connection.h2
        h2.send_headers(self._stream_id, headers, end_stream=bodiless)
        sent = 0
        if bodiless:
            self.ended = True  # the exchange's end only finishes the stream
        elif body and complete and self.decode is None and len(body) <= min(h2.local_flow_control_window(self._stream_id), h2.max_outbound_frame_size):
            h2.send_data(self._stream_id, body, end_stream=True)  # the whole small response: one DATA frame that ends the stream
            sent = len(body)
            self.ended = True
        elif body:
            sent = self.add(body)
        connection.flush()
        return sent

    def respond(self, exchange: Exchange, status: int, headers: Headers, trailers: Optional[Headers]) -> bool:
        """An HTTP/2 endpoint's response head as HEADERS: True if it ended the stream (C{trailers}: a trailers-only answer)."""
        if not exchange.responded and exchange.route is not None:
            exchange.shared.metrics.upstream_answered(exchange.route.name, time.monotonic() - exchange.sent_at)
        exchange.responding(status)
        headers = [(b":status", b"%d" % status), *(field for field in headers if field[0] != b":status")]
        connection = self._connection
        if trailers is not None:
            connection.h2.send_headers(self._stream_id, headers + trailers, end_stream=True)
        else:
            connection.h2.send_headers(self._stream_id, headers)
        connection.flush()
        return trailers is not None

    def answer(self, exchange: Exchange, status: int, location: bytes, fields: bytes) -> bool:
        """An answer of the proxy's own: True if its HEADERS ended the stream, else its body is held to be pumped."""
        headers, body = local_response(status, exchange.settings.server_name, location, fields)
        if exchange.request_method == b"HEAD":
            body = b""
        exchange.responding(status)
        connection = self._connection
        connection.h2.send_headers(self._stream_id, headers, end_stream=not body)
        if not body:
            connection.flush()  # answered outside a read too (a guard's verdict)
            return True
        exchange.sent(len(body))
        self.queue(body)
        self.end_pending = True
        return False

    def add(self, data: bytes) -> int:
        """Upstream body bytes, decoded: held for the window; how many (0: nothing came of them)."""
        if self.decode is not None:
            data = self.decoded(data)
            if not data:
                return 0
        self._out.append(data)
        self.size += len(data)
        return len(data)

    def decoded(self, data: bytes) -> bytes:
        framer = self.decode
        assert framer is not None
        framer.feed(data)
        payload = b"".join(framer.payload)
        framer.payload.clear()
        return payload

    def finish_body(self, exchange: Exchange) -> None:
        """The upstream's body is complete: a gzip stream's last bytes, and the stream ends once all is sent."""
        if type(self.decode) is GzipBody:
            tail = self.decode.finish()
            exchange.sent(len(tail))
            self._out.append(tail)
            self.size += len(tail)
        self.end_pending = True

    def pump(self) -> bool:
        """Send what the flow-control windows allow: True once everything, and the stream's end, was sent."""
        connection = self._connection
        h2 = connection.h2
        stream_id = self._stream_id
        out = self._out
        while out:
            room = min(h2.local_flow_control_window(stream_id), h2.max_outbound_frame_size)
            if room <= 0:
                break
            chunk = out[0]
            if len(chunk) <= room:
                out.popleft()
            else:
                out[0] = chunk[room:]
                chunk = chunk[:room]
            self.size -= len(chunk)
            h2.send_data(stream_id, chunk)
            if self.on_sent is not None:
                self.on_sent(len(chunk))
        if not out and self.end_pending:
            if self.trailers is not None:
                h2.send_headers(stream_id, self.trailers, end_stream=True)
            else:
                h2.end_stream(stream_id)
            connection.flush()
            return True
        connection.flush()
        return False

    def queue(self, data: bytes) -> None:
        """Bytes that need no decoding (an HTTP/2 endpoint's DATA, an answer of our own)."""
        self._out.append(data)
        self.size += len(data)
