# -*- test-case-name: tests.unit.test_h2_fields -*-
"""
HTTP/2 header lists to and from the HTTP/1.1 heads the rest of the proxy uses.

A request's header list becomes the head an HTTP/1.1 client would have sent
(RFC 9113 8.3.1: C{:authority} is the Host; 8.2.3: the C{cookie} fields are
joined again with "; "), parsed by the same strict parser, so every check an
HTTP/1.1 request passes (field syntax, Host, field count) holds for HTTP/2
too.  A request body of unknown length goes upstream chunked.  A response
head becomes a header list through the same filter as for HTTP/1.1 clients
(hop-by-hop fields, Server, the route's header changes), less the fields
HTTP/2 forbids.
"""

from __future__ import annotations

from typing import Optional

from ingress.proxy.http import h1
from ingress.proxy.http.forwarding import UNKNOWN_PEER, ForwardedFor, response_head_bytes
from ingress.proxy.http.responses import error_response, fields_response
from ingress.routing.policies.headers import HeaderChanges

Headers = list[tuple[bytes, bytes]]

HTTP2 = (2, 0)


def request_head(headers: Headers, has_body: bool, max_fields: int) -> h1.Head:
    """
    The head of an HTTP/2 request, as L{h1.parse_request_head} parses an HTTP/1.1 one
    (with version 2.0); raises L{h1.HTTPError} with the status to answer.
    """
    method = path = authority = b""
    lines: list[bytes] = []
    cookies: list[bytes] = []
    host = b""
    length = False
    for name, value in headers:
        if name[:1] == b":":
            if name == b":method":
                method = value
            elif name == b":path":
                path = value
            elif name == b":authority":
                authority = value
        elif name == b"cookie":
            cookies.append(value)
        elif name == b"host":
            host = value
        else:
            if name == b"content-length":
                length = True
            lines.append(b"%s: %s\r\n" % (name, value))
    if method == b"CONNECT":
        raise h1.HTTPError(405, "CONNECT is not proxied")
    if not path:
        raise h1.HTTPError(400, "no :path")
    if cookies:
        lines.append(b"cookie: %s\r\n" % b"; ".join(cookies))
    if has_body and not length:
        lines.append(b"transfer-encoding: chunked\r\n")
    block = b"%s %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (method, path, authority or host, b"".join(lines))
    head = h1.parse_request_head(block, max_fields + 1)  # the Host line is ours
    head.version = HTTP2
    return head


def response_headers(
    response: h1.Head,
    request: h1.Head,
    server: bytes,
    hsts: str = "",
    added: bytes = b"",
    changes: Optional[HeaderChanges] = None,
    forwarded: ForwardedFor = UNKNOWN_PEER,
) -> Headers:
    """The header list of an upstream's HTTP/1.1 response, filtered as for an HTTP/1.1 client."""
    raw = response_head_bytes(response, request, server, True, True, hsts, added, changes, forwarded)
    block = raw[raw.index(b"\r\n") + 2 : -2]
    headers = [(b":status", b"%d" % response.status)]
    headers.extend((lower, value) for _, lower, value in h1.split_fields(block) if lower not in _NOT_IN_HTTP2)
    return headers


_NOT_IN_HTTP2 = frozenset({b"connection", b"transfer-encoding", b"keep-alive", b"upgrade", b"proxy-connection"})


def local_response(status: int, server: bytes, location: bytes = b"", fields: bytes = b"") -> tuple[Headers, bytes]:
    """An answer of the proxy's own (404, 503, a redirect, a CORS preflight...): the same fields and body as for HTTP/1.1."""
    extra = ((b"Location", location),) if location else ()
    raw = fields_response(status, server, False, fields) if fields else error_response(status, server, False, extra)
    end = raw.index(b"\r\n\r\n")
    block = raw[raw.index(b"\r\n") + 2 : end + 2]
    headers = [(b":status", b"%d" % status)]
    headers.extend((lower, value) for _, lower, value in h1.split_fields(block))
    return headers, raw[end + 4 :]


_NOT_TO_HTTP2_UPSTREAM = frozenset({b"host", b"transfer-encoding", b"connection", b"keep-alive", b"upgrade", b"proxy-connection", b"te"})


def upstream_request_headers(head_bytes: bytes, scheme: bytes) -> Headers:
    """
    The header list an HTTP/2 endpoint receives: the HTTP/1.1 head routing made (its rewrite,
    Host, forwarding fields and header changes) in HTTP/2 form, with the Host as C{:authority}.
    """
    line_end = head_bytes.index(b"\r\n")
    method, target, _ = head_bytes[:line_end].split(b" ", 2)
    authority = b""
    fields: Headers = []
    for _, lower, value in h1.split_fields(head_bytes[line_end + 2 : -2]):
        if lower == b"host":
            authority = value
        elif lower not in _NOT_TO_HTTP2_UPSTREAM:
            fields.append((lower, value))
    return [(b":method", method), (b":scheme", scheme), (b":authority", authority), (b":path", target), *fields]
