# -*- test-case-name: tests.proxy.test_http2 -*-
"""
The response half of an HTTP/2 stream: the upstream's answer, sent as its client's window allows.

L{StreamResponse} is the base of L{ingress.proxy.http2.stream.H2Stream}, split off
by what it talks to (as L{UpstreamRelay} is for HTTP/1.1): response heads and
bodies from an HTTP/1.1 upstream, or frames from an HTTP/2 endpoint's exchange
(L{ingress.proxy.http2.exchange}), go out as HEADERS, DATA and trailers no
faster than the client's flow-control window lets them.  A stream holding more
than L{HIGH_WATER} bytes its client has made no room for pauses its own upstream
connection's reads, and no other stream's.  The annotations below are the state
the stream half sets, and the stubs are its methods this half calls.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from h2.errors import ErrorCodes

from ingress.proxy.http import h1
from ingress.proxy.http.chunked import ChunkedFramer
from ingress.proxy.http.compression import ADDED_FIELDS, GzipBody, compressed_block, should_compress
from ingress.proxy.http.relay import UpstreamRelay
from ingress.proxy.http.states import CLOSED
from ingress.proxy.http2.fields import Headers, response_headers

if TYPE_CHECKING:
    from ingress.proxy.http2.connection import H2ServerProtocol

HIGH_WATER = 1 << 16  # response bytes a stream holds for a client that gives no window, before its upstream is paused


class StreamResponse(UpstreamRelay):
    """Sending one stream's response: headers, DATA under flow control, the end (or trailers)."""

    connection: H2ServerProtocol
    stream_id: int
    _response_fields: bytes
    _out: deque[bytes]
    _out_size: int
    _end_pending: bool
    _ended_with_headers: bool
    _trailers: Optional[Headers]
    _on_sent: Optional[Callable[[int], None]]

    def _finish(self, status: int) -> None: ...

    def _reset(self, code: ErrorCodes) -> None: ...

    def upstream_head(self, head: h1.Head, body: bytes, complete: bool) -> None:
        request, route = self._request, self._route
        assert request is not None and route is not None
        if head.status < 200 and head.status != 101:
            return  # interim responses are not passed on
        if head.status == 101:
            self._fail_upstream(502, "101 for an HTTP/2 request")
            return
        if not self._accept_response(head):
            return
        policies = route.policies
        bodiless = complete and not body
        added = self._added_fields(head.status)
        gzip = self.settings.gzip
        if gzip is not None and not bodiless and should_compress(
            gzip, request.method, request.version, request.block, head.status, head.block, head.framing.content_length
        ):
            self._decode = GzipBody(gzip.level, head.framing.chunked, chunked=False, length=head.framing.content_length)
            head = replace(head, block=compressed_block(head.block))
            added += ADDED_FIELDS
        elif head.framing.chunked:
            self._decode = ChunkedFramer(decode=True)
        hsts = route.hsts if self.factory.scheme == b"https" else ""
        changes = policies.response_headers if policies is not None else None
        headers = response_headers(head, request, self.settings.server_name, hsts, added, changes, self._forwarded)
        h2 = self.connection.h2
        h2.send_headers(self.stream_id, headers, end_stream=bodiless)
        if bodiless:
            self._ended_with_headers = True  # the exchange's end only finishes the stream
        elif body and complete and self._decode is None and len(body) <= min(h2.local_flow_control_window(self.stream_id), h2.max_outbound_frame_size):
            h2.send_data(self.stream_id, body, end_stream=True)  # the whole small response: one DATA frame that ends the stream
            self._body_sent = len(body)
            self._ended_with_headers = True
        elif body:
            self.upstream_data(body)
        self.connection.flush()

    def upstream_data(self, data: bytes) -> None:
        if self._decode is not None:
            data = self._decoded(data)
        if not data:
            return
        self._body_sent += len(data)
        self._out.append(data)
        self._out_size += len(data)
        self._touch_timer()
        self.pump()

    def upstream_tunnel_data(self, data: bytes) -> None:
        self._fail_upstream(502, "tunnel data for an HTTP/2 request")

    def upstream_done(self) -> None:
        self._release_upstream()
        self._timer.cancel()
        if type(self._decode) is GzipBody:
            tail = self._decode.finish()
            self._body_sent += len(tail)
            self._out.append(tail)
            self._out_size += len(tail)
        if self._ended_with_headers:
            self._finish(self._status)
            return
        self._end_pending = True
        self.pump()

    def pump(self) -> None:
        """Send what the flow-control windows allow; end the stream once everything is sent."""
        if self._state == CLOSED:
            return
        h2 = self.connection.h2
        stream_id = self.stream_id
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
            self._out_size -= len(chunk)
            h2.send_data(stream_id, chunk)
            if self._on_sent is not None:
                self._on_sent(len(chunk))
        if not out and self._end_pending:
            if self._trailers is not None:
                h2.send_headers(stream_id, self._trailers, end_stream=True)
            else:
                h2.end_stream(stream_id)
            self.connection.flush()
            self._finish(self._status)
            return
        self.connection.flush()
        self.update_client_full()

    # -- what an HTTP/2 endpoint's exchange (L{H2Exchange}) asks of its client stream --

    @property
    def responded(self) -> bool:
        return self._responded

    def started_upstream(self) -> None:
        self._sent_at = time.monotonic()
        self._attempts += 1

    def respond(self, status: int, headers: Headers, trailers: Optional[Headers] = None) -> None:
        """The response head (C{trailers}: a trailers-only answer, the stream ends with them)."""
        if self._state == CLOSED:
            return
        if not self._responded and self._route is not None:
            self.factory.metrics.upstream_answered(self._route.name, time.monotonic() - self._sent_at)
        self._responded = True
        self._status = status
        headers = [(b":status", b"%d" % status), *(field for field in headers if field[0] != b":status")]
        h2 = self.connection.h2
        if trailers is not None:
            h2.send_headers(self.stream_id, headers + trailers, end_stream=True)
            self.connection.flush()
            self._finish(status)
            return
        h2.send_headers(self.stream_id, headers)
        self.connection.flush()

    def queue(self, data: bytes, on_sent: Callable[[int], None]) -> None:
        """Response DATA; C{on_sent} hears how much the client's window let out."""
        if self._state == CLOSED:
            return
        self._on_sent = on_sent
        self._body_sent += len(data)
        self._out.append(data)
        self._out_size += len(data)
        self.pump()

    def end_with(self, trailers: Optional[Headers]) -> None:
        """The response is complete: after its DATA, end the stream (with C{trailers}, if any)."""
        if self._state == CLOSED or self._end_pending:
            return
        self._trailers = trailers
        self._end_pending = True
        self.pump()

    def answer(self, status: int) -> None:
        self._answer_locally(status)

    def reset_client(self, code: ErrorCodes) -> None:
        if self._state != CLOSED:
            self._request_done(self._status or 502)
        self._reset(code)

    def update_client_full(self) -> None:
        """Pause this stream's upstream while the client holds it back (its window, or the connection's socket)."""
        full = self._out_size > HIGH_WATER or self.connection.paused
        if full == self._client_full:
            return
        self._client_full = full
        upstream = self._upstream
        if upstream is not None:
            if full:
                upstream.transport.pauseProducing()
            else:
                upstream.transport.resumeProducing()
