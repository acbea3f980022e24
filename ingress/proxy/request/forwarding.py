# -*- test-case-name: tests.proxy.test_request_meaning -*-
"""
Rewriting heads as they cross the proxy.

Requests go upstream with their Host unchanged, hop-by-hop fields removed
(with every field named in Connection), and the X-Forwarded-* set replaced by
what this edge proxy saw: an edge has no trusted hop in front of it, so
client-supplied forwarding fields are never passed on.

Field sections are filtered with one regular-expression substitution over
the raw bytes; only a Connection field naming extra fields takes the slow
path through every line.  A head whose every name was already looked at
(HTTP/2's usual list: L{ingress.proxy.http2.fields}) says whether anything
is to be dropped at all, and is not filtered again when nothing is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Optional

from twisted.internet.interfaces import ITransport

from ingress.proxy.message import h1
from ingress.proxy.message.responses import http_date, reason_phrase
from ingress.proxy.message.target import origin_form
from ingress.proxy.request.variables import field_lines
from ingress.routing.policies.headers import HeaderChanges

_FORWARDING: Final = frozenset(
    {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port", b"x-real-ip", b"forwarded"}
    | {b"x-scheme", b"x-forwarded-scheme"}
)
# Connection tokens that name no field of their own (or one already dropped).
_PLAIN_TOKENS: Final = frozenset({b"close", b"keep-alive", b"upgrade"})


def drop_lines_re(names: frozenset[bytes]) -> re.Pattern[bytes]:
    alternatives = b"|".join(re.escape(n) for n in sorted(names))
    return re.compile(rb"^(?:%s):.*\n" % alternatives, re.MULTILINE | re.IGNORECASE)


# The fields of a request that never go upstream, and of a response that never reach the client.
REQUEST_DROPPED: Final = h1.HOP_BY_HOP | _FORWARDING
# The upstream's Server goes too and ours takes its place, as nginx does by default
# (proxy_hide_header): an edge does not tell the world which software runs behind it.
RESPONSE_DROPPED: Final = h1.HOP_BY_HOP | {b"server"}
_REQUEST_DROP_RE: Final = drop_lines_re(REQUEST_DROPPED)
_RESPONSE_DROP_RE: Final = drop_lines_re(RESPONSE_DROPPED)
_TRANSFER_ENCODING_RE: Final = drop_lines_re(frozenset({b"transfer-encoding"}))
_HOST_RE: Final = drop_lines_re(frozenset({b"host"}))
_PREFIX_RE: Final = drop_lines_re(frozenset({b"x-forwarded-prefix"}))


@dataclass(frozen=True, slots=True)
class ForwardedFor:
    """
    What a connection adds to every request it forwards (computed once per connection, or per
    request from a trusted proxy: L{ingress.proxy.request.trusted}).
    """

    ip: str
    fields: bytes  # X-Forwarded-For, X-Real-IP, X-Forwarded-Proto, X-Forwarded-Port, X-Scheme..., CRLF-terminated
    scheme: bytes = b""  # the client's scheme: the listener's, or a trusted X-Forwarded-Proto
    host: str = ""  # a trusted X-Forwarded-Host, sent on instead of the request's host

    @classmethod
    def for_transport(cls, transport: ITransport, scheme: bytes) -> ForwardedFor:
        peer = transport.getPeer()
        local = transport.getHost()
        ip = getattr(peer, "host", "") or ""
        port = getattr(local, "port", 0) or 0
        raw = ip.encode("latin-1")
        fields = b"X-Forwarded-For: %s\r\nX-Real-IP: %s\r\nX-Forwarded-Proto: %s\r\nX-Forwarded-Port: %d\r\n" % (raw, raw, scheme, port)
        return cls(ip, fields + scheme_fields(scheme), scheme)


def scheme_fields(scheme: bytes) -> bytes:
    """
    X-Forwarded-Scheme and X-Scheme: the client's scheme again, under the names ingress-nginx also sets
    (nginx.tmpl: C{proxy_set_header X-Scheme $pass_access_scheme}); made once per connection.
    """
    return b"X-Forwarded-Scheme: %s\r\nX-Scheme: %s\r\n" % (scheme, scheme)


UNKNOWN_PEER: Final = ForwardedFor("", b"")
"""A connection's forwarding fields before C{connectionMade} tells who the peer is."""


def connection_named(connection: frozenset[bytes]) -> frozenset[bytes]:
    """The fields a head's Connection tokens name (RFC 9110 7.6.1), which go with the hop-by-hop ones."""
    return connection - _PLAIN_TOKENS


def _without_named(block: bytes, connection: frozenset[bytes]) -> bytes:
    """Drop the fields that Connection names (RFC 9110 7.6.1): the rare, line-by-line path."""
    named = connection_named(connection)
    if not named:
        return block
    return b"".join(b"%s: %s\r\n" % (name, value) for name, lower, value in h1.split_fields(block) if lower not in named)


def request_head_bytes(
    request: h1.Head,
    forwarded: ForwardedFor,
    host: str,
    target: Optional[bytes] = None,
    upstream_host: str = "",
    forwarded_prefix: str = "",
    set_headers: Optional[HeaderChanges] = None,
) -> bytes:
    """
    The head sent upstream: always HTTP/1.1, persistent unless upgrading.

    C{host} is the routing host (see L{ingress.proxy.message.target}).  The
    target goes as the client sent it (nginx's C{proxy_pass} without a URI
    does the same: the upstream sees its own spelling of the path), except
    that an absolute-form target goes in origin-form with its authority as
    the Host field, and a fragment is dropped.  A route's policies may give
    another C{target} (a rewrite), another Host (C{upstream_host}; the client's
    stays in X-Forwarded-Host), an X-Forwarded-Prefix (the client's own is dropped then) and
    header fields that replace the client's of the same names.
    """
    if request.nothing_to_drop:  # HTTP/2's usual list: every name was looked at when the head was made
        block = request.block
    else:
        block = _without_named(_REQUEST_DROP_RE.sub(b"", request.block), request.connection)
    tail = b""
    if target is None:
        target = request.target
        if target[:1] != b"/" or h1.HASH in target:  # rare: absolute-form, or a fragment
            if target[:1] != b"/":
                block = _HOST_RE.sub(b"", block)
                tail = b"Host: %s\r\n" % host.encode("latin-1")
            target = origin_form(target)
    elif request.target[:1] != b"/":
        block = _HOST_RE.sub(b"", block)
        tail = b"Host: %s\r\n" % host.encode("latin-1")
    extra = b""
    if set_headers is not None:
        block = set_headers.drop.sub(b"", block)
        extra = set_headers.lines
        if set_headers.templates:
            extra += field_lines(set_headers.templates, request, forwarded.ip, forwarded.scheme)
    if forwarded_prefix:
        block = _PREFIX_RE.sub(b"", block)
        extra += b"X-Forwarded-Prefix: %s\r\n" % forwarded_prefix.encode("latin-1")
    if upstream_host:
        block = _HOST_RE.sub(b"", block)
        tail = b"Host: %s\r\n" % upstream_host.encode("latin-1")
    elif not request.host:
        tail = b"Host: %s\r\n" % host.encode("latin-1")
    if request.upgrade:
        tail += b"Connection: upgrade\r\nUpgrade: %s\r\n" % request.upgrade
    return b"%s %s HTTP/1.1\r\n%s%s%s%sX-Forwarded-Host: %s\r\n\r\n" % (
        request.method,
        target,
        block,
        tail,
        extra,
        forwarded.fields,
        (forwarded.host or host).encode("latin-1"),
    )


def response_fields(
    response: h1.Head, request: h1.Head, added: bytes, set_headers: Optional[HeaderChanges], forwarded: ForwardedFor
) -> tuple[bytes, bytes]:
    """
    The upstream's fields the client gets (hop-by-hop ones and Server dropped, and those a route's
    C{set_headers} replace), and the lines added after them: C{added}, then the route's (their
    variables filled in for C{forwarded}'s client).  For both framings of a response head.
    """
    block = _without_named(_RESPONSE_DROP_RE.sub(b"", response.block), response.connection)
    if set_headers is not None:
        block = set_headers.drop.sub(b"", block)
        added += set_headers.lines
        if set_headers.templates:
            added += field_lines(set_headers.templates, request, forwarded.ip, forwarded.scheme)
    return block, added


def response_head_bytes(
    response: h1.Head,
    request: h1.Head,
    server: bytes,
    keep_alive: bool,
    decode: bool,
    hsts: str = "",
    added: bytes = b"",
    set_headers: Optional[HeaderChanges] = None,
    forwarded: ForwardedFor = UNKNOWN_PEER,
) -> bytes:
    """
    The head sent to the client: the upstream's fields less hop-by-hop ones,
    always with Date and Server, and the Connection field our decision needs.

    With C{decode} (a chunked body for an HTTP/1.0 client) Transfer-Encoding
    goes too and the body ends with the connection.  C{added} are fields a
    route's policies add (CRLF-terminated lines: a sticky cookie), C{set_headers} fields that
    replace the upstream's of the same names (their variables filled in for C{forwarded}'s client).
    """
    block, added = response_fields(response, request, added, set_headers, forwarded)
    if decode:
        block = _TRANSFER_ENCODING_RE.sub(b"", block)
    status = response.status
    extra = added
    if not response.has_date:
        extra += b"Date: %s\r\n" % http_date()
    extra += b"Server: %s\r\n" % server
    if hsts:
        extra += b"Strict-Transport-Security: %s\r\n" % hsts.encode("ascii")
    if status == 101:
        extra += b"Connection: upgrade\r\nUpgrade: %s\r\n" % response.upgrade
    elif status >= 200:
        if not keep_alive:
            extra += b"Connection: close\r\n"
        elif request.version < (1, 1):
            extra += b"Connection: keep-alive\r\n"
    return b"HTTP/1.1 %d %s\r\n%s%s\r\n" % (status, response.reason or reason_phrase(status), block, extra)
