"""HTTP/2 header lists to and from HTTP/1.1 heads (RFC 9113 8.3.1, 8.2.3), and the reset budget."""

from __future__ import annotations

import pytest

from ingress.proxy.http import h1
from ingress.proxy.http2.connection import _with_goaway_code
from ingress.proxy.http2.fields import local_response, request_head, response_headers
from ingress.proxy.http2.resets import ResetBudget

BASE = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/a?b=c"), (b":authority", b"example.test")]


def test_authority_is_the_host_and_the_head_says_http2() -> None:
    head = request_head(BASE + [(b"accept", b"*/*")], has_body=False, max_fields=100)
    assert (head.method, head.target, head.host, head.version) == (b"GET", b"/a?b=c", b"example.test", (2, 0))
    assert (b"accept", b"*/*") in [(lower, value) for _, lower, value in head.fields]
    assert not head.framing.has_body


def test_a_host_field_without_authority_is_used_and_authority_wins_over_host() -> None:
    without = [field for field in BASE if field[0] != b":authority"] + [(b"host", b"h.test")]
    assert request_head(without, False, 100).host == b"h.test"
    both = BASE + [(b"host", b"other.test")]
    head = request_head(both, False, 100)
    assert head.host == b"example.test" and b"other.test" not in head.block


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
        ([(b":method", b"GET"), (b":authority", b"x")], 400),  # no :path
        (BASE[:3] + [(b":authority", b"bad host")], 400),
        (BASE + [(b"x-bad", b"a\x00b")], 400),
        (BASE + [(b"content-length", b"abc")], 400),
    ],
)
def test_what_http1_refuses_http2_refuses_with_the_same_status(headers: list[tuple[bytes, bytes]], status: int) -> None:
    with pytest.raises(h1.HTTPError) as caught:
        request_head(headers, False, 100)
    assert caught.value.status == status


def test_the_field_count_limit_does_not_count_the_host_we_add() -> None:
    fields = BASE + [(b"x-%d" % i, b"v") for i in range(3)]
    request_head(fields, False, 3)
    with pytest.raises(h1.HTTPError):
        request_head(fields + [(b"x-last", b"v")], False, 3)


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
    replaced = _with_goaway_code(b"other" + frame.serialize(), 11)  # type: ignore[arg-type]
    assert replaced.startswith(b"other")
    parsed, length = Frame.parse_frame_header(memoryview(replaced[5:14]))
    parsed.parse_body(memoryview(replaced[14:14 + length]))
    assert (parsed.last_stream_id, parsed.error_code) == (7, 11)


def test_fields_a_policy_adds_survive_an_upstream_response_without_date() -> None:
    """A sticky cookie was lost when the upstream sent no Date (the Date line replaced the added ones)."""
    from ingress.proxy.http.forwarding import response_head_bytes

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
