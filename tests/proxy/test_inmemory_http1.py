"""
HTTP/1.1 through the listener's factory, in memory (L{tests.proxy.inmemory}): the request path's
logic (routing, the head sent upstream, keep-alive, bodies, limits, upstream failures, timeouts on
the fake clock, a client that leaves) with no socket, no process and no sleep.
"""

from __future__ import annotations

from ingress.proxy.request.settings import ProxySettings
from tests.proxy.inmemory import HOST, POD, POD_PORT, Client, InMemoryProxy, Upstream, parse_head, status_of
from tests.unit.objects import endpoints, ingress, path, rule, service

GET = b"GET /a?x=1 HTTP/1.1\r\nHost: echo.test\r\nUser-Agent: t\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


def routed(proxy: InMemoryProxy, client: Client, request: bytes = GET) -> Upstream:
    """Send C{request}; the proxy must ask for a connection to the route's endpoint, which accepts."""
    client.send(request)
    upstream = proxy.upstream()
    assert (upstream.host, upstream.port) == (POD, POD_PORT)
    return upstream.accept()


def test_a_routed_get_reaches_its_endpoint_with_the_forwarding_fields_and_its_answer_comes_back() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    upstream = routed(proxy, client, b"GET /a?x=1 HTTP/1.1\r\nHost: Echo.Test\r\nX-Forwarded-For: 192.0.2.1\r\nUser-Agent: t\r\n\r\n")
    line, fields, _ = parse_head(upstream.received())
    assert line == b"GET /a?x=1 HTTP/1.1"
    assert fields[b"host"] == b"Echo.Test"
    assert fields[b"user-agent"] == b"t"
    # The client's own X-Forwarded-For is not trusted (no trusted proxy configured): the connection's peer replaces it.
    assert (fields[b"x-forwarded-for"], fields[b"x-real-ip"]) == (b"10.0.0.9", b"10.0.0.9")
    assert (fields[b"x-forwarded-proto"], fields[b"x-forwarded-port"], fields[b"x-forwarded-host"]) == (b"http", b"8080", b"echo.test")
    assert len(fields[b"x-request-id"]) == 32
    upstream.respond(OK)
    status, fields, body = parse_head(client.received())
    assert (status, body) == (b"HTTP/1.1 200 OK", b"hello")
    assert fields[b"server"] == b"twingress" and fields[b"content-length"] == b"5"
    assert not client.closed


def test_keep_alive_two_requests_share_the_client_connection_and_the_upstream_one() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    upstream = routed(proxy, client)
    assert upstream.received().startswith(b"GET /a?x=1 ")
    upstream.respond(OK)
    assert parse_head(client.received())[2] == b"hello"
    client.send(b"GET /second HTTP/1.1\r\nHost: echo.test\r\n\r\n")
    assert proxy.connections_asked() == 1, "the pooled upstream connection is reused"
    assert upstream.received().startswith(b"GET /second HTTP/1.1\r\n")
    upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
    assert parse_head(client.received())[2] == b"second"
    assert not client.closed and not upstream.closed


def test_a_chunked_request_body_goes_upstream_chunk_by_chunk_as_it_arrives() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    upstream = routed(proxy, client, b"POST /up HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    line, fields, rest = parse_head(upstream.received())
    assert line == b"POST /up HTTP/1.1" and fields[b"transfer-encoding"] == b"chunked"
    assert rest == b"5\r\nhello\r\n"
    client.send(b"6\r\n world\r\n0\r\n\r\n")
    assert upstream.received() == b"6\r\n world\r\n0\r\n\r\n"
    upstream.respond(OK)
    assert status_of(client.received()) == 200
    assert not client.closed


def test_no_route_for_the_host_is_404_and_no_upstream_is_asked() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    client.send(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
    assert status_of(client.received()) == 404
    assert proxy.connections_asked() == 0
    assert not client.closed, "a local answer keeps the connection"


def test_a_declared_body_over_the_limit_is_413_before_any_upstream_and_closes() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(max_body_bytes=10))
    client = proxy.connect()
    client.send(b"POST / HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 11\r\n\r\n")
    assert status_of(client.received()) == 413
    assert proxy.connections_asked() == 0
    assert client.closed


def test_a_chunked_body_that_grows_over_the_limit_is_413_and_the_upstream_is_not_pooled() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(max_body_bytes=10))
    client = proxy.connect()
    upstream = routed(proxy, client, b"POST / HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n")
    upstream.received()
    client.send(b"8\r\n12345678\r\n")
    assert status_of(client.received()) == 413
    assert client.closed
    proxy.reactor.turn()  # the client connection's close completes
    assert upstream.aborted, "half a request was sent on it"


def test_a_head_over_max_head_bytes_is_431_and_closes() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(max_head_bytes=1024))
    client = proxy.connect()
    client.send(b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
    assert status_of(client.received()) == 431
    assert proxy.connections_asked() == 0
    assert client.closed


def test_a_head_over_max_head_bytes_is_refused_before_its_end_arrives() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(max_head_bytes=1024))
    client = proxy.connect()
    client.send(b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Big: " + b"a" * 2000)
    assert status_of(client.received()) == 431
    assert client.closed


def test_the_only_endpoint_refusing_the_connection_is_502() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    client.send(GET)
    proxy.upstream().refuse()
    assert status_of(client.received()) == 502
    assert proxy.connections_asked() == 1, "no other endpoint to try"
    assert not client.closed


def test_a_refused_connection_is_tried_again_on_the_next_endpoint() -> None:
    proxy = InMemoryProxy(ingress("web", rule(HOST, path("/"))), service("web"), endpoints("web", POD, "10.244.0.6", ports=(("http", POD_PORT),)))
    client = proxy.connect()
    client.send(GET)
    first = proxy.upstream()
    first.refuse()
    second = proxy.upstream()
    assert {first.host, second.host} == {POD, "10.244.0.6"}
    second.accept()
    assert second.received().startswith(b"GET /a?x=1 ")
    second.respond(OK)
    assert parse_head(client.received())[2] == b"hello"


def test_an_endpoint_that_does_not_answer_in_the_read_timeout_is_504_and_its_connection_is_closed() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(upstream_timeout=30.0))
    client = proxy.connect()
    upstream = routed(proxy, client)
    proxy.reactor.advance(29.0)
    assert client.received() == b"", "nothing before the read timeout"
    proxy.reactor.advance(1.5)
    assert status_of(client.received()) == 504
    assert upstream.closed


def test_an_endpoint_that_does_not_connect_in_the_connect_timeout_is_asked_with_it() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(connect_timeout=3.0))
    client = proxy.connect()
    client.send(GET)
    assert proxy.upstream().timeout == 3.0


def test_the_client_leaving_mid_response_aborts_the_upstream_connection_which_is_not_reused() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    upstream = routed(proxy, client)
    upstream.respond(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst part")
    assert parse_head(client.received())[2] == b"first part"
    client.leave()
    assert upstream.aborted, "half a response left on it: the upstream connection goes"
    proxy.reactor.turn()
    again = proxy.connect()
    again.send(GET)
    assert proxy.connections_asked() == 2, "a new request opens a new upstream connection"


def test_the_client_leaving_before_the_answer_is_logged_as_499() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    upstream = routed(proxy, client)
    client.leave()
    assert upstream.aborted
    samples = {s.labels.get("status"): s.value for m in proxy.metrics.registry.collect() for s in m.samples if s.name.endswith("requests_total")}
    assert samples.get("499") == 1.0, samples


def test_an_upstream_that_closes_after_a_whole_response_leaves_the_client_connection_open() -> None:
    proxy = InMemoryProxy()
    client = proxy.connect()
    upstream = routed(proxy, client)
    upstream.respond(OK)
    upstream.close()
    proxy.reactor.turn()
    assert status_of(client.received()) == 200
    assert not client.closed
    client.send(GET)
    assert proxy.connections_asked() == 2, "the closed connection left the pool"


def test_a_head_not_complete_within_the_header_timeout_is_408_and_closes() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(header_timeout=10.0))
    client = proxy.connect()
    client.send(b"GET / HTTP/1.1\r\nHost: echo.test\r\n")
    proxy.reactor.advance(9.5)
    assert client.received() == b"" and not client.closed
    proxy.reactor.advance(1.0)
    assert status_of(client.received()) == 408
    assert client.closed


def test_an_idle_keep_alive_connection_closes_at_the_keepalive_timeout() -> None:
    proxy = InMemoryProxy(settings=ProxySettings(keepalive_timeout=75.0))
    client = proxy.connect()
    upstream = routed(proxy, client)
    upstream.respond(OK)
    assert status_of(client.received()) == 200
    proxy.reactor.advance(74.0)
    assert not client.closed
    proxy.reactor.advance(2.0)
    assert client.closed and client.received() == b"", "closed without a word, as nginx does"
