"""
HTTP/2 through the listener's factory, in memory (L{tests.proxy.inmemory}): a client framed by the
C{h2} library's own H2Connection (client side, prior knowledge over cleartext) feeds the proxy's
protocol; the upstream connections are HTTP/1.1 on StringTransports; timeouts run on the fake
clock.  The cases of L{tests.proxy.test_inmemory_http1}, and what only HTTP/2 has: a client's
RST_STREAM mid-response, and the client's flow-control windows.
"""

from __future__ import annotations

from typing import Optional

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import ConnectionTerminated, DataReceived, Event, ResponseReceived, StreamEnded, StreamReset
from h2.settings import SettingCodes

from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from tests.proxy.inmemory import HOST, POD, POD_PORT, Client, InMemoryProxy, Upstream, parse_head

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
CLEARTEXT = HTTP2Settings(cleartext=True)


class H2Client:
    """An HTTP/2 client on one in-memory connection: requests out, the proxy's frames read back as h2 events."""

    def __init__(self, proxy: InMemoryProxy, window: Optional[int] = None) -> None:
        self.proxy = proxy
        self.connection: Client = proxy.connect()
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.h2.initiate_connection()
        if window is not None:
            self.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.flush()
        self.read()  # the proxy's SETTINGS

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.connection.send(data)

    def read(self) -> list[Event]:
        """The events of what the proxy wrote, after one loop turn (its frames go out before the next poll)."""
        self.proxy.reactor.turn()
        events = self.h2.receive_data(self.connection.received())
        self.flush()  # the acknowledgements h2 makes (SETTINGS ACK, PING)
        return list(events)

    def request(self, path: str = "/a?x=1", method: str = "GET", body: Optional[bytes] = None, end: bool = True, headers: tuple[tuple[bytes, bytes], ...] = ()) -> int:
        stream_id: int = self.h2.get_next_available_stream_id()
        fields = [(b":method", method.encode()), (b":scheme", b"http"), (b":authority", HOST.encode()), (b":path", path.encode()), *headers]
        self.h2.send_headers(stream_id, fields, end_stream=body is None and end)
        if body is not None:
            self.h2.send_data(stream_id, body, end_stream=end)
        self.flush()
        return stream_id

    def response(self, events: list[Event], stream_id: int) -> tuple[int, bytes, bool]:
        """The status, body and whether it ended, of C{stream_id} in C{events} (its DATA acknowledged)."""
        status, body, ended = 0, b"", False
        for event in events:
            if getattr(event, "stream_id", None) != stream_id:
                continue
            if isinstance(event, ResponseReceived):
                status = int(dict(event.headers)[b":status"])
            elif isinstance(event, DataReceived):
                body += event.data
                self.h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
            elif isinstance(event, StreamEnded):
                ended = True
        self.flush()
        return status, body, ended


def routed(proxy: InMemoryProxy, client: H2Client, **request: object) -> tuple[int, Upstream]:
    stream_id = client.request(**request)  # type: ignore[arg-type]
    upstream = proxy.upstream()
    assert (upstream.host, upstream.port) == (POD, POD_PORT)
    return stream_id, upstream.accept()


def h2_proxy(settings: Optional[ProxySettings] = None) -> InMemoryProxy:
    return InMemoryProxy(settings=settings, http2=CLEARTEXT)


def test_a_routed_get_goes_upstream_as_http1_with_the_forwarding_fields_and_its_answer_comes_back_on_its_stream() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    stream_id, upstream = routed(proxy, client, headers=((b"x-forwarded-for", b"192.0.2.1"), (b"user-agent", b"t")))
    line, fields, _ = parse_head(upstream.received())
    assert line == b"GET /a?x=1 HTTP/1.1"
    assert fields[b"host"] == b"echo.test" and fields[b"user-agent"] == b"t"
    assert (fields[b"x-forwarded-for"], fields[b"x-forwarded-proto"], fields[b"x-forwarded-port"]) == (b"10.0.0.9", b"http", b"8080")
    upstream.respond(OK)
    assert client.response(client.read(), stream_id) == (200, b"hello", True)


def test_two_requests_in_turn_on_one_connection_reuse_the_upstream_connection() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    first, upstream = routed(proxy, client)
    upstream.received()
    upstream.respond(OK)
    assert client.response(client.read(), first) == (200, b"hello", True)
    second = client.request("/second")
    assert proxy.connections_asked() == 1
    assert upstream.received().startswith(b"GET /second HTTP/1.1\r\n")
    upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
    assert client.response(client.read(), second) == (200, b"second", True)
    assert not client.connection.closed


def test_two_streams_at_once_each_get_their_own_upstream_connection_and_answer() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    first, a = routed(proxy, client, path="/one")
    second, b = routed(proxy, client, path="/two")
    assert a.received().startswith(b"GET /one ") and b.received().startswith(b"GET /two ")
    b.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo")
    a.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
    events = client.read()
    assert client.response(events, first) == (200, b"one", True)
    assert client.response(events, second) == (200, b"two", True)


def test_a_request_body_in_data_frames_goes_upstream_as_it_arrives() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    stream_id, upstream = routed(proxy, client, method="POST", body=b"hello", end=False)
    line, fields, rest = parse_head(upstream.received())
    assert line == b"POST /a?x=1 HTTP/1.1" and fields[b"transfer-encoding"] == b"chunked", "no length known: chunked upstream"
    assert rest == b"5\r\nhello\r\n"
    client.h2.send_data(stream_id, b" world", end_stream=True)
    client.flush()
    assert upstream.received() == b"6\r\n world\r\n0\r\n\r\n"
    upstream.respond(OK)
    assert client.response(client.read(), stream_id)[0] == 200


def test_no_route_for_the_authority_is_404_on_its_stream() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream_id, [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"other.test"), (b":path", b"/")], end_stream=True)
    client.flush()
    assert client.response(client.read(), stream_id)[::2] == (404, True)
    assert proxy.connections_asked() == 0


def test_a_declared_body_over_the_limit_is_413_and_no_upstream_is_asked() -> None:
    proxy = h2_proxy(ProxySettings(max_body_bytes=10))
    client = H2Client(proxy)
    stream_id = client.request(method="POST", body=b"x" * 11, headers=((b"content-length", b"11"),))
    assert client.response(client.read(), stream_id)[::2] == (413, True)
    assert proxy.connections_asked() == 0
    assert not client.connection.closed, "one stream refused, the connection stays"


def test_a_body_that_grows_over_the_limit_is_413_and_its_upstream_aborted() -> None:
    proxy = h2_proxy(ProxySettings(max_body_bytes=10))
    client = H2Client(proxy)
    stream_id, upstream = routed(proxy, client, method="POST", body=b"x" * 8, end=False)
    upstream.received()
    client.h2.send_data(stream_id, b"y" * 8)
    client.flush()
    status = 0
    for event in client.read():
        if isinstance(event, ResponseReceived):
            status = int(dict(event.headers)[b":status"])
    assert status == 413
    assert upstream.aborted


def test_a_header_list_over_max_head_bytes_ends_the_connection_with_enhance_your_calm() -> None:
    proxy = h2_proxy(ProxySettings(max_head_bytes=1024))
    client = H2Client(proxy)
    client.request(headers=((b"x-big", b"a" * 2000),))
    # h2 enforces the SETTINGS_MAX_HEADER_LIST_SIZE the proxy announced: a connection error, not a 431 on the stream.
    ended = [e for e in client.read() if isinstance(e, ConnectionTerminated)]
    assert [(e.error_code, e.last_stream_id) for e in ended] == [(ErrorCodes.ENHANCE_YOUR_CALM, 0)]
    assert client.connection.closed
    assert proxy.connections_asked() == 0


def test_an_endpoint_that_refuses_the_connection_is_502_on_the_stream() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    stream_id = client.request()
    proxy.upstream().refuse()
    assert client.response(client.read(), stream_id)[::2] == (502, True)


def test_an_endpoint_that_does_not_answer_in_the_read_timeout_is_504_and_its_connection_is_closed() -> None:
    proxy = h2_proxy(ProxySettings(upstream_timeout=30.0))
    client = H2Client(proxy)
    stream_id, upstream = routed(proxy, client)
    proxy.reactor.advance(29.0)
    assert client.response(client.read(), stream_id)[0] == 0, "nothing before the read timeout"
    proxy.reactor.advance(1.5)
    assert client.response(client.read(), stream_id)[::2] == (504, True)
    assert upstream.closed


def test_the_client_leaving_mid_response_aborts_the_upstream_connection() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    stream_id, upstream = routed(proxy, client)
    upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst part")
    assert client.response(client.read(), stream_id) == (200, b"first part", False)
    client.connection.leave()
    assert upstream.aborted


def test_a_reset_stream_mid_response_aborts_its_upstream_and_the_connection_serves_the_next() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    stream_id, upstream = routed(proxy, client)
    upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst part")
    assert client.response(client.read(), stream_id)[1] == b"first part"
    client.h2.reset_stream(stream_id, ErrorCodes.CANCEL)
    client.flush()
    assert upstream.aborted, "half a response on it: not pooled"
    upstream.respond(b"the rest")  # what was in flight: nothing reaches the reset stream
    assert [e for e in client.read() if isinstance(e, DataReceived)] == []
    proxy.reactor.turn()
    next_id, again = routed(proxy, client)
    assert proxy.connections_asked() == 2
    again.received()
    again.respond(OK)
    assert client.response(client.read(), next_id) == (200, b"hello", True)
    assert not client.connection.closed


def test_the_client_s_stream_window_bounds_what_is_sent_and_a_full_one_pauses_the_upstream() -> None:
    window = 16
    proxy = h2_proxy()
    client = H2Client(proxy, window=window)
    stream_id, upstream = routed(proxy, client)
    upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" + b"a" * 1000)
    sent = b"".join(e.data for e in client.read() if isinstance(e, DataReceived))  # not acknowledged: the window stays shut
    assert sent == b"a" * window
    assert upstream.wire.producerState == "producing", "a little held for the window: the upstream reads on"
    upstream.respond(b"b" * 99_000)  # more than the proxy holds for a stream without window
    assert [e for e in client.read() if isinstance(e, DataReceived)] == []
    assert upstream.wire.producerState == "paused", "the client gives no window: the upstream is held back"
    client.h2.increment_flow_control_window(200_000, stream_id)
    client.h2.increment_flow_control_window(200_000)
    client.flush()
    status, body, ended = client.response(client.read(), stream_id)
    assert body == b"a" * (1000 - window) + b"b" * 99_000
    assert upstream.wire.producerState == "producing", "the window opened: the upstream reads again"
    assert not ended


def test_an_upstream_closing_after_a_whole_response_resets_nothing() -> None:
    proxy = h2_proxy()
    client = H2Client(proxy)
    stream_id, upstream = routed(proxy, client)
    upstream.respond(OK)
    events = client.read()
    assert client.response(events, stream_id) == (200, b"hello", True)
    upstream.close()
    proxy.reactor.turn()
    assert [e for e in client.read() if isinstance(e, StreamReset)] == []
