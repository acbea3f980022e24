# -*- test-case-name: tests.unit.test_forwarding -*-
"""
Rewriting heads as they cross the proxy.

Requests go upstream with their Host unchanged, hop-by-hop fields removed
(with every field named in Connection), and the X-Forwarded-* set replaced by
what this edge proxy saw: an edge has no trusted hop in front of it, so
client-supplied forwarding fields are never passed on.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted.internet.interfaces import ITransport

from ingress.proxy import h1
from ingress.proxy.responses import http_date, reason_phrase

_FORWARDING = frozenset(
    {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port", b"x-real-ip", b"forwarded"}
)
_REQUEST_DROP = h1.HOP_BY_HOP | _FORWARDING
_RESPONSE_DROP = h1.HOP_BY_HOP


@dataclass(frozen=True, slots=True)
class ForwardedFor:
    """What a connection adds to every request it forwards (computed once per connection)."""

    ip: str
    fields: bytes  # X-Forwarded-For, X-Real-IP, X-Forwarded-Proto, X-Forwarded-Port, CRLF-terminated

    @classmethod
    def for_transport(cls, transport: ITransport, scheme: bytes) -> "ForwardedFor":
        peer = transport.getPeer()
        local = transport.getHost()
        ip = getattr(peer, "host", "") or ""
        port = getattr(local, "port", 0) or 0
        raw = ip.encode("latin-1")
        fields = (
            b"X-Forwarded-For: %s\r\nX-Real-IP: %s\r\nX-Forwarded-Proto: %s\r\nX-Forwarded-Port: %d\r\n"
            % (raw, raw, scheme, port)
        )
        return cls(ip, fields)


def request_head_bytes(request: h1.Head, forwarded: ForwardedFor, host: str) -> bytes:
    """The head sent upstream: always HTTP/1.1, persistent unless upgrading."""
    drop = _REQUEST_DROP | request.connection if request.connection else _REQUEST_DROP
    parts = [request.method, b" ", request.target, b" HTTP/1.1\r\n"]
    for name, lower, value in request.fields:
        if lower not in drop:
            parts.append(b"%s: %s\r\n" % (name, value))
    if not request.host:
        parts.append(b"Host: %s\r\n" % host.encode("latin-1"))
    if request.upgrade:
        parts.append(b"Connection: upgrade\r\nUpgrade: %s\r\n" % request.upgrade)
    parts.append(forwarded.fields)
    parts.append(b"X-Forwarded-Host: %s\r\n\r\n" % host.encode("latin-1"))
    return b"".join(parts)


def response_head_bytes(response: h1.Head, request: h1.Head, server: bytes, keep_alive: bool, decode: bool) -> bytes:
    """
    The head sent to the client: the upstream's fields less hop-by-hop ones,
    always with Date and Server, and the Connection field our decision needs.

    With C{decode} (a chunked body for an HTTP/1.0 client) Transfer-Encoding
    goes too and the body ends with the connection.
    """
    drop = _RESPONSE_DROP | response.connection if response.connection else _RESPONSE_DROP
    status = response.status
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, response.reason or reason_phrase(status))]
    has_date = has_server = False
    for name, lower, value in response.fields:
        if lower in drop:
            continue
        if lower == b"date":
            has_date = True
        elif lower == b"server":
            has_server = True
        elif decode and lower == b"transfer-encoding":
            continue
        parts.append(b"%s: %s\r\n" % (name, value))
    if not has_date:
        parts.append(b"Date: %s\r\n" % http_date())
    if not has_server:
        parts.append(b"Server: %s\r\n" % server)
    if status == 101:
        parts.append(b"Connection: upgrade\r\nUpgrade: %s\r\n" % response.upgrade)
    elif status >= 200:
        if not keep_alive:
            parts.append(b"Connection: close\r\n")
        elif request.version < (1, 1):
            parts.append(b"Connection: keep-alive\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
