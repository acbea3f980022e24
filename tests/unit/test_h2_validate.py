"""
L{ingress.proxy.http2.validate}: the header lists RFC 9113 calls malformed are refused, each rule
by the section that states it; well-formed lists pass.
"""

from __future__ import annotations

import re

import pytest

from ingress.proxy.http2.validate import MalformedHeaders, check_request, check_response, check_trailers

GET = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a.test"), (b":path", b"/")]


def _with(*fields: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [*GET, *fields]


@pytest.mark.parametrize(
    "headers",
    [
        GET,
        _with((b"user-agent", b"curl/8"), (b"accept", b"*/*"), (b"cookie", b"a=1"), (b"cookie", b"b=2")),
        _with((b"te", b"trailers"), (b"te", b"Trailers")),  # 8.2.2: TE with "trailers" only is allowed
        _with((b"x-empty", b"")),  # an empty value is a value
        _with((b"x-inner", b"a  b\tc")),  # whitespace inside a value
        _with((b"host", b"a.test")),  # 8.3.1: host equal to :authority
        [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/"), (b"host", b"a.test")],  # host without :authority
        [(b":method", b"CONNECT"), (b":authority", b"a.test:443")],  # 8.5: CONNECT has neither :scheme nor :path
        _with((b"x-obs", b"caf\xc3\xa9")),  # bytes above 0x7f in a value
    ],
)
def test_well_formed_requests_pass(headers: list[tuple[bytes, bytes]]) -> None:
    check_request(headers)


@pytest.mark.parametrize(
    ("headers", "rule"),
    [
        # RFC 9113 8.2.1: field names are lower case, without controls, spaces, colons, or bytes above 0x7e
        (_with((b"X-Up", b"1")), "invalid field name"),
        (_with((b"x up", b"1")), "invalid field name"),
        (_with((b"x:up", b"1")), "invalid field name"),
        (_with((b"x\x7f", b"1")), "invalid field name"),
        (_with((b"caf\xc3\xa9", b"1")), "invalid field name"),
        (_with((b"", b"1")), "invalid field name"),
        # 8.2.1: values carry no NUL, CR or LF, and do not start or end with SP or HTAB
        (_with((b"x", b"a\r\nx-injected: 1")), "invalid value"),
        (_with((b"x", b"a\nb")), "invalid value"),
        (_with((b"x", b"a\x00b")), "invalid value"),
        (_with((b"x", b" a")), "invalid value"),
        (_with((b"x", b"a\t")), "invalid value"),
        ([(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a.test"), (b":path", b"/\r\nx: 1")], "invalid value"),
        # 8.2.2: connection-specific fields, and TE other than "trailers"
        (_with((b"connection", b"close")), "connection-specific"),
        (_with((b"keep-alive", b"5")), "connection-specific"),
        (_with((b"proxy-connection", b"keep-alive")), "connection-specific"),
        (_with((b"transfer-encoding", b"chunked")), "connection-specific"),
        (_with((b"upgrade", b"websocket")), "connection-specific"),
        (_with((b"te", b"gzip")), "te other than trailers"),
        # 8.3: pseudo-header fields come first, only the request's, each once
        ([(b":method", b"GET"), (b"accept", b"*/*"), (b":scheme", b"https"), (b":authority", b"a.test"), (b":path", b"/")], "after a regular field"),
        (_with((b":status", b"200")), "is not a request's"),
        ([*GET, (b":protocol", b"websocket")], "is not a request's"),  # RFC 8441 needs a setting twingress never sends
        ([*GET, (b":method", b"POST")], "repeated"),
        # 8.3.1: :method always, :scheme and a non-empty :path unless CONNECT, a target host
        (GET[1:], "no :method"),
        ([(b":method", b"GET"), (b":authority", b"a.test"), (b":path", b"/")], "no :scheme"),
        ([(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a.test")], "no :scheme or no (or an empty) :path"),
        ([(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a.test"), (b":path", b"")], "an empty) :path"),
        ([(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/")], "neither :authority nor host"),
        (_with((b"host", b"b.test")), ":authority and host differ"),
        (_with((b"host", b"a.test"), (b"host", b"a.test")), "several host fields"),
        # 8.5: CONNECT carries neither :scheme nor :path
        ([(b":method", b"CONNECT"), (b":authority", b"a.test:443"), (b":path", b"/")], "CONNECT with :scheme or :path"),
    ],
)
def test_malformed_requests_are_refused_by_the_rule_they_break(headers: list[tuple[bytes, bytes]], rule: str) -> None:
    with pytest.raises(MalformedHeaders) as refused:
        check_request(headers)
    assert rule in str(refused.value)


def test_trailers_carry_no_pseudo_header_and_follow_the_field_rules() -> None:
    """RFC 9113 8.1: trailers have no pseudo-header fields; 8.2.1 and 8.2.2 hold in them too."""
    check_trailers([(b"grpc-status", b"0"), (b"grpc-message", b"")])
    for trailers, rule in [
        ([(b":status", b"200")], "pseudo-header field"),
        ([(b"Grpc-Status", b"0")], "invalid field name"),
        ([(b"x", b"a\r\nb")], "invalid value"),
        ([(b"connection", b"close")], "connection-specific"),
    ]:
        with pytest.raises(MalformedHeaders, match=rule):
            check_trailers(trailers)


def test_responses_have_one_status_first_and_follow_the_field_rules() -> None:
    """RFC 9113 8.3.2: :status, once, before the regular fields, and no request pseudo-header; 8.2.1, 8.2.2 as for requests."""
    check_response([(b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-status", b"0")])
    check_response([(b":status", b"103"), (b"link", b"</a.css>; rel=preload")])
    for headers, rule in [
        ([(b"content-type", b"text/plain")], "no (or an invalid) :status"),
        ([(b":status", b"20")], "no (or an invalid) :status"),
        ([(b":status", b"200"), (b":status", b"204")], "repeated"),
        ([(b":status", b"200"), (b":path", b"/")], "is not a response's"),
        ([(b"server", b"x"), (b":status", b"200")], "after a regular field"),
        ([(b":status", b"200"), (b"Content-Type", b"text/plain")], "invalid field name"),
        ([(b":status", b"200"), (b"x", b"a\r\nb")], "invalid value"),
        ([(b":status", b"200"), (b"connection", b"close")], "connection-specific"),
    ]:
        with pytest.raises(MalformedHeaders, match=re.escape(rule)):
            check_response(headers)
