# -*- test-case-name: tests.unit.test_h2_validate -*-
"""
RFC 9113's rules for received header lists (a client's requests, an endpoint's responses, either's
trailers), checked in one pass per list.

The C{h2} library can check them itself (C{validate_inbound_headers}), through
seven chained generators that also walk every byte of every name and value in
a Python loop: 10% of the HTTP/2 bench's samples.  Here each name and value
costs one C-level regular-expression match, and the connection turns these
checks' refusal into the same connection error C{h2}'s would have been
(GOAWAY PROTOCOL_ERROR, L{ingress.proxy.http2.connection}).

A request's list then becomes an HTTP/1.1 head with every check an HTTP/1.1
request passes (L{ingress.proxy.http2.fields}), so what is checked here is what
HTTP/2 adds, or what would change meaning in that head: a CR or LF inside a
value, a colon or space inside a name.  The usual request's list is checked
there at once, by one expression over its field section; every other list
comes here, so that a refusal says which rule it broke.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

_NAME_RE: Final = re.compile(rb"[!-9;-@\[-~]+")  # 8.2.1: not 0x00-0x20, A-Z, 0x7f-0xff, nor ":" (empty: refused)
_BAD_VALUE_RE: Final = re.compile(rb"[\x00\n\r]|\A[ \t]|[ \t]\Z")  # 8.2.1: no NUL/LF/CR, no leading or trailing SP/HTAB
_CONNECTION_SPECIFIC: Final = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"})  # 8.2.2
_REQUEST_PSEUDO: Final = frozenset({b":method", b":scheme", b":authority", b":path"})  # 8.3.1 (":protocol" needs a setting we never send)
_RESPONSE_PSEUDO: Final = frozenset({b":status"})  # 8.3.2
_STATUS_RE: Final = re.compile(rb"[0-9]{3}")


class MalformedHeaders(Exception):
    """A header list RFC 9113 calls malformed (8.1.1); the message says which rule."""


def check_request(headers: Iterable[tuple[bytes, bytes]]) -> None:
    """Raise L{MalformedHeaders} unless C{headers} is a well-formed request header list (RFC 9113 8.2, 8.3)."""
    pseudo, hosts = _fields(headers, _REQUEST_PSEUDO, "request")
    if len(hosts) > 1:
        raise MalformedHeaders("several host fields")
    _check_request_pseudo(pseudo, hosts[0] if hosts else None)


def check_response(headers: Iterable[tuple[bytes, bytes]]) -> None:
    """Raise L{MalformedHeaders} unless C{headers} is a well-formed response header list (RFC 9113 8.2, 8.3.2)."""
    status = _fields(headers, _RESPONSE_PSEUDO, "response")[0].get(b":status")
    if status is None or _STATUS_RE.fullmatch(status) is None:
        raise MalformedHeaders("no (or an invalid) :status")  # 8.3.2


def _fields(headers: Iterable[tuple[bytes, bytes]], allowed: frozenset[bytes], whose: str) -> tuple[dict[bytes, bytes], list[bytes]]:
    """
    Check every field (8.2.1, 8.2.2) and the pseudo-header fields' place, names and count (8.3):
    the pseudo-header fields, and the values of the host fields.
    """
    pseudo: dict[bytes, bytes] = {}
    hosts: list[bytes] = []
    regular = False
    for name, value in headers:
        if value and _BAD_VALUE_RE.search(value) is not None:
            raise MalformedHeaders(f"invalid value of {name!r}")
        if name[:1] == b":":
            if regular:
                raise MalformedHeaders(f"pseudo-header field {name!r} after a regular field")  # 8.3
            if name not in allowed:
                raise MalformedHeaders(f"pseudo-header field {name!r} is not a {whose}'s")  # 8.3
            if name in pseudo:
                raise MalformedHeaders(f"pseudo-header field {name!r} repeated")  # 8.3.1, 8.3.2
            pseudo[name] = value
            continue
        regular = True
        _check_regular(name, value)
        if name == b"host":
            hosts.append(value)
    return pseudo, hosts


def check_trailers(headers: Iterable[tuple[bytes, bytes]]) -> None:
    """Raise L{MalformedHeaders} unless C{headers} is a well-formed trailer section (RFC 9113 8.1, 8.2)."""
    for name, value in headers:
        if value and _BAD_VALUE_RE.search(value) is not None:
            raise MalformedHeaders(f"invalid value of trailer {name!r}")
        if name[:1] == b":":
            raise MalformedHeaders(f"pseudo-header field {name!r} in trailers")  # 8.1
        _check_regular(name, value)


def _check_regular(name: bytes, value: bytes) -> None:
    if _NAME_RE.fullmatch(name) is None:
        raise MalformedHeaders(f"invalid field name {name!r}")  # 8.2.1 (upper case, a colon, a space, empty...)
    if name in _CONNECTION_SPECIFIC:
        raise MalformedHeaders(f"connection-specific field {name!r}")  # 8.2.2
    if name == b"te" and value.lower() != b"trailers":
        raise MalformedHeaders("te other than trailers")  # 8.2.2


def _check_request_pseudo(pseudo: dict[bytes, bytes], host: bytes | None) -> None:
    """8.3.1: :method always; :scheme and a non-empty :path unless CONNECT (which has neither); a target host."""
    method = pseudo.get(b":method")
    if method is None:
        raise MalformedHeaders("no :method")
    if method == b"CONNECT":
        if b":scheme" in pseudo or b":path" in pseudo:
            raise MalformedHeaders("CONNECT with :scheme or :path")  # 8.5
    elif b":scheme" not in pseudo or not pseudo.get(b":path"):
        raise MalformedHeaders("no :scheme or no (or an empty) :path")
    authority = pseudo.get(b":authority")
    if authority is None and host is None:
        raise MalformedHeaders("neither :authority nor host")
    if authority is not None and host is not None and authority != host:
        raise MalformedHeaders(":authority and host differ")  # 8.3.1
