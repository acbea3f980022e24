# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
How an HTTP/1.1 connection frames a response for its client: the upstream's head as this
proxy sends it on, the transform its body needs (chunks decoded for an HTTP/1.0 client, or
gzip), and this proxy's own answers.  Functions of their arguments, so that the connection
(L{ingress.proxy.http1.server}) keeps only what a connection does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final, Optional, Union

from ingress.proxy.message import h1
from ingress.proxy.message.chunked import ChunkedFramer
from ingress.proxy.message.compression import ADDED_FIELDS, GzipBody, compressed_block, should_compress
from ingress.proxy.message.responses import error_response, fields_response
from ingress.proxy.request.exchange import Exchange
from ingress.proxy.request.forwarding import response_head_bytes
from ingress.proxy.request.settings import ProxySettings
from ingress.routing.compression import Gzip

Transform = Union[ChunkedFramer, GzipBody]
_CHUNKED: Final = b"Transfer-Encoding: chunked\r\n"


def keeps_alive(request: h1.Head, requests: int, draining: bool, settings: ProxySettings) -> bool:
    """Whether the connection may serve another request after this one (C{requests}: this one's number)."""
    if not request.keep_alive or draining or settings.keepalive_timeout <= 0:
        return False
    return not settings.keepalive_requests or requests < settings.keepalive_requests  # nginx's keepalive_requests


def body_transform(request: h1.Head, head: h1.Head, gzip: Optional[Gzip]) -> Optional[Transform]:
    """A chunked body for an HTTP/1.0 client is decoded (it cannot read chunks); else gzip where it applies."""
    if head.framing.chunked and request.version < (1, 1):
        return ChunkedFramer(decode=True)
    if gzip is not None and should_compress(gzip, request.method, request.version, request.block, head.status, head.block, head.framing.content_length):
        return GzipBody(gzip.level, head.framing.chunked, length=head.framing.content_length)
    return None


def final_head(exchange: Exchange, head: h1.Head, keep_alive: bool, transform: Optional[Transform], added: bytes, https: bool) -> bytes:
    """The upstream's final response head as the client gets it (the route's fields and changes applied)."""
    request, route = exchange.request, exchange.route
    assert request is not None and route is not None
    if type(transform) is GzipBody:
        head = replace(head, block=compressed_block(head.block))
        added += ADDED_FIELDS + _CHUNKED
    changes = route.policies.response_headers if route.policies is not None else None
    hsts = route.hsts if https else ""
    server = exchange.settings.server_name
    return response_head_bytes(head, request, server, keep_alive, transform is not None, hsts, added, changes, exchange.forwarded)


def transformed(transform: Transform, data: bytes) -> bytes:
    transform.feed(data)
    payload = b"".join(transform.payload)
    transform.payload.clear()
    return payload


def local_answer(status: int, server: bytes, close: bool, location: bytes, fields: bytes) -> bytes:
    """An answer of this proxy's own: a short page (with a Location), or a policy's fields without a body."""
    if fields:
        return fields_response(status, server, close, fields)
    return error_response(status, server, close, ((b"Location", location),) if location else ())


def body_length(response: bytes) -> int:
    """The body's length in a whole response of our own (for the access log)."""
    return len(response) - response.find(b"\r\n\r\n") - 4
