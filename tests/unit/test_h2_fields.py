"""HTTP/2 header lists to and from HTTP/1.1 heads (RFC 9113 8.3.1, 8.2.3), and the reset budget."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.proxy.http2 import fields as h2_fields
from ingress.proxy.http2.fields import _parsed_request_head, _usual_request_head, local_response, request_head, response_headers
from ingress.proxy.http2.goaway import with_goaway_code
from ingress.proxy.http2.resets import ResetBudget
from ingress.proxy.http2.validate import MalformedHeaders, check_request
from ingress.proxy.message import h1
from ingress.proxy.request.forwarding import ForwardedFor, request_head_bytes, response_head_bytes
from ingress.routing.policies.headers import HeaderChanges, header_changes
from ingress.routing.policies.variables import parse_template

BASE = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/a?b=c"), (b":authority", b"example.test")]


def test_authority_is_the_host_and_the_head_says_http2() -> None:
    head = request_head(BASE + [(b"accept", b"*/*")], has_body=False, max_fields=100)
    assert (head.method, head.target, head.host, head.version) == (b"GET", b"/a?b=c", b"example.test", (2, 0))
    assert (b"accept", b"*/*") in [(lower, value) for _, lower, value in head.fields]
    assert not head.framing.has_body
    mixed = request_head([*BASE[:3], (b":authority", b"Example.TEST:8443")], False, 100)
    assert mixed.host == b"example.test:8443" and mixed.block.startswith(b"host: Example.TEST:8443\r\n")  # routed in lower case, sent as sent


def test_a_host_field_without_authority_is_used_and_one_that_differs_from_authority_is_malformed() -> None:
    """RFC 9113 8.3.1: the Host field may stand in for :authority, and must not name another host."""
    without = [field for field in BASE if field[0] != b":authority"] + [(b"host", b"h.test")]
    assert request_head(without, False, 100).host == b"h.test"
    head = request_head(BASE + [(b"host", b"example.test")], False, 100)
    assert head.host == b"example.test" and head.block.count(b"example.test") == 1
    with pytest.raises(MalformedHeaders):
        request_head(BASE + [(b"host", b"other.test")], False, 100)


def test_cookie_fields_are_joined_with_semicolons() -> None:
    """RFC 9113 8.2.3: HTTP/2 may split Cookie; an HTTP/1.1 upstream gets one field."""
    head = request_head(BASE + [(b"cookie", b"a=1"), (b"x", b"y"), (b"cookie", b"b=2")], False, 100)
    assert [value for _, lower, value in head.fields if lower == b"cookie"] == [b"a=1; b=2"]


def test_a_body_of_unknown_length_goes_chunked_and_a_known_one_keeps_its_length() -> None:
    assert request_head(BASE, has_body=True, max_fields=100).framing.chunked
    head = request_head(BASE + [(b"content-length", b"5")], has_body=True, max_fields=100)
    assert head.framing.content_length == 5 and not head.framing.chunked


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([(b":method", b"CONNECT"), (b":authority", b"x:443")], 405),
        (BASE[:3] + [(b":authority", b"bad host")], 400),
        (BASE + [(b"x-bad", b"a\x01b")], 400),  # a control character RFC 9113 lets through, RFC 9110 does not
        (BASE + [(b"content-length", b"abc")], 400),
        (BASE + [(b"content-length", b"5"), (b"content-length", b"6")], 400),
        ([(b":method", b"G ET"), *BASE[1:]], 400),
        ([*BASE[:2], (b":path", b"/a b"), BASE[3]], 400),
    ],
)
def test_what_http1_refuses_http2_refuses_with_the_same_status(headers: list[tuple[bytes, bytes]], status: int) -> None:
    with pytest.raises(h1.HTTPError) as caught:
        request_head(headers, False, 100)
    assert caught.value.status == status


@pytest.mark.parametrize(
    "headers",
    [
        [(b":method", b"GET"), (b":authority", b"x")],  # no :path (8.3.1)
        BASE + [(b"x-bad", b"a\x00b")],  # 8.2.1
        BASE + [(b"x-bad", b"a\r\nx-injected: 1")],  # 8.2.1: a line break would make a field of its own upstream
        BASE + [(b"X-Upper", b"v")],  # 8.2.1
        BASE + [(b"connection", b"close")],  # 8.2.2
        BASE + [(b"te", b"gzip")],  # 8.2.2
        [BASE[0], (b":scheme", b" https"), *BASE[2:]],  # 8.2.1: no whitespace at either end of a value
        [BASE[1], BASE[0], BASE[2], BASE[3], (b"a", b"b"), (b":method", b"GET")],  # a pseudo-header field after a regular one (8.3)
    ],
)
def test_what_rfc_9113_calls_malformed_is_the_connections_error(headers: list[tuple[bytes, bytes]]) -> None:
    with pytest.raises(MalformedHeaders):
        request_head(headers, False, 100)


# Fields of a usual list, and one odd field each: what RFC 9113 or HTTP/1.1 refuses, what the parser
# consults, what only the full way reads (a Host field, te: trailers, a second length).
_USUAL_FIELDS = st.tuples(
    st.sampled_from([b"accept", b"user-agent", b"cookie", b"x-a"]), st.sampled_from([b"v", b"", b"a\tb", b"\x80\xff", b"a=1", b"x" * 20])
)
_ODD = st.sampled_from(
    [(b":method", m) for m in (b"POST", b"HEAD", b"CONNECT", b"", b"G ET", b"get")]
    + [(b":scheme", s) for s in (b"http", b"ftp", b"", b" https")]
    + [(b":path", p) for p in (b"/", b"", b"/a b", b"/\x80", b"*")]
    + [(b":authority", a) for a in (b"Ex.test:8443", b"", b"bad host", b"a,b", b"[::1]:80", b"x\x00", b" x")]
    + [(b":status", b"200"), (b":protocol", b"websocket")]
    + [(b"host", h) for h in (b"example.test", b"other.test", b"")]
    + [(b"te", b"trailers"), (b"te", b"gzip"), (b"connection", b"close"), (b"upgrade", b"h2c"), (b"transfer-encoding", b"chunked")]
    + [(n, b"1.2.3.4") for n in (b"x-forwarded-for", b"x-real-ip", b"forwarded", b"x-forwarded-proto", b"x-scheme")]
    + [(b"proxy-authorization", b"Basic x"), (b"trailer", b"x-t"), (b"x-forwarded-prefix", b"/p")]
    + [(b"content-length", n) for n in (b"5", b"05", b"0", b"abc", b"1,1", b"9" * 19)]
    + [(b"expect", e) for e in (b"100-continue", b"100-Continue", b"x")]
    + [(b"x-a", v) for v in (b" v", b"v ", b"\t", b"a\r\nb: c", b"a\nb", b"a\rb", b"a\x00b", b"\x01", b"\x7f")]
    + [(b"cookie", c) for c in (b"a=1 ", b"", b"\x01")]
    + [(n, b"v") for n in (b"X-Upper", b"bad name", b"", b"a:b", b"x\x7f", b"x(y)", b":", b"\xff")]
)


@st.composite
def _lists(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    """A usual list (a request's four pseudo-header fields in any order, a few usual fields) with up to three odd fields put in or swapped in."""
    headers = list(draw(st.permutations([(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/a?b=c"), (b":authority", b"example.test")])))
    headers += draw(st.lists(_USUAL_FIELDS, max_size=5))
    for _ in range(draw(st.integers(0, 3))):
        odd, at = draw(_ODD), draw(st.integers(0, len(headers)))
        if at < len(headers) and draw(st.booleans()):
            headers[at] = odd
        else:
            headers.insert(at, odd)
    return headers


def _outcome(read: Callable[[], h1.Head]) -> object:
    try:
        return read()
    except MalformedHeaders:
        return "malformed"
    except h1.HTTPError as error:
        return error.status


@settings(max_examples=3000, deadline=None)
@given(_lists(), st.booleans(), st.sampled_from([1, 3, 100]))
def test_every_list_is_read_as_the_checks_and_the_http1_parser_read_it(headers: list[tuple[bytes, bytes]], has_body: bool, max_fields: int) -> None:
    """
    The usual list's shortcut (no text parsed) makes the head the full way would have made, and
    takes no list that way would refuse: the same head, or the same refusal, for any list.
    """
    usual = _usual_request_head(headers, has_body, max_fields)

    def full_way() -> h1.Head:
        check_request(headers)
        return _parsed_request_head(headers, has_body, max_fields)

    expected = _outcome(full_way)
    assert usual is None or usual == expected
    assert _outcome(lambda: request_head(headers, has_body, max_fields)) == expected


@settings(max_examples=2000, deadline=None)
@given(_lists(), st.booleans())
def test_a_usual_list_goes_upstream_as_the_filtered_head_would(headers: list[tuple[bytes, bytes]], has_body: bool) -> None:
    """
    A usual list's head says when it has no field the upstream head drops (hop-by-hop, a client's
    forwarding field): request_head_bytes then skips its filter, and makes the same head it would have made.
    """
    head = _usual_request_head(headers, has_body, 100)
    if head is None:
        return
    filtered = replace(head, nothing_to_drop=False)
    forwarded = ForwardedFor("10.0.0.9", b"X-Forwarded-For: 10.0.0.9\r\n", b"https")
    assert request_head_bytes(head, forwarded, "example.test") == request_head_bytes(filtered, forwarded, "example.test")


def test_only_a_list_without_fields_to_drop_skips_the_filter() -> None:
    assert request_head(BASE + [(b"accept", b"*/*"), (b"cookie", b"a=1")], False, 100).nothing_to_drop
    for extra in ([(b"x-forwarded-for", b"6.6.6.6")], [(b"te", b"trailers")], [(b"proxy-authorization", b"Basic x")]):
        head = request_head(BASE + extra, False, 100)
        assert not head.nothing_to_drop
        upstream = request_head_bytes(head, ForwardedFor("10.0.0.9", b"", b"https"), "example.test")
        assert b"\r\n%s:" % extra[0][0] not in upstream.lower()
    assert not h1.parse_request_head(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").nothing_to_drop  # HTTP/1.1's parser never says so


def test_the_usual_lists_take_the_shortcut() -> None:
    """A browser's request (cookies split, 8.2.3), a POST with a length and a gRPC call are the usual kind: no text parsed."""
    browser = BASE + [(b"user-agent", b"Mozilla/5.0"), (b"accept", b"text/html"), (b"cookie", b"a=1"), (b"cookie", b"b=2")]
    assert _usual_request_head(browser, False, 100) is not None
    post = [(b":method", b"POST"), *BASE[1:], (b"content-length", b"5"), (b"expect", b"100-continue")]
    head = _usual_request_head(post, True, 100)
    assert head is not None and head.expect_continue and head.framing.content_length == 5
    grpc = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/echo.Echo/Say"), (b":authority", b"grpc.test"),
            (b"content-type", b"application/grpc"), (b"te", b"trailers"), (b"grpc-timeout", b"5S")]
    head = _usual_request_head(grpc, True, 100)
    assert head is not None and head.framing.chunked and b"te: trailers\r\n" in head.block


def test_a_list_read_before_gives_its_own_pseudo_fields_and_its_caller_s_limit() -> None:
    """
    The regular fields' reading is kept by those fields alone: a list that repeats them with another
    :authority, :path or :method gets its own, the body flag is part of what is kept, and a caller's
    smaller field limit still refuses a list read under a larger one.
    """
    regular = [(b"user-agent", b"Mozilla/5.0"), (b"accept", b"*/*"), (b"cookie", b"a=1"), (b"cookie", b"b=2")]
    first = request_head(BASE + regular, False, 100)
    other = request_head([(b":method", b"HEAD"), (b":scheme", b"https"), (b":path", b"/z"), (b":authority", b"b.test")] + regular, False, 100)
    assert (first.host, first.target, first.method) == (b"example.test", b"/a?b=c", b"GET")
    assert (other.host, other.target, other.method) == (b"b.test", b"/z", b"HEAD")
    assert other.block == b"host: b.test\r\nuser-agent: Mozilla/5.0\r\naccept: */*\r\ncookie: a=1; b=2\r\n"
    with_body = request_head(BASE + regular, True, 100)
    assert with_body.framing.chunked and with_body.block.endswith(b"transfer-encoding: chunked\r\n") and not first.framing.has_body
    assert _usual_request_head(BASE + regular, False, 3) is not None  # three lines: user-agent, accept, the joined cookie
    assert _usual_request_head(BASE + regular, False, 2) is None
    with pytest.raises(h1.HTTPError) as refused:
        request_head(BASE + regular, False, 2)
    assert refused.value.status == 431


def test_the_kept_readings_stay_bounded() -> None:
    """Request lists are the client's to vary: at most 512 kept, none of more than 1 KiB."""
    for n in range(600):
        request_head(BASE + [(b"x-n", b"%d" % n)], False, 100)
    assert 0 < len(h2_fields._USUAL_REQUEST_FIELDS) <= 512
    large = [(b"x-large", b"v" * 1100)]
    assert request_head(BASE + large, False, 100).block.endswith(b"v\r\n")
    assert (False, *large[0]) not in h2_fields._USUAL_REQUEST_FIELDS


def test_the_field_count_limit_does_not_count_the_host_we_add() -> None:
    fields = BASE + [(b"x-%d" % i, b"v") for i in range(3)]
    request_head(fields, False, 3)
    with pytest.raises(h1.HTTPError):
        request_head(fields + [(b"x-last", b"v")], False, 3)


def test_a_repeated_response_section_gives_the_same_header_list_each_time() -> None:
    """The usual response's fields are kept by its section's bytes; what a caller does to its list stays in that list."""
    response = h1.parse_response_head(b"HTTP/1.1 200 OK\r\nServer: up\r\nConnection: keep-alive\r\nX-Same: 1\r\nContent-Length: 2\r\n\r\n", b"GET")
    request = request_head(BASE, False, 100)
    first = response_headers(response, request, b"twingress")
    expected = list(first)
    first.append((b"x-added-by-a-caller", b"1"))
    again = response_headers(response, request, b"twingress")
    assert again == expected and again is not first
    assert [name for name, _ in again] == [b":status", b"x-same", b"content-length", b"date", b"server"]


def test_response_headers_drop_connection_specific_fields_and_carry_ours() -> None:
    response = h1.parse_response_head(
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, x-hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\n"
        b"Transfer-Encoding: chunked\r\nServer: upstream\r\nX-App: yes\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n",
        b"GET",
    )
    request = request_head(BASE, False, 100)
    headers = response_headers(response, request, b"twingress", hsts="max-age=60", added=b"Set-Cookie: route=x\r\n")
    names = [name for name, _ in headers]
    assert headers[0] == (b":status", b"200")
    assert not {b"connection", b"keep-alive", b"x-hop", b"transfer-encoding"} & set(names)
    assert (b"server", b"twingress") in headers and (b"x-app", b"yes") in headers
    assert [value for name, value in headers if name == b"set-cookie"] == [b"a=1", b"b=2", b"route=x"]
    assert (b"strict-transport-security", b"max-age=60") in headers
    assert all(name == name.lower() for name in names)


_RESPONSE_LINES = st.sampled_from(
    [b"Content-Type: text/plain", b"Date: Thu, 26 Nov 2026 10:00:00 GMT", b"Server: upstream", b"Connection: keep-alive, x-hop",
     b"Connection: close", b"Keep-Alive: timeout=5", b"X-Hop: 1", b"Set-Cookie: a=1", b"Set-Cookie: b=2", b"Upgrade: websocket",
     b"Proxy-Connection: x", b"TE: trailers", b"Trailer: x", b"X-App:  padded\t", b"x-app: lower", b"X-Replaced: up"]
)
# How the body is framed: one of these at most (a head with two is answered 502, and has no header list).
_RESPONSE_FRAMING = st.sampled_from([[], [b"Content-Length: 12"], [b"Transfer-Encoding: chunked"], [b"Transfer-Encoding: gzip"]])
_CHANGES = st.sampled_from(
    [None, header_changes([("X-Replaced", "ours"), ("X-New", "1")]), header_changes([], added=[("Set-Cookie", "c=3")], removed=["x-app"]),
     header_changes([("X-Client", "")], templates=[("X-Client", "$remote_addr", parse_template("$remote_addr"))])]
)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(_RESPONSE_LINES, max_size=8), _RESPONSE_FRAMING, st.integers(0, 8), st.sampled_from([101, 200, 204, 304, 404]), st.sampled_from([b"GET", b"HEAD"]),
    st.sampled_from([b"", b"Set-Cookie: route=x\r\n", b"Connection: close\r\nX-Sticky: 1\r\n"]), _CHANGES, st.sampled_from(["", "max-age=60"]),
)
def test_a_response_gets_the_fields_an_http1_client_gets_less_those_http2_forbids(
    lines: list[bytes], framing: list[bytes], at: int, status: int, method: bytes, added: bytes, changes: Optional[HeaderChanges], hsts: str
) -> None:
    """The header list is the HTTP/1.1 head's fields (forwarding.response_head_bytes), in order, less the connection-specific ones."""
    lines[at:at] = framing
    response = h1.parse_response_head(b"HTTP/1.1 %d X\r\n%s\r\n" % (status, b"".join(line + b"\r\n" for line in lines)), method)
    request = request_head([(b":method", method), *BASE[1:]], False, 100)
    forwarded = ForwardedFor("10.0.0.9", b"", b"https")
    raw = response_head_bytes(response, request, b"twingress", True, True, hsts, added, changes, forwarded)
    http1 = [(lower, value) for _, lower, value in h1.split_fields(raw[raw.index(b"\r\n") + 2 : -2])]
    forbidden = {b"connection", b"transfer-encoding", b"keep-alive", b"upgrade", b"proxy-connection"}
    expected = [(b":status", b"%d" % status)] + [field for field in http1 if field[0] not in forbidden]
    headers = response_headers(response, request, b"twingress", hsts, added, changes, forwarded)
    if not response.has_date:  # ours, made for each call: the two calls may fall in different seconds
        expected, headers = _same_date(expected), _same_date(headers)
    assert headers == expected


def _same_date(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The list with its (one, well-formed) Date's value replaced by a fixed one."""
    dates = [value for name, value in headers if name == b"date"]
    assert len(dates) == 1 and re.fullmatch(rb"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT", dates[0])
    return [(name, b"(now)" if name == b"date" else value) for name, value in headers]


def test_local_responses_have_the_http1_fields_and_body() -> None:
    headers, body = local_response(308, b"twingress", b"https://x.test/")
    assert headers[0] == (b":status", b"308")
    assert (b"location", b"https://x.test/") in headers and (b"server", b"twingress") in headers
    assert (b"content-length", b"%d" % len(body)) in headers
    assert body == b"308 Permanent Redirect\n"


def test_the_reset_budget_allows_bursts_and_refills() -> None:
    now = [0.0]
    budget = ResetBudget(lambda: now[0], max_streams=10)
    assert all(budget.spend() for _ in range(20))
    assert not budget.spend()
    now[0] += 1.0  # ten more a second later
    assert sum(budget.spend() for _ in range(20)) == 9  # the overdraft is paid back first


def test_the_goaway_code_is_replaced_in_place() -> None:
    from hyperframe.frame import Frame, GoAwayFrame

    frame = GoAwayFrame(0)
    frame.last_stream_id = 7
    frame.error_code = 1
    replaced = with_goaway_code(b"other" + frame.serialize(), 11)  # type: ignore[arg-type]
    assert replaced.startswith(b"other")
    parsed, length = Frame.parse_frame_header(memoryview(replaced[5:14]))
    parsed.parse_body(memoryview(replaced[14:14 + length]))
    assert (parsed.last_stream_id, parsed.error_code) == (7, 11)


def test_fields_a_policy_adds_survive_an_upstream_response_without_date() -> None:
    """A sticky cookie was lost when the upstream sent no Date (the Date line replaced the added ones)."""
    from ingress.proxy.request.forwarding import response_head_bytes

    response = h1.parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"GET")
    request = h1.parse_request_head(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    head = response_head_bytes(response, request, b"twingress", True, False, added=b"Set-Cookie: route=x\r\n")
    assert b"\r\nSet-Cookie: route=x\r\n" in head and b"\r\nDate: " in head


def test_the_head_routing_made_becomes_an_http2_endpoints_header_list() -> None:
    """The rewrite, the Host (as :authority) and the forwarding fields carry over; HTTP/1.1-only fields do not."""
    from ingress.proxy.http2.fields import upstream_request_headers

    head = (
        b"POST /svc.Greeter/Hello HTTP/1.1\r\nhost: grpc.test\r\ncontent-type: application/grpc\r\n"
        b"transfer-encoding: chunked\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n"
    )
    headers = upstream_request_headers(head, b"http")
    assert headers[:4] == [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"grpc.test"), (b":path", b"/svc.Greeter/Hello")]
    assert (b"content-type", b"application/grpc") in headers and (b"x-forwarded-for", b"10.0.0.1") in headers
    assert not any(name in (b"host", b"transfer-encoding") for name, _ in headers)
