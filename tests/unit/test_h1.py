"""
Tests for L{ingress.proxy.message.h1}: strict HTTP/1.1 framing (RFC 9110, RFC 9112).

Table-driven: every case is a message as bytes and what the parser must make
of it, a L{h1.Head} (fields, framing, persistence) or an L{h1.HTTPError} with
the status the client is told.  No reactor, no sockets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.proxy.message import h1, headend
from ingress.proxy.message.chunked import ChunkedFramer, RequestBody
from ingress.proxy.message.h1 import Framing, HTTPError


def head(*lines: bytes) -> bytes:
    """A head: the lines joined by CRLF and ended by the blank line."""
    return b"".join(line + b"\r\n" for line in lines) + b"\r\n"


def request(*fields: bytes, line: bytes = b"GET / HTTP/1.1", host: Optional[bytes] = b"Host: example.test") -> bytes:
    """A request head with a Host field first (unless C{host} is None) and then C{fields}."""
    return head(line, *(([host] if host is not None else []) + list(fields)))


def response(*fields: bytes, line: bytes = b"HTTP/1.1 200 OK") -> bytes:
    return head(line, *fields)


# -- find_head_end


@pytest.mark.parametrize(
    "buffer, start, expected",
    [
        (b"", 0, -1),
        (b"GET / HTTP/1.1\r\nHost: a\r\n", 0, -1),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r", 0, -1),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, 27),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody", 0, 27),
        (bytearray(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"), 0, 18),
        (b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", 18, 36),
        (b"GET / HTTP/1.1\n\n", 0, -1),
    ],
    ids=["empty", "no-blank-line", "half-blank-line", "complete", "body-follows", "bytearray-first-of-two", "from-start", "bare-lf-never-ends"],
)
def test_find_head_end(buffer: bytes, start: int, expected: int) -> None:
    assert headend.find_head_end(buffer, start) == expected


# -- parse_request_head: valid heads


def test_fields_keep_received_names_beside_lower_cased_names_and_stripped_values() -> None:
    parsed = h1.parse_request_head(
        request(b"X-Custom-Thing:   some value \t", b"ACCEPT:text/html", b"x-empty:", b"X-Inner: a  b\tc")
    )
    assert parsed.fields == [
        (b"Host", b"host", b"example.test"),
        (b"X-Custom-Thing", b"x-custom-thing", b"some value"),
        (b"ACCEPT", b"accept", b"text/html"),
        (b"x-empty", b"x-empty", b""),
        (b"X-Inner", b"x-inner", b"a  b\tc"),
    ]
    assert parsed.method == b"GET" and parsed.target == b"/" and parsed.version == (1, 1)
    assert parsed.host == b"example.test"


def test_obs_text_in_a_value_is_kept() -> None:
    parsed = h1.parse_request_head(request(b"X-Name: caf\xc3\xa9 \xff"))
    assert parsed.fields[-1] == (b"X-Name", b"x-name", b"caf\xc3\xa9 \xff")


@pytest.mark.parametrize(
    "block, method, target, version",
    [
        (request(line=b"GET /a/b?c=d&e HTTP/1.1"), b"GET", b"/a/b?c=d&e", (1, 1)),
        (request(line=b"POST /submit HTTP/1.0", host=None), b"POST", b"/submit", (1, 0)),
        (request(line=b"GET http://example.test/x?y=1 HTTP/1.1"), b"GET", b"http://example.test/x?y=1", (1, 1)),
        (request(line=b"GET HTTPS://Example.Test:8443 HTTP/1.1"), b"GET", b"HTTPS://Example.Test:8443", (1, 1)),
        (request(line=b"OPTIONS * HTTP/1.1"), b"OPTIONS", b"*", (1, 1)),
        (request(line=b"CONNECT example.test:443 HTTP/1.1"), b"CONNECT", b"example.test:443", (1, 1)),
        (request(line=b"M-SEARCH /x HTTP/1.1"), b"M-SEARCH", b"/x", (1, 1)),
        (request(line=b"get /lower-case-method HTTP/1.1"), b"get", b"/lower-case-method", (1, 1)),
    ],
    ids=["origin-form-query", "http-1.0-no-host", "absolute-form", "absolute-form-https-port", "asterisk-form", "authority-form", "extension-method", "method-case-kept"],
)
def test_request_line(block: bytes, method: bytes, target: bytes, version: tuple[int, int]) -> None:
    parsed = h1.parse_request_head(block)
    assert (parsed.method, parsed.target, parsed.version) == (method, target, version)


@pytest.mark.parametrize(
    "line, fields, connection, keep_alive",
    [
        (b"GET / HTTP/1.1", [], frozenset(), True),
        (b"GET / HTTP/1.1", [b"Connection: close"], {b"close"}, False),
        (b"GET / HTTP/1.1", [b"Connection: Keep-Alive, CLOSE"], {b"keep-alive", b"close"}, False),
        (b"GET / HTTP/1.0", [], frozenset(), False),
        (b"GET / HTTP/1.0", [b"Connection: keep-alive"], {b"keep-alive"}, True),
        (b"GET / HTTP/1.0", [b"Connection: Keep-Alive"], {b"keep-alive"}, True),
        (b"GET / HTTP/1.1", [b"Connection: x-a,  , x-b", b"Connection: X-C"], {b"x-a", b"x-b", b"x-c"}, True),
        (b"GET / HTTP/1.1", [b"Connection: upgrade", b"Upgrade: websocket"], {b"upgrade"}, True),
    ],
    ids=["1.1-default", "1.1-close", "close-wins", "1.0-default", "1.0-keep-alive", "1.0-keep-alive-any-case", "tokens-of-every-field", "upgrade-token"],
)
def test_connection_tokens_and_persistence(line: bytes, fields: list[bytes], connection: Any, keep_alive: bool) -> None:
    parsed = h1.parse_request_head(request(*fields, line=line))
    assert parsed.connection == frozenset(connection)
    assert parsed.keep_alive is keep_alive


@pytest.mark.parametrize(
    "fields, upgrade",
    [
        ([b"Connection: Upgrade", b"Upgrade: websocket"], b"websocket"),
        ([b"Connection: keep-alive, upgrade", b"Upgrade: h2c, websocket"], b"h2c, websocket"),
        ([b"Upgrade: websocket"], b""),  # not named in Connection: not a request to upgrade
        ([b"Connection: upgrade"], b""),
    ],
    ids=["websocket", "several-protocols", "without-connection-token", "token-without-field"],
)
def test_upgrade(fields: list[bytes], upgrade: bytes) -> None:
    assert h1.parse_request_head(request(*fields)).upgrade == upgrade


@pytest.mark.parametrize(
    "line, fields, expected",
    [
        (b"POST / HTTP/1.1", [b"Expect: 100-continue", b"Content-Length: 3"], True),
        (b"POST / HTTP/1.1", [b"Expect: 100-Continue", b"Content-Length: 3"], True),
        (b"POST / HTTP/1.0", [b"Expect: 100-continue", b"Content-Length: 3"], False),
        (b"POST / HTTP/1.1", [b"Expect: something-else"], False),
        (b"POST / HTTP/1.1", [b"Content-Length: 3"], False),
    ],
    ids=["1.1", "any-case", "1.0-ignores-it", "other-expectation", "absent"],
)
def test_expect_continue(line: bytes, fields: list[bytes], expected: bool) -> None:
    assert h1.parse_request_head(request(*fields, line=line)).expect_continue is expected


@pytest.mark.parametrize(
    "fields, framing, has_body",
    [
        ([], Framing(content_length=0), False),
        ([b"Content-Length: 0"], Framing(content_length=0), False),
        ([b"Content-Length: 42"], Framing(content_length=42), True),
        ([b"Content-Length: 007"], Framing(content_length=7), True),
        ([b"Content-Length: 5", b"Content-Length: 5"], Framing(content_length=5), True),
        ([b"Content-Length: 5, 5"], Framing(content_length=5), True),
        ([b"Content-Length: 999999999999999999"], Framing(content_length=999999999999999999), True),
        ([b"Transfer-Encoding: chunked"], Framing(chunked=True), True),
        ([b"Transfer-Encoding: Chunked"], Framing(chunked=True), True),
        ([b"Transfer-Encoding: gzip, chunked"], Framing(chunked=True), True),
        ([b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked"], Framing(chunked=True), True),
    ],
    ids=["none", "zero", "length", "leading-zeros", "same-length-twice", "same-length-listed", "18-digits", "chunked", "chunked-any-case", "gzip-then-chunked", "codings-over-two-fields"],
)
def test_request_framing(fields: list[bytes], framing: Framing, has_body: bool) -> None:
    parsed = h1.parse_request_head(request(*fields, line=b"POST / HTTP/1.1"))
    assert parsed.framing == framing
    assert parsed.framing.has_body is has_body


def test_pipelined_heads_parse_one_at_a_time() -> None:
    first = request(line=b"GET /1 HTTP/1.1")
    second = request(b"Connection: close", line=b"GET /2 HTTP/1.1")
    buffer = first + second
    end = headend.find_head_end(buffer)
    assert end == len(first)
    assert h1.parse_request_head(buffer[:end]).target == b"/1"
    parsed = h1.parse_request_head(buffer[end : headend.find_head_end(buffer, end)])
    assert parsed.target == b"/2" and not parsed.keep_alive


@pytest.mark.parametrize("count, max_fields", [(100, 100), (1, 1), (0, 0)], ids=["100-of-100", "1-of-1", "host-less-1.0"])
def test_field_count_up_to_the_limit_is_accepted(count: int, max_fields: int) -> None:
    fields = [b"X-F%d: v" % i for i in range(count)]
    parsed = h1.parse_request_head(head(b"GET / HTTP/1.0", *fields), max_fields=max_fields)
    assert len(parsed.fields) == count


# -- parse_request_head: rejections


REJECTED_REQUESTS = [
    # framing (request smuggling)
    ("cl-and-te", request(b"Content-Length: 5", b"Transfer-Encoding: chunked"), 400),
    ("te-and-cl", request(b"Transfer-Encoding: chunked", b"Content-Length: 0"), 400),
    ("two-different-lengths", request(b"Content-Length: 5", b"Content-Length: 6"), 400),
    ("different-lengths-listed", request(b"Content-Length: 5, 6"), 400),
    ("non-numeric-length", request(b"Content-Length: abc"), 400),
    ("negative-length", request(b"Content-Length: -1"), 400),
    ("signed-length", request(b"Content-Length: +5"), 400),
    ("hex-length", request(b"Content-Length: 0x10"), 400),
    ("empty-length", request(b"Content-Length:"), 400),
    ("length-with-inner-space", request(b"Content-Length: 1 2"), 400),
    ("19-digit-length", request(b"Content-Length: 1234567890123456789"), 400),
    ("te-not-ending-in-chunked", request(b"Transfer-Encoding: chunked, gzip"), 400),
    ("te-gzip-only", request(b"Transfer-Encoding: gzip"), 400),
    ("te-chunked-twice", request(b"Transfer-Encoding: chunked, chunked"), 400),
    ("te-chunked-twice-over-fields", request(b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"), 400),
    ("te-xchunked", request(b"Transfer-Encoding: xchunked"), 400),
    ("te-unknown-coding", request(b"Transfer-Encoding: foo, chunked"), 501),
    # field syntax
    ("obs-fold-sp", request(b"X-A: one", b" two"), 400),
    ("obs-fold-ht", request(b"X-A: one", b"\ttwo"), 400),
    ("obs-fold-te", request(b"Transfer-Encoding:", b" chunked"), 400),
    ("space-before-colon", request(b"Content-Length : 5"), 400),
    ("tab-before-colon", request(b"X-A\t: b"), 400),
    ("no-colon", request(b"X-A b"), 400),
    ("empty-name", request(b": b"), 400),
    ("non-token-name", request(b"X@A: b"), 400),
    ("leading-space-first-field", head(b"GET / HTTP/1.1", b" Host: a"), 400),
    ("bare-lf-in-fields", request(b"X-A: b\nX-B: c"), 400),
    ("bare-lf-ending-request-line", b"GET / HTTP/1.1\nHost: a\r\n\r\n", 400),
    ("bare-cr-in-value", request(b"X-A: b\rc"), 400),
    ("bare-cr-ending-field", request(b"X-A: b\r", b"X-B: c"), 400),
    ("nul-in-value", request(b"X-A: b\x00c"), 400),
    ("nul-in-name", request(b"X\x00A: b"), 400),
    ("control-char-in-value", request(b"X-A: b\x01c"), 400),
    ("escape-in-value", request(b"X-A: \x1b[31m"), 400),
    ("del-in-value", request(b"X-A: b\x7fc"), 400),
    ("vt-in-value", request(b"X-A: b\x0bc"), 400),
    ("lf-crlf-fields", b"GET / HTTP/1.1\r\nHost: a\n\r\n", 400),
    # request line
    ("invalid-method-char", request(line=b"G(T / HTTP/1.1"), 400),
    ("method-with-slash", request(line=b"GE/T / HTTP/1.1"), 400),
    ("empty-method", request(line=b" / HTTP/1.1"), 400),
    ("two-spaces", request(line=b"GET  / HTTP/1.1"), 400),
    ("tab-separator", request(line=b"GET\t/ HTTP/1.1"), 400),
    ("space-in-target", request(line=b"GET /a b HTTP/1.1"), 400),
    ("ctl-in-target", request(line=b"GET /a\x01b HTTP/1.1"), 400),
    ("non-ascii-target", request(line=b"GET /caf\xc3\xa9 HTTP/1.1"), 400),
    ("no-version", request(line=b"GET /"), 400),
    ("lower-case-version", request(line=b"GET / http/1.1"), 400),
    ("trailing-space", request(line=b"GET / HTTP/1.1 "), 400),
    ("two-digit-version", request(line=b"GET / HTTP/1.10"), 400),
    ("binary-garbage", head(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), 400),
    ("http-2.0", request(line=b"GET / HTTP/2.0"), 505),
    ("http-3.0", request(line=b"GET / HTTP/3.0"), 505),
    ("http-0.9", request(line=b"GET / HTTP/0.9"), 505),
    # Host
    ("missing-host-1.1", request(host=None), 400),
    ("two-hosts", request(b"Host: other.test"), 400),
    ("two-equal-hosts", request(b"Host: example.test"), 400),
    ("two-hosts-first-empty", request(b"Host: other.test", host=b"Host:"), 400),
    ("two-hosts-1.0", request(b"Host: other.test", line=b"GET / HTTP/1.0"), 400),
    ("host-list", request(host=b"Host: a.test, b.test"), 400),
]


@pytest.mark.parametrize("block, status", [(b, s) for _, b, s in REJECTED_REQUESTS], ids=[i for i, _, _ in REJECTED_REQUESTS])
def test_rejected_request_heads(block: bytes, status: int) -> None:
    with pytest.raises(HTTPError) as caught:
        h1.parse_request_head(block)
    assert caught.value.status == status
    assert caught.value.detail  # something for the log


@pytest.mark.parametrize(
    "host",
    [
        b"Host: exa mple.test",
        b"Host: example.test/path",
        b"Host: user@example.test",
        b"Host: example.test:80@evil.test",
        b"Host: example.test?x",
        b"Host: example.test#x",
        b"Host: example.test:http",
        b"Host: example.test:80:81",
    ],
    ids=["space", "slash", "userinfo", "userinfo-after-port", "query", "fragment", "port-not-numeric", "two-ports"],
)
def test_invalid_host_value_is_400(host: bytes) -> None:
    """RFC 9110 7.2: a server MUST answer 400 to a Host field with an invalid value (uri-host [":" port])."""
    with pytest.raises(HTTPError) as caught:
        h1.parse_request_head(request(host=host))
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "host", [b"Host: example.test", b"Host: EXAMPLE.test:8080", b"Host: 127.0.0.1:80", b"Host: [::1]:8443", b"Host: xn--caf-dma.test."],
    ids=["name", "name-port", "ipv4-port", "ipv6-port", "idn-trailing-dot"],
)
def test_valid_host_values(host: bytes) -> None:
    # Host is case-insensitive (RFC 9110 4.2.3): the parsed value is lower-cased, the forwarded field is not touched.
    assert h1.parse_request_head(request(host=host)).host == host.split(b": ", 1)[1].lower()


@pytest.mark.parametrize(
    "fields",
    [[b"Transfer-Encoding: chunked"], [b"Transfer-Encoding: chunked", b"Connection: keep-alive"]],
    ids=["plain", "asks-keep-alive"],
)
def test_transfer_encoding_in_http_1_0_is_faulty_framing(fields: list[bytes]) -> None:
    """
    RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding MUST be treated as
    having faulty framing and the connection closed after it: refused, or at
    least never kept alive.
    """
    try:
        parsed = h1.parse_request_head(request(*fields, line=b"POST / HTTP/1.0", host=None))
    except HTTPError as error:
        assert error.status == 400
    else:
        assert not parsed.keep_alive


@pytest.mark.parametrize("count, max_fields", [(101, 100), (2, 1), (1000, 100)], ids=["101-of-100", "2-of-1", "1000-of-100"])
def test_too_many_fields_is_431(count: int, max_fields: int) -> None:
    fields = [b"X-F%d: v" % i for i in range(count - 1)]
    with pytest.raises(HTTPError) as caught:
        h1.parse_request_head(request(*fields), max_fields=max_fields)
    assert caught.value.status == 431


# -- check_incomplete_head


@pytest.mark.parametrize(
    "buffer, max_line, max_head",
    [
        (b"", 100, 200),
        (b"GE", 100, 200),
        (b"GET / HTTP/1.1\r", 100, 200),  # the LF may be in the next read
        (b"GET / HTTP/1.1\r\nHost: a\r\n", 100, 200),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r", 100, 200),
        (b"G" * 100, 100, 200),  # exactly the longest line, CRLF not yet seen
        (b"G" * 100 + b"\r\n", 100, 200),
        (b"GET / HTTP/1.1\r\n" + b"X" * 184, 100, 200),  # exactly the largest head
    ],
    ids=["empty", "partial-method", "cr-at-end", "fields", "half-blank-line", "line-at-limit", "line-at-limit-ended", "head-at-limit"],
)
def test_incomplete_head_still_acceptable(buffer: bytes, max_line: int, max_head: int) -> None:
    assert len(buffer) <= max_head
    headend.check_incomplete_head(buffer, max_line, max_head)  # does not raise


@pytest.mark.parametrize(
    "buffer, max_line, max_head, status",
    [
        (b"GET / HTTP/1.1\nHost: a", 100, 200, 400),
        (b"GET / HTTP/1.1\n", 100, 200, 400),
        (b"GET / HTTP/1.1\r\nHost: a\n", 100, 200, 400),
        (b"GET / HTTP/1.1\rHost: a", 100, 200, 400),
        (b"GET / HTTP/1.1\r\r", 100, 200, 400),
        (b"G" * 101, 100, 200, 414),
        (b"GET /" + b"a" * 96 + b" HTTP/1.1\r\nHost: a", 100, 200, 414),
        (b"GET /" + b"a" * 20000, 8192, 32768, 414),
        (b"GET / HTTP/1.1\r\n" + b"X" * 185, 100, 200, 431),
        (b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 5000, 8192, 32768, 431),
    ],
    ids=["bare-lf", "bare-lf-at-end", "bare-lf-in-field", "bare-cr", "cr-cr", "line-over-limit", "ended-line-over-limit", "20k-target", "head-over-limit", "many-fields-over-limit"],
)
def test_incomplete_head_refused_early(buffer: bytes, max_line: int, max_head: int, status: int) -> None:
    with pytest.raises(HTTPError) as caught:
        headend.check_incomplete_head(buffer, max_line, max_head)
    assert caught.value.status == status


# -- parse_response_head


@pytest.mark.parametrize(
    "block, method, status, reason, framing",
    [
        (response(b"Content-Length: 10"), b"GET", 200, b"OK", Framing(content_length=10)),
        (response(b"Transfer-Encoding: chunked"), b"GET", 200, b"OK", Framing(chunked=True)),
        (response(), b"GET", 200, b"OK", Framing(until_close=True)),
        (response(b"Transfer-Encoding: gzip"), b"GET", 200, b"OK", Framing(until_close=True)),
        (response(b"Transfer-Encoding: chunked, gzip"), b"GET", 200, b"OK", Framing(until_close=True)),
        (response(b"Content-Length: 10"), b"HEAD", 200, b"OK", Framing(content_length=0)),
        (response(b"Transfer-Encoding: chunked"), b"HEAD", 200, b"OK", Framing(content_length=0)),
        (response(), b"HEAD", 200, b"OK", Framing(content_length=0)),
        (response(line=b"HTTP/1.1 100 Continue"), b"POST", 100, b"Continue", Framing(content_length=0)),
        (response(b"Connection: upgrade", b"Upgrade: websocket", line=b"HTTP/1.1 101 Switching Protocols"), b"GET", 101, b"Switching Protocols", Framing(content_length=0)),
        (response(line=b"HTTP/1.1 103 Early Hints"), b"GET", 103, b"Early Hints", Framing(content_length=0)),
        (response(line=b"HTTP/1.1 204 No Content"), b"DELETE", 204, b"No Content", Framing(content_length=0)),
        (response(b"Content-Length: 10", line=b"HTTP/1.1 304 Not Modified"), b"GET", 304, b"Not Modified", Framing(content_length=0)),
        (response(line=b"HTTP/1.1 200 Connection established"), b"CONNECT", 200, b"Connection established", Framing(until_close=True)),
        (response(b"Content-Length: 0", line=b"HTTP/1.1 404 Not Found"), b"GET", 404, b"Not Found", Framing(content_length=0)),
        (response(b"Content-Length: 7", b"Content-Length: 7", line=b"HTTP/1.0 500 Oops"), b"POST", 500, b"Oops", Framing(content_length=7)),
        (response(b"Content-Length: 3", line=b"HTTP/1.1 200 "), b"GET", 200, b"", Framing(content_length=3)),
        (response(b"Content-Length: 3", line=b"HTTP/1.1 200"), b"GET", 200, b"", Framing(content_length=3)),
        (response(b"Content-Length: 3", line=b"HTTP/1.1 299 Odd\tbut fine \xe9"), b"GET", 299, b"Odd\tbut fine \xe9", Framing(content_length=3)),
    ],
    ids=[
        "length", "chunked", "close-delimited", "te-not-chunked-close-delimited", "te-chunked-not-last-close-delimited",
        "head-with-length", "head-with-chunked", "head-without-framing", "100", "101", "103", "204", "304",
        "connect-200-tunnel", "404-empty", "1.0-same-length-twice", "empty-reason", "no-reason", "reason-obs-text",
    ],
)
def test_response_framing(block: bytes, method: bytes, status: int, reason: bytes, framing: Framing) -> None:
    parsed = h1.parse_response_head(block, method)
    assert (parsed.status, parsed.reason, parsed.framing) == (status, reason, framing)


def test_response_fields_connection_and_upgrade() -> None:
    parsed = h1.parse_response_head(
        response(b"Connection: Upgrade", b"Upgrade: websocket", b"Sec-WebSocket-Accept:  abc= ", line=b"HTTP/1.1 101 Switching Protocols"),
        b"GET",
    )
    assert parsed.connection == frozenset({b"upgrade"})
    assert parsed.upgrade == b"websocket"
    assert parsed.fields[-1] == (b"Sec-WebSocket-Accept", b"sec-websocket-accept", b"abc=")
    assert parsed.version == (1, 1) and parsed.keep_alive


@pytest.mark.parametrize(
    "line, keep_alive",
    [(b"HTTP/1.1 200 OK", True), (b"HTTP/1.0 200 OK", False)],
    ids=["1.1", "1.0"],
)
def test_response_persistence_by_version(line: bytes, keep_alive: bool) -> None:
    assert h1.parse_response_head(response(b"Content-Length: 0", line=line), b"GET").keep_alive is keep_alive


REJECTED_RESPONSES = [
    ("not-http", response(line=b"HTTX/1.1 200 OK")),
    ("two-digit-status", response(line=b"HTTP/1.1 20 OK")),
    ("four-digit-status", response(line=b"HTTP/1.1 2000 OK")),
    ("http-2", response(line=b"HTTP/2.0 200 OK")),
    ("ctl-in-reason", response(line=b"HTTP/1.1 200 O\x00K")),
    ("cl-and-te", response(b"Content-Length: 3", b"Transfer-Encoding: chunked")),
    ("different-lengths", response(b"Content-Length: 3", b"Content-Length: 4")),
    ("bad-length", response(b"Content-Length: three")),
    ("obs-fold", response(b"X-A: b", b" c")),
    ("space-before-colon", response(b"Content-Length : 3")),
    ("nul-in-value", response(b"X-A: \x00")),
    ("bare-lf", response(b"X-A: b\nX-B: c")),
]


@pytest.mark.parametrize("block", [b for _, b in REJECTED_RESPONSES], ids=[i for i, _ in REJECTED_RESPONSES])
def test_rejected_response_heads_are_502(block: bytes) -> None:
    with pytest.raises(HTTPError) as caught:
        h1.parse_response_head(block, b"GET")
    assert caught.value.status == 502


def test_too_many_response_fields_is_502() -> None:
    block = response(*[b"X-F%d: v" % i for i in range(11)])
    assert len(h1.parse_response_head(block, b"GET", max_fields=11).fields) == 11
    with pytest.raises(HTTPError) as caught:
        h1.parse_response_head(block, b"GET", max_fields=10)
    assert caught.value.status == 502


def test_a_repeated_response_section_reads_the_same_for_each_request_method() -> None:
    """The remembered reading of a section is the one before the method and status: a HEAD's answer keeps its own framing."""
    block = response(b"Content-Length: 10", b"Connection: close", b"X-Repeat: 1")
    first, head, again = (h1.parse_response_head(block, method) for method in (b"GET", b"HEAD", b"GET"))
    assert first == again and first.framing == Framing(content_length=10) and first.connection == frozenset({b"close"})
    assert head.framing == Framing(content_length=0) and head.block == first.block


def test_a_refused_response_section_is_refused_each_time() -> None:
    block = response(b"Content-Length: 3", b"Content-Length: 4", b"X-Repeat: 2")
    for _ in range(2):
        with pytest.raises(HTTPError, match="conflicting Content-Length"):
            h1.parse_response_head(block, b"GET")


def test_remembered_response_sections_stay_bounded() -> None:
    """At most 512 sections of up to 1 KiB each are kept, whatever a backend sends."""
    for index in range(1100):
        h1.parse_response_head(response(b"Content-Length: 0", b"X-Id: %d" % index), b"GET")
    assert 0 < len(h1._RESPONSE_SECTIONS) <= 512
    large = response(b"Content-Length: 0", b"X-Large: " + b"v" * 1100)
    assert h1.parse_response_head(large, b"GET").framing == Framing(content_length=0)
    assert large[large.find(b"\r\n") + 2 : -2] not in h1._RESPONSE_SECTIONS


# -- ChunkedFramer


VALID_CHUNKED = [
    ("one-chunk", b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
    ("two-chunks", b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world"),
    ("empty-body", b"0\r\n\r\n", b""),
    ("upper-hex", b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
    ("lower-hex", b"a\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
    ("leading-zeros", b"0005\r\nhello\r\n000\r\n\r\n", b"hello"),
    ("extension", b"5;name=value\r\nhello\r\n0\r\n\r\n", b"hello"),
    ("extension-no-value", b"5;flag\r\nhello\r\n0;last\r\n\r\n", b"hello"),
    ("extension-quoted", b'5 ; a="x;y \\" z" ;b=c\r\nhello\r\n0\r\n\r\n', b"hello"),
    ("trailer", b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n", b"hello"),
    ("two-trailers", b"5\r\nhello\r\n0\r\nX-A: 1\r\nX-B:  2 \r\n\r\n", b"hello"),
    ("crlf-in-data", b"4\r\n\r\n\r\n\r\n0\r\n\r\n", b"\r\n\r\n"),
    ("binary-data", b"3\r\n\x00\xff\n\r\n0\r\n\r\n", b"\x00\xff\n"),
    ("large-chunk", b"10000\r\n" + b"x" * 0x10000 + b"\r\n0\r\n\r\n", b"x" * 0x10000),
]


@pytest.mark.parametrize("data, payload", [(d, p) for _, d, p in VALID_CHUNKED], ids=[i for i, _, _ in VALID_CHUNKED])
def test_chunked_whole(data: bytes, payload: bytes) -> None:
    framer = ChunkedFramer(decode=True)
    assert framer.feed(data) == len(data)
    assert framer.done
    assert b"".join(framer.payload) == payload
    assert framer.total == len(payload)


@pytest.mark.parametrize(
    "data", [d for i, d, _ in VALID_CHUNKED if i != "large-chunk"], ids=[i for i, _, _ in VALID_CHUNKED if i != "large-chunk"]
)
def test_chunked_one_byte_at_a_time(data: bytes) -> None:
    """Every byte is consumed as it comes; the message ends exactly at its last byte."""
    framer = ChunkedFramer()
    for index in range(len(data)):
        assert not framer.done, f"done before byte {index}"
        assert framer.feed(data[index : index + 1]) == 1, f"byte {index} not consumed"
    assert framer.done
    assert framer.feed(b"G") == 0  # the next message is not ours


@pytest.mark.parametrize(
    "data, payload", [(d, p) for i, d, p in VALID_CHUNKED if i != "large-chunk"], ids=[i for i, _, _ in VALID_CHUNKED if i != "large-chunk"]
)
def test_chunked_split_at_every_boundary(data: bytes, payload: bytes) -> None:
    following = b"GET /next HTTP/1.1\r\n\r\n"
    for split in range(len(data) + 1):
        framer = ChunkedFramer(decode=True)
        first = framer.feed(data[:split])
        assert first == split and framer.done is (split == len(data)), f"split at {split}"
        second = framer.feed(data[split:] + following)
        assert first + second == len(data), f"split at {split}"
        assert framer.done
        assert b"".join(framer.payload) == payload


@pytest.mark.parametrize(
    "message",
    [b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"],
    ids=["empty", "one-chunk", "trailer"],
)
def test_chunked_leaves_pipelined_bytes(message: bytes) -> None:
    following = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
    framer = ChunkedFramer()
    assert framer.feed(message + following) == len(message)
    assert framer.done
    assert framer.feed(following) == 0


def test_request_body_splits_off_what_follows_it() -> None:
    """The HTTP/1.1 connection's body reader: the body's bytes pass on, a pipelined request stays in the buffer."""
    following = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
    body = RequestBody(Framing(content_length=5), limit=10)
    assert body.take(b"hel") == (b"hel", b"") and not body.done
    assert body.take(b"lo" + following) == (b"lo", following) and body.done
    chunked = RequestBody(Framing(chunked=True), limit=10)
    assert chunked.take(b"5\r\nhello\r\n0\r\n\r\n" + following) == (b"5\r\nhello\r\n0\r\n\r\n", following)
    assert chunked.done


def test_request_body_past_its_limit_is_413() -> None:
    """A chunked body (its length unknown until read) is refused once what it declared passes the route's limit."""
    body = RequestBody(Framing(chunked=True), limit=8)
    assert body.take(b"5\r\nhello\r\n") == (b"5\r\nhello\r\n", b"")
    with pytest.raises(HTTPError) as raised:
        body.take(b"4\r\nabcd\r\n")
    assert (raised.value.status, raised.value.detail) == (413, "request body too large")


def test_request_body_framing_errors_pass_through() -> None:
    with pytest.raises(HTTPError) as raised:
        RequestBody(Framing(chunked=True), limit=100).take(b"zz\r\n")
    assert raised.value.status == 400


def test_chunked_without_decode_collects_nothing_but_counts() -> None:
    framer = ChunkedFramer()
    assert framer.feed(b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n") == 23
    assert framer.payload == [] and framer.total == 8


def test_chunked_is_not_done_until_the_final_crlf() -> None:
    framer = ChunkedFramer()
    assert framer.feed(b"5\r\nhello\r\n0\r\n") == 13
    assert not framer.done
    assert framer.feed(b"X-Trailer: yes\r\n") == 16
    assert not framer.done
    assert framer.feed(b"\r\n") == 2
    assert framer.done


INVALID_CHUNKED = [
    ("invalid-hex", b"zz\r\nhello\r\n0\r\n\r\n"),
    ("hex-prefix", b"0x5\r\nhello\r\n0\r\n\r\n"),
    ("negative", b"-5\r\nhello\r\n0\r\n\r\n"),
    ("empty-size", b"\r\nhello\r\n0\r\n\r\n"),
    ("leading-space", b" 5\r\nhello\r\n0\r\n\r\n"),
    ("17-hex-digits", b"10000000000000000\r\n"),
    ("bad-extension", b"5;=x\r\nhello\r\n0\r\n\r\n"),
    ("unterminated-quote", b'5;a="x\r\nhello\r\n0\r\n\r\n'),
    ("missing-crlf-after-data", b"5\r\nhelloXX\r\n0\r\n\r\n"),
    ("data-longer-than-size", b"3\r\nhello\r\n0\r\n\r\n"),
    ("lf-after-data", b"5\r\nhello\n0\r\n\r\n"),
    ("bare-lf-size-line", b"5\nhello\r\n0\r\n\r\n"),
    ("bare-cr-size-line", b"5\r\r\nhello\r\n0\r\n\r\n"),
    ("bare-lf-last-chunk", b"5\r\nhello\r\n0\n\n"),
    ("malformed-trailer", b"5\r\nhello\r\n0\r\nnot a field\r\n\r\n"),
    ("trailer-obs-fold", b"5\r\nhello\r\n0\r\nX-A: b\r\n c\r\n\r\n"),
    ("trailer-nul", b"5\r\nhello\r\n0\r\nX-A: \x00\r\n\r\n"),
    ("oversized-size-line", b"5;" + b"a" * 5000 + b"\r\nhello\r\n0\r\n\r\n"),
    ("oversized-unterminated-size-line", b"5" + b"0" * 5000),
    ("oversized-trailer-line", b"0\r\nX-A: " + b"b" * 5000 + b"\r\n\r\n"),
]


@pytest.mark.parametrize("data", [d for _, d in INVALID_CHUNKED], ids=[i for i, _ in INVALID_CHUNKED])
def test_chunked_invalid_whole(data: bytes) -> None:
    with pytest.raises(HTTPError) as caught:
        ChunkedFramer().feed(data)
    assert caught.value.status == 400


@pytest.mark.parametrize("data", [d for _, d in INVALID_CHUNKED], ids=[i for i, _ in INVALID_CHUNKED])
def test_chunked_invalid_byte_at_a_time(data: bytes) -> None:
    framer = ChunkedFramer()
    with pytest.raises(HTTPError) as caught:
        for index in range(len(data)):
            framer.feed(data[index : index + 1])
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "max_line, line, ok",
    [(20, b"5;" + b"a" * 16 + b"\r\n", True), (20, b"5;" + b"a" * 17 + b"\r\n", False)],
    ids=["at-limit", "one-over"],
)
def test_chunk_line_limit_counts_the_crlf(max_line: int, line: bytes, ok: bool) -> None:
    assert len(line) == max_line + (0 if ok else 1)
    data = line + b"hello\r\n0\r\n\r\n"
    framer = ChunkedFramer(max_line=max_line)
    if ok:
        assert framer.feed(data) == len(data) and framer.done
    else:
        with pytest.raises(HTTPError):
            framer.feed(data)


# -- the framing's common-case path answers as the general one ------------------------------

_FRAMING_NAMES = [b"content-length", b"transfer-encoding", b"connection", b"host", b"upgrade", b"expect", b"date", b"server"]
_FRAMING_VALUES = [b"", b"0", b"12", b"012", b"1,1", b"1, 2", b"-1", b"1e3", b"9" * 19, b"chunked", b"gzip, chunked", b"chunked, gzip", b"identity",
                   b"keep-alive", b"close", b"Upgrade", b"a.test", b"100-continue", b"x y"]


@settings(deadline=None)  # no wall-clock limit per example: CI's parallel lanes decide that, not the code
@given(st.lists(st.tuples(st.sampled_from(_FRAMING_NAMES), st.sampled_from(_FRAMING_VALUES)), max_size=6), st.booleans())
def test_the_common_case_path_answers_as_the_general_one(fields: list[tuple[bytes, bytes]], is_request: bool) -> None:
    """L{h1._framing}'s dict-based path and L{h1._framing_of_any}: the same framing and fields, or the same refusal."""

    def outcome(parse: Callable[[list[tuple[bytes, bytes]], bool], tuple[h1.Framing, dict[bytes, bytes]]]) -> object:
        try:
            return parse(list(fields), is_request)
        except h1.HTTPError as error:
            return (error.status, error.detail)

    assert outcome(h1._framing) == outcome(h1._framing_of_any)


def test_consulted_values_come_without_surrounding_whitespace() -> None:
    """RFC 9112 5: optional whitespace before and after a field value is not part of it."""
    head = h1.parse_request_head(b"POST / HTTP/1.1\r\nHost:  a.test \t\r\nContent-Length:\t5  \r\nConnection: \r\n\r\n")
    assert head.host == b"a.test" and head.framing.content_length == 5 and head.connection == frozenset()


def test_heads_written_out_init_takes_every_field_as_replace_needs() -> None:
    """Head's __init__ is written by hand (compiled, h1.Head): it must keep taking each field by name."""
    values: dict[str, Any] = {
        "version": (1, 0), "block": b"a: b\r\n", "connection": frozenset({b"close"}), "framing": h1.length_framing(b"3"), "method": b"PUT",
        "target": b"/t", "status": 201, "reason": b"Made", "host": b"h.test", "upgrade": b"ws", "expect_continue": True, "has_date": True,
        "request_id": b"id", "nothing_to_drop": True,
    }
    assert set(values) == {f.name for f in dataclasses.fields(h1.Head)}
    head = h1.Head(**values)
    assert {name: getattr(head, name) for name in values} == values
    assert dataclasses.replace(head, status=500).status == 500 and dataclasses.replace(head) == head
