# -*- test-case-name: tests.unit.test_h2_fields -*-
"""
HTTP/2 header lists to and from the HTTP/1.1 heads the rest of the proxy uses.

A request's header list becomes the head an HTTP/1.1 client would have sent
(RFC 9113 8.3.1: C{:authority} is the Host; 8.2.3: the C{cookie} fields are
joined again with "; "), with every check an HTTP/1.1 request passes (field
syntax, Host, field count) and RFC 9113's own (L{ingress.proxy.http2.validate}).
The usual list (its pseudo-header fields first, an C{:authority}, lower-case
names, no field HTTP/2 forbids, no Host field, at most one Content-Length and
one Expect) is checked whole by one regular expression over the head's field
section and becomes the head directly; any other list is checked field by
field and parsed from its HTTP/1.1 text by the same strict parser as an
HTTP/1.1 request, so that what is refused, and how, is decided in one place.
The usual list's regular fields are read once for as long as they are kept
(L{_USUAL_REQUEST_FIELDS}): a client repeats them from request to request.
A request body of unknown length goes upstream chunked.  A response head
becomes a header list through the same filter as for HTTP/1.1 clients
(hop-by-hop fields, Server, the route's header changes), less the fields
HTTP/2 forbids.
"""

from __future__ import annotations

import re
from typing import Final, Optional

from ingress.proxy.http2.validate import check_request
from ingress.proxy.message import h1
from ingress.proxy.message.responses import error_response, fields_response, http_date
from ingress.proxy.request.forwarding import REQUEST_DROPPED, RESPONSE_DROPPED, UNKNOWN_PEER, ForwardedFor, connection_named, response_fields
from ingress.routing.policies.headers import HeaderChanges

Headers = list[tuple[bytes, bytes]]

HTTP2: Final = (2, 0)

# A field section of the usual request: lower-case token names (RFC 9113 8.2.1, RFC 9110 5.1), values
# of visible characters with spaces and tabs only inside (RFC 9113 8.2.1, RFC 9110 5.5).
_USUAL_FIELDS_RE: Final = re.compile(
    rb"(?:[!#$%&'*+.^_`|~0-9a-z-]+: (?:[\x21-\x7e\x80-\xff](?:[\t \x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?\r\n)*"
)
_METHOD_RE: Final = re.compile(h1.TOKEN)
# Methods known to be tokens: a set probe in place of _METHOD_RE for those (a tenth of its cost).
_TOKEN_METHODS: Final = frozenset({b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH"})
_TARGET_RE: Final = re.compile(rb"[\x21-\x7e]+")  # the request line's target (h1)
# Regular fields the usual request has none of (but te: trailers, which every gRPC request has): forbidden
# in HTTP/2 (8.2.2: te only as "trailers"), or consulted by the HTTP/1.1 parser (host: from :authority).
_UNUSUAL: Final = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade", b"te", b"host"})


def request_head(headers: Headers, has_body: bool, max_fields: int) -> h1.Head:
    """
    The head of an HTTP/2 request, as L{h1.parse_request_head} parses an HTTP/1.1 one (with
    version 2.0).  Raises L{ingress.proxy.http2.validate.MalformedHeaders} for a list RFC 9113
    calls malformed (the connection's error), L{h1.HTTPError} with the status to answer for a
    request HTTP/1.1 would refuse too.
    """
    head = _usual_request_head(headers, has_body, max_fields)
    if head is None:
        check_request(headers)
        head = _parsed_request_head(headers, has_body, max_fields)
    return head


def _usual_request_head(headers: Headers, has_body: bool, max_fields: int) -> Optional[h1.Head]:
    """
    The head of a request whose list is the usual kind (the module docstring), made without
    parsing text; None for any other list, which L{request_head} checks field by field.
    """
    pseudo = _usual_pseudo_fields(headers)
    if pseudo is None:
        return None
    method, path, authority, first = pseudo
    key = _fields_key(headers, first, has_body)
    fields = _USUAL_REQUEST_FIELDS.get(key)
    if fields is None:
        fields = _usual_regular_fields(headers, first, has_body)
        if fields is None:
            return None
        h1.keep_by_section(_USUAL_REQUEST_FIELDS, key, fields, len(fields[0]))
    section, framing, expects, nothing_to_drop, lines = fields
    if lines > max_fields:  # (the Host line is ours)
        return None
    return h1.Head(  # the host as h1 reads it
        HTTP2, b"host: %s\r\n%s" % (authority, section), h1.NO_TOKENS, framing, method, path, 0, b"", authority.lower(), b"", expects,
        nothing_to_drop=nothing_to_drop,
    )


# The regular fields of a usual request, read: the field section (cookies joined, and the chunked coding a body
# of unknown length goes upstream with), its framing, whether it expects 100-continue, whether it has nothing
# the upstream head drops, and its line count.
_UsualFields = tuple[bytes, h1.Framing, bool, bool, int]
# A client sends the same regular fields on request after request of a connection (HPACK is built on it: a
# browser's user-agent, accept-*, cookie; every field of h2load's requests), and its decoder hands back the same
# bytes objects for the fields it indexed, their hashes kept.  So each list's reading is kept by its fields
# (h1.keep_by_section's bounds, by the section's size), and a list seen before skips the formatting and the
# pattern (14k of an h2 request's 550k instructions, compiled); a list seen once pays its key, a probe and an insert (1k).
_USUAL_REQUEST_FIELDS: Final[dict[tuple[object, ...], _UsualFields]] = {}


def _fields_key(headers: Headers, first: int, has_body: bool) -> tuple[object, ...]:
    """
    The regular fields (from C{first} on) and the body flag as one flat tuple of bytes and a bool: a tuple of
    atomic objects, which the collector stops tracking, and which keeps no header list entry (the decoder's,
    tracked tuples) alive in the memo.
    """
    key: list[object] = [has_body]
    for index in range(first, len(headers)):
        name, value = headers[index]
        key.append(name)
        key.append(value)
    return tuple(key)


def _usual_regular_fields(headers: Headers, first: int, has_body: bool) -> Optional[_UsualFields]:
    """The usual request's regular fields (from C{first} on) read, or None if they are not the usual kind."""
    lines: list[bytes] = []
    cookies: list[bytes] = []
    length: Optional[bytes] = None
    expect: Optional[bytes] = None
    nothing_to_drop = True
    for index in range(first, len(headers)):
        name, value = headers[index]
        if name == b"cookie":
            cookies.append(value)
            continue
        if name in _UNUSUAL:  # (a pseudo-header field after a regular one fails _USUAL_FIELDS_RE: no name starts with a colon)
            if name != b"te" or value.lower() != b"trailers":  # gRPC's (8.2.2)
                return None
            nothing_to_drop = False  # te is hop-by-hop
        elif name in REQUEST_DROPPED:  # a forwarding field of the client's (the lower-case names are checked below)
            nothing_to_drop = False
        elif name == b"content-length":
            if length is not None:
                return None
            length = value
        elif name == b"expect":
            if expect is not None:
                return None
            expect = value
        lines.append(b"%s: %s\r\n" % (name, value))
    section = b"".join(lines)
    checked = section
    if cookies:
        checked += b"".join([b"cookie: %s\r\n" % cookie for cookie in cookies])  # each checked alone, then joined
        section += b"cookie: %s\r\n" % b"; ".join(cookies)
    if _USUAL_FIELDS_RE.fullmatch(checked) is None or checked.count(b"\n") != len(lines) + len(cookies):
        return None  # a bad name or value, or a line break inside a value
    if length is None:
        framing = h1.CHUNKED if has_body else h1.NO_BODY
        if has_body:
            section += b"transfer-encoding: chunked\r\n"
    elif length.isdigit() and len(length) < 19:
        framing = h1.length_framing(length)
    else:
        return None
    expects = expect is not None and expect.lower() == b"100-continue"
    return section, framing, expects, nothing_to_drop, section.count(b"\n")


def _usual_pseudo_fields(headers: Headers) -> Optional[tuple[bytes, bytes, bytes, int]]:
    """
    The usual request's :method, :path and :authority, and where its regular fields start: each of
    the four pseudo-header fields once (8.3.1), and values the request line and Host take as they are.
    """
    method = scheme = path = authority = b""
    first = 0
    for name, value in headers:
        if name[:1] != b":":
            break
        if not value:
            return None  # none of the four is usual empty; and a second of a name is told from the first by the first's value
        if name == b":method" and not method:
            method = value
        elif name == b":path" and not path:
            path = value
        elif name == b":authority" and not authority:
            authority = value
        elif name == b":scheme" and not scheme:
            scheme = value
        else:
            return None  # repeated, or not a request's (8.3)
        first += 1
    if scheme not in (b"https", b"http") or method == b"CONNECT" or (method not in _TOKEN_METHODS and _METHOD_RE.fullmatch(method) is None):
        return None
    if _TARGET_RE.fullmatch(path) is None or h1.COMMA in authority or not authority or not h1.valid_host(authority):
        return None
    return method, path, authority, first


def _parsed_request_head(headers: Headers, has_body: bool, max_fields: int) -> h1.Head:
    """A request's head made as HTTP/1.1 text and parsed as such: every unusual list's way (L{request_head})."""
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
    """
    The header list of an upstream's HTTP/1.1 response: its fields as an HTTP/1.1 client gets them
    (L{ingress.proxy.request.forwarding.response_head_bytes}: the same fields, added lines, Date,
    Server and HSTS, in the same order), less those HTTP/2 forbids.
    """
    headers = [(b":status", b"%d" % response.status)]
    if changes is None:  # the usual response: the fields HTTP/1.1 drops go in the same pass as those HTTP/2 forbids
        named = connection_named(response.connection)  # usually none: "keep-alive" or "close" names no field
        if named:
            _add_lines(response.block, headers, _RESPONSE_DROPPED | named)
        else:
            headers.extend(_usual_response_fields(response.block))
    else:
        block, added = response_fields(response, request, added, changes, forwarded)
        _add_lines(block, headers)
    if added:
        _add_lines(added, headers)
    if not response.has_date:
        headers.append((b"date", http_date()))
    headers.append((b"server", server))
    if hsts:
        headers.append((b"strict-transport-security", hsts.encode("ascii")))
    return headers


_NOT_IN_HTTP2: Final = frozenset({b"connection", b"transfer-encoding", b"keep-alive", b"upgrade", b"proxy-connection"})


# An upstream's response fields that an HTTP/2 client never gets: HTTP/1.1's (hop-by-hop, Server) and HTTP/2's own.
_RESPONSE_DROPPED: Final = RESPONSE_DROPPED | _NOT_IN_HTTP2


# The usual response's fields as an HTTP/2 client gets them, by the upstream's field section: a backend sends the same
# section again and again (h1's remembered sections, whose probe has already hashed these bytes); kept as those are.
_USUAL_RESPONSE_FIELDS: Final[dict[bytes, tuple[tuple[bytes, bytes], ...]]] = {}  # tuples of bytes: the collector stops tracking them


def _usual_response_fields(block: bytes) -> tuple[tuple[bytes, bytes], ...]:
    """An upstream's unfiltered field section as header list entries (L{_add_lines} less L{_RESPONSE_DROPPED})."""
    fields = _USUAL_RESPONSE_FIELDS.get(block)
    if fields is None:
        lines: Headers = []
        _add_lines(block, lines, _RESPONSE_DROPPED)
        fields = tuple(lines)
        h1.keep_by_section(_USUAL_RESPONSE_FIELDS, block, fields, len(block))
    return fields


def _add_lines(block: bytes, headers: Headers, dropped: frozenset[bytes] = _NOT_IN_HTTP2) -> None:
    """
    A field section's fields onto a header list: names in lower case, those HTTP/2 forbids left out (and
    any other of C{dropped}: a superset of those, when the section comes unfiltered from the upstream).
    """
    for line in block.split(b"\r\n")[:-1]:
        name, _, value = line.partition(b":")
        lower = name.lower()
        if lower not in dropped:
            headers.append((lower, value.strip(b" \t")))


def local_response(status: int, server: bytes, location: bytes = b"", fields: bytes = b"") -> tuple[Headers, bytes]:
    """An answer of the proxy's own (404, 503, a redirect, a CORS preflight...): the same fields and body as for HTTP/1.1."""
    extra = ((b"Location", location),) if location else ()
    raw = fields_response(status, server, False, fields) if fields else error_response(status, server, False, extra)
    end = raw.index(b"\r\n\r\n")
    block = raw[raw.index(b"\r\n") + 2 : end + 2]
    headers = [(b":status", b"%d" % status)]
    headers.extend((lower, value) for _, lower, value in h1.split_fields(block))
    return headers, raw[end + 4 :]


_NOT_TO_HTTP2_UPSTREAM: Final = frozenset({b"host", b"transfer-encoding", b"connection", b"keep-alive", b"upgrade", b"proxy-connection", b"te"})


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
