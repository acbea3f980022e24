# -*- test-case-name: tests.unit.test_sni -*-
"""
Reading the server name from a TLS ClientHello without terminating TLS (RFC 8446 4.1.2, RFC 6066 3).

Used by the TLS front door to decide, before any handshake, whether a
connection is passed through raw to a backend or terminated here.  Only the
first record is read: a ClientHello split across records (rare, and never by
real browsers for SNI) is treated as one without a name.
"""

from __future__ import annotations

from typing import Optional

NEED_MORE = "need-more"
NOT_TLS = "not-tls"
MAX_RECORD = 16384 + 5

_HANDSHAKE = 22
_CLIENT_HELLO = 1
_SERVER_NAME = 0
_ALPN = 16


def client_hello_server_name(data: bytes) -> tuple[str, Optional[str]]:
    """
    ("ok", name or None), (NEED_MORE, None) or (NOT_TLS, None) for the bytes read so far.

    Never raises: malformed extensions read as "no name", so the connection
    falls to termination (and its own handshake error), not to a crash.
    """
    if len(data) < 5:
        return (NEED_MORE, None) if not data or data[0] == _HANDSHAKE else (NOT_TLS, None)
    if data[0] != _HANDSHAKE or data[1] != 3:
        return NOT_TLS, None
    length = int.from_bytes(data[3:5], "big")
    if len(data) < 5 + length:
        return NEED_MORE, None
    record = data[5 : 5 + length]
    try:
        return "ok", _server_name(record)
    except (IndexError, ValueError):
        return "ok", None


def _server_name(record: bytes) -> Optional[str]:
    if not record or record[0] != _CLIENT_HELLO:
        return None
    end = 4 + int.from_bytes(record[1:4], "big")
    if end > len(record):
        return None  # the ClientHello continues in another record
    at = 4 + 2 + 32  # type + length, legacy_version, random
    at += 1 + record[at]  # legacy_session_id
    at += 2 + int.from_bytes(record[at : at + 2], "big")  # cipher_suites
    at += 1 + record[at]  # legacy_compression_methods
    if at + 2 > end:
        return None
    extensions_end = at + 2 + int.from_bytes(record[at : at + 2], "big")
    at += 2
    while at + 4 <= min(extensions_end, end):
        kind = int.from_bytes(record[at : at + 2], "big")
        size = int.from_bytes(record[at + 2 : at + 4], "big")
        body = record[at + 4 : at + 4 + size]
        if kind == _SERVER_NAME:
            return _host_name(body)
        at += 4 + size
    return None


def client_hello_offers(data: bytes, protocol: bytes) -> bool:
    """
    Whether the whole ClientHello in C{data} (its first record) offers C{protocol} by ALPN (RFC 7301 3.1).

    Asked only for a name that has a TLS-ALPN-01 challenge pending (L{ingress.proxy.tls.acme_tls}): the
    servername callback runs before OpenSSL reads the ALPN list, so the choice of certificate is made here.
    Never raises: a malformed list offers nothing.
    """
    if len(data) < 5 or data[0] != _HANDSHAKE:
        return False
    record = data[5 : 5 + int.from_bytes(data[3:5], "big")]
    try:
        body = _extension(record, _ALPN)
        if body is None:
            return False
        at, end = 2, min(2 + int.from_bytes(body[0:2], "big"), len(body))
        while at < end:
            size = body[at]
            if body[at + 1 : at + 1 + size] == protocol:
                return True
            at += 1 + size
    except IndexError:
        pass
    return False


def _extension(record: bytes, wanted: int) -> Optional[bytes]:
    """The body of extension C{wanted} of the ClientHello in C{record}, or None; IndexError when it is cut short."""
    if not record or record[0] != _CLIENT_HELLO:
        return None
    end = min(4 + int.from_bytes(record[1:4], "big"), len(record))
    at = 4 + 2 + 32  # type + length, legacy_version, random
    at += 1 + record[at]  # legacy_session_id
    at += 2 + int.from_bytes(record[at : at + 2], "big")  # cipher_suites
    at += 1 + record[at]  # legacy_compression_methods
    extensions_end = min(at + 2 + int.from_bytes(record[at : at + 2], "big"), end)
    at += 2
    while at + 4 <= extensions_end:
        kind = int.from_bytes(record[at : at + 2], "big")
        size = int.from_bytes(record[at + 2 : at + 4], "big")
        if kind == wanted:
            return record[at + 4 : min(at + 4 + size, extensions_end)]
        at += 4 + size
    return None


def _host_name(body: bytes) -> Optional[str]:
    at, end = 2, 2 + int.from_bytes(body[0:2], "big")
    while at + 3 <= end:
        name_type, size = body[at], int.from_bytes(body[at + 1 : at + 3], "big")
        if name_type == 0:
            name = body[at + 3 : at + 3 + size].decode("ascii")  # ValueError for non-ASCII: "no name"
            return name.lower().rstrip(".")
        at += 3 + size
    return None


def tls_server_name(transport: object) -> Optional[str]:
    """
    The SNI name a terminated TLS connection was opened with (lower-case, no trailing dot), or None:
    a plain transport, or a client that sent none.  Read per request, where a Gateway's HTTPS
    listeners make a request for another listener's host misdirected.
    """
    handle = getattr(transport, "getHandle", None)
    connection = handle() if handle is not None else None
    get_servername = getattr(connection, "get_servername", None)
    raw = get_servername() if get_servername is not None else None
    return raw.decode("ascii", "replace").lower().rstrip(".") if raw else None
