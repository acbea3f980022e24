# -*- test-case-name: tests.unit.test_h1 -*-
"""
Strict HTTP/1.1 message framing (RFC 9112): heads and body lengths (chunked framing: L{ingress.proxy.message.chunked}).

Only what a proxy needs is parsed: the request or status line, the header
fields (validated as a whole block by one regular expression, then split), and
the body framing.  Bodies are never decoded into memory:
L{ingress.proxy.message.chunked.ChunkedFramer} walks chunked framing and hands
the raw bytes back so they can be passed on unchanged.

Why not httptools or h11: httptools' response parser cannot be told that a
response answers a HEAD request (it only skips bodies for upgrades), and its
callbacks do not expose how many bytes a head consumed, which exact
header-size limits and pipelining need; h11 costs several times more per
request than this module in CPython.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Optional, TypeVar

CRLF: Final = b"\r\n"
# Single bytes to look for with "in" as integers: CPython 3.11 takes a bytes needle for an integer
# first, raising and clearing a TypeError (about 400 instructions) before it searches at all.
COMMA: Final = 0x2C  # ","
COLON: Final = 0x3A  # ":"
HASH: Final = 0x23  # "#"
CR: Final = 0x0D
AT: Final = 0x40  # "@"

TOKEN: Final = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_FIELD_LINE: Final = rb"%s:[\t \x21-\x7e\x80-\xff]*" % TOKEN  # value: VCHAR, obs-text, SP, HTAB
# A whole field section: zero or more field lines, each followed by CRLF.
FIELDS_RE: Final = re.compile(rb"(?:%s\r\n)*" % _FIELD_LINE)
_REQUEST_LINE_RE: Final = re.compile(rb"(%s) ([\x21-\x7e]+) HTTP/([0-9])\.([0-9])" % TOKEN)
_STATUS_LINE_RE: Final = re.compile(rb"HTTP/([0-9])\.([0-9]) ([0-9]{3})(?: ([\t \x21-\x7e\x80-\xff]*))?")
# The fields a proxy consults, found in the lower-cased section (values come back lower-cased:
# every one of them is case-insensitive or only tested for presence).
# Values come without the optional whitespace around them (RFC 9112 5: OWS is not part of the value).
_INTERESTING_RE: Final = re.compile(
    rb"\n(content-length|transfer-encoding|connection|host|upgrade|expect|date|server):[ \t]*((?:[^\r]*[^\r \t])?)"
)
_DIGITS_RE: Final = re.compile(rb"[0-9]{1,18}")
# RFC 9110 7.2 / RFC 3986: uri-host [ ":" port ]; IP literals in brackets.
_HOST_RE: Final = re.compile(rb"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?")

# Hop-by-hop fields (RFC 9110 7.6.1 and the classic list): never forwarded.
HOP_BY_HOP: Final = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer", b"upgrade"})


Field = tuple[bytes, bytes, bytes]
"""A header field: (name as received, lower-cased name, value without surrounding whitespace)."""


NO_TOKENS: Final[frozenset[bytes]] = frozenset()


class HTTPError(Exception):
    """A message we refuse: C{status} is what the client is told, C{detail} goes to the log."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Framing:
    """How a message body is delimited; exactly one applies."""

    content_length: Optional[int] = None
    chunked: bool = False
    until_close: bool = False

    @property
    def has_body(self) -> bool:
        return self.chunked or self.until_close or bool(self.content_length)


NO_BODY: Final = Framing(content_length=0)
CHUNKED: Final = Framing(chunked=True)
_UNTIL_CLOSE: Final = Framing(until_close=True)
# Framing is immutable: one per Content-Length value seen, by its digits (a frozen dataclass costs ~1 us
# to make, int() of bytes ~1,300 instructions: a probe ~100).
_LENGTHS: Final[dict[bytes, Framing]] = {}


def length_framing(digits: bytes) -> Framing:
    """The framing of a body whose Content-Length is C{digits} (1 to 18 of them), made once per value (up to 4,096)."""
    framing = _LENGTHS.get(digits)
    if framing is None:
        framing = Framing(content_length=int(digits))
        if len(_LENGTHS) < 4096:
            _LENGTHS[digits] = framing
    return framing


@dataclass(slots=True, init=False)
class Head:
    """
    A parsed request or response head.  C{block} is the field section exactly as received (each line ending in CRLF):
    it is forwarded by filtering lines out of it, never rebuilt field by field.  The few fields a proxy consults are
    pulled out at parse time; C{connection} holds the lower-cased tokens of every Connection field.
    """

    version: tuple[int, int]
    block: bytes
    connection: frozenset[bytes]
    framing: Framing
    method: bytes = b""
    target: bytes = b""
    status: int = 0
    reason: bytes = b""
    host: bytes = b""
    upgrade: bytes = b""
    expect_continue: bool = False
    has_date: bool = False
    request_id: bytes = b""  # the X-Request-ID generated here (requestid.tag), b"" when the client sent one or none was made
    # No field of C{block} is one the upstream head drops (forwarding.REQUEST_DROPPED, or one Connection names): set by a
    # reader that looked at every name (HTTP/2's usual list), so that request_head_bytes need not filter the block.
    # A hint, not part of what the head says: equal heads may differ in it.
    nothing_to_drop: bool = field(default=False, compare=False)

    def __init__(
        self, version: tuple[int, int], block: bytes, connection: frozenset[bytes], framing: Framing, method: bytes = b"", target: bytes = b"",
        status: int = 0, reason: bytes = b"", host: bytes = b"", upgrade: bytes = b"", expect_continue: bool = False, has_date: bool = False,
        request_id: bytes = b"", nothing_to_drop: bool = False,
    ) -> None:
        # Written out rather than generated (init=False): the dataclass's own __init__ is made at import time by the
        # dataclasses module, so it stays interpreted in the compiled build (~5,700 instructions a head); this one compiles.
        self.version = version
        self.block = block
        self.connection = connection
        self.framing = framing
        self.method = method
        self.target = target
        self.status = status
        self.reason = reason
        self.host = host
        self.upgrade = upgrade
        self.expect_continue = expect_continue
        self.has_date = has_date
        self.request_id = request_id
        self.nothing_to_drop = nothing_to_drop

    @property
    def keep_alive(self) -> bool:
        """Persistence as RFC 9112 9.3 decides it from the version and Connection."""
        if b"close" in self.connection:
            return False
        if self.version >= (1, 1):
            return True
        return b"keep-alive" in self.connection

    @property
    def fields(self) -> list[Field]:
        """Every field as (name as received, lower-cased name, value): for the slow paths and tests."""
        return split_fields(self.block)


_VALID_HOSTS: Final[set[bytes]] = set()  # the few hosts every request names, probed at a tenth of the pattern's cost (bounded)


def valid_host(host: bytes) -> bool:
    """A Host field value (or an absolute-form authority) as RFC 9110 7.2 allows it: host[:port]."""
    if host in _VALID_HOSTS:
        return True
    if _HOST_RE.fullmatch(host) is None:
        return False
    if len(_VALID_HOSTS) < 1024:
        _VALID_HOSTS.add(host)
    return True


def host_without_port(host: bytes) -> bytes:
    """A Host value without its port (bracketed IPv6 literals kept whole)."""
    if host.startswith(b"["):
        return host[: host.find(b"]") + 1]
    return host.rsplit(b":", 1)[0] if COLON in host else host


def split_fields(block: bytes) -> list[Field]:
    """Split a validated field section into (name, lower-cased name, value) triples."""
    fields = []
    for line in block.split(CRLF)[:-1]:
        name, _, value = line.partition(b":")
        fields.append((name, name.lower(), value.strip(b" \t")))
    return fields


def _check_fields(block: bytes, lines: int, max_fields: int) -> list[tuple[bytes, bytes]]:
    """
    Validate a field section of C{lines} lines and return the fields a proxy consults, as (lower-cased name,
    value): one pattern checks the whole section and another finds those fields, a few C-level scans for a head.
    """
    if FIELDS_RE.fullmatch(block) is None:
        raise HTTPError(400, "malformed header field")
    if lines > max_fields:
        raise HTTPError(431, "too many header fields")
    return _INTERESTING_RE.findall(b"\n" + block.lower())


# A response's field section read: framing (before method and status), Connection tokens, Upgrade, has Date, line count.
ResponseFields = tuple[Framing, frozenset[bytes], bytes, bool, int]
# A backend answers a resource with the same field section, byte for byte, until its Date turns a second: each
# section's reading is kept by its bytes (keep_by_section), so a repeated head skips the two patterns (~19k of its
# parse's ~32k instructions compiled); a section seen once pays a probe and an insert.
_RESPONSE_SECTIONS: Final[dict[bytes, ResponseFields]] = {}
_Kept = TypeVar("_Kept")
_Key = TypeVar("_Key")


def keep_by_section(memo: dict[_Key, _Kept], key: _Key, value: _Kept, size: int) -> None:
    """Keep what a field section gave under C{key}: up to 512 sections of up to 1 KiB (C{size}), cleared when full (a Date's turn leaves none stale)."""
    if size <= 1024:
        if len(memo) >= 512:
            memo.clear()
        memo[key] = value


def _response_fields(section: bytes, max_fields: int) -> ResponseFields:
    """The L{ResponseFields} of a response's field section, checked (L{_check_fields}) when its bytes are new."""
    known = _RESPONSE_SECTIONS.get(section)
    if known is None:
        lines = section.count(b"\n")
        try:
            framing, seen = _framing(_check_fields(section, lines, max_fields), is_request=False)
        except HTTPError as error:
            raise HTTPError(502, f"upstream: {error.detail}") from None
        known = (framing, _connection_tokens(seen), seen.get(b"upgrade", b""), b"date" in seen, lines)
        keep_by_section(_RESPONSE_SECTIONS, section, known, len(section))
    elif known[4] > max_fields:  # kept under a caller's larger limit
        raise HTTPError(502, "upstream: too many header fields")
    return known


def _framing(fields: list[tuple[bytes, bytes]], is_request: bool) -> tuple[Framing, dict[bytes, bytes]]:
    """
    L{_framing_of_any}'s answer, the common case first: each field once, no Transfer-Encoding, at
    most one plain Content-Length (C-level dict work instead of the general loop).
    """
    seen = dict(fields)
    if len(seen) != len(fields) or b"transfer-encoding" in seen:
        return _framing_of_any(fields, is_request)
    length = seen.pop(b"content-length", None)
    if length is None:
        return (NO_BODY if is_request else _UNTIL_CLOSE), seen
    if length.isdigit() and len(length) < 19:
        return length_framing(length), seen
    return _framing_of_any(fields, is_request)


def _framing_of_any(fields: list[tuple[bytes, bytes]], is_request: bool) -> tuple[Framing, dict[bytes, bytes]]:
    """
    Body framing from Transfer-Encoding and Content-Length (RFC 9112 6.3).

    Both present, several different lengths, a non-final or unknown coding:
    all refused, because proxies that disagree on framing are how requests
    get smuggled.  Also returns the other consulted fields, joined by ", "
    when repeated.
    """
    lengths: set[bytes] = set()
    codings: list[bytes] = []
    seen: dict[bytes, bytes] = {}
    for lower, value in fields:
        if value[-1:] in b" \t":
            value = value.rstrip(b" \t")
        if lower == b"content-length":
            if value.isdigit() and len(value) < 19:
                lengths.add(value)
                continue
            for part in value.split(b","):
                part = part.strip(b" \t")
                if _DIGITS_RE.fullmatch(part) is None:
                    raise HTTPError(400, "invalid Content-Length")
                lengths.add(part)
        elif lower == b"transfer-encoding":
            codings.extend(c.strip(b" \t").lower() for c in value.split(b",") if c.strip(b" \t"))
        elif lower in seen:
            seen[lower] = seen[lower] + b", " + value
        else:
            seen[lower] = value
    if codings and lengths:
        raise HTTPError(400, "both Transfer-Encoding and Content-Length")
    if len(lengths) > 1:
        raise HTTPError(400, "conflicting Content-Length values")
    if codings:
        if codings[-1] != b"chunked" or codings.count(b"chunked") != 1:
            if is_request:
                raise HTTPError(400, "Transfer-Encoding without final chunked")
            return _UNTIL_CLOSE, seen
        if any(c not in (b"chunked", b"gzip", b"deflate", b"compress", b"x-gzip") for c in codings):
            raise HTTPError(501, "unknown transfer coding")
        return CHUNKED, seen
    if lengths:
        return length_framing(lengths.pop()), seen
    if is_request:
        return NO_BODY, seen
    return _UNTIL_CLOSE, seen


_TOKEN_SETS: Final[dict[bytes, frozenset[bytes]]] = {}


def _connection_tokens(seen: dict[bytes, bytes]) -> frozenset[bytes]:
    """The Connection tokens; the few distinct values seen in practice are parsed once."""
    value = seen.get(b"connection")
    if not value:
        return NO_TOKENS
    tokens = _TOKEN_SETS.get(value)
    if tokens is None:
        tokens = frozenset(t.strip(b" \t").lower() for t in value.split(b",") if t.strip(b" \t"))
        if len(_TOKEN_SETS) < 256:
            _TOKEN_SETS[value] = tokens
    return tokens


def parse_request_head(block: bytes, max_fields: int = 100) -> Head:
    """
    Parse a request head (request line through the blank line, CRLF-terminated).

    Raises L{HTTPError} with the status to answer.
    """
    line_end = block.find(CRLF)
    match = _REQUEST_LINE_RE.fullmatch(block, 0, line_end)
    if match is None:
        raise HTTPError(400, "malformed request line")
    method, target, major, minor = match.groups()
    if major != b"1":
        raise HTTPError(505, "HTTP version not supported")
    section = block[line_end + 2 : -2]
    framing, seen = _framing(_check_fields(section, section.count(b"\n"), max_fields), is_request=True)
    version = (1, minor[0] - 0x30)  # one digit (the pattern's): int() of bytes costs ~1,300 instructions
    host = seen.get(b"host")
    if version >= (1, 1) and host is None:
        raise HTTPError(400, "missing Host")
    if host is not None and (COMMA in host or not valid_host(host)):
        raise HTTPError(400, "several Host fields" if COMMA in host else "invalid Host")
    if version < (1, 1) and framing.chunked:
        raise HTTPError(400, "Transfer-Encoding in an HTTP/1.0 request")  # RFC 9112 6.1: faulty framing
    connection = _connection_tokens(seen)
    upgrade = seen.get(b"upgrade", b"") if b"upgrade" in connection else b""
    expect = version >= (1, 1) and seen.get(b"expect", b"").lower() == b"100-continue"
    return Head(version, section, connection, framing, method, target, 0, b"", host or b"", upgrade, expect)


def parse_response_head(block: bytes, request_method: bytes, max_fields: int = 200) -> Head:
    """
    Parse a response head; the framing accounts for HEAD, 1xx, 204 and 304 (RFC 9112 6.3).

    Raises L{HTTPError} (the proxy turns it into 502).
    """
    line_end = block.find(CRLF)
    match = _STATUS_LINE_RE.fullmatch(block, 0, line_end)
    if match is None:
        raise HTTPError(502, "malformed status line from upstream")
    major, minor, status_text, reason = match.groups()
    if major != b"1":
        raise HTTPError(502, "unsupported HTTP version from upstream")
    status = status_text[0] * 100 + status_text[1] * 10 + status_text[2] - 0x30 * 111  # three digits, as for the minor version
    section = block[line_end + 2 : -2]
    framing, connection, upgrade, has_date, _ = _response_fields(section, max_fields)
    if request_method == b"HEAD" or status < 200 or status in (204, 304):
        framing = NO_BODY
    elif request_method == b"CONNECT" and 200 <= status < 300:
        framing = _UNTIL_CLOSE
    return Head((1, minor[0] - 0x30), section, connection, framing, status=status, reason=reason or b"", upgrade=upgrade, has_date=has_date)
