"""
The exchange's sequence (the table, routing, guards, the body limit, upstream, a retry, a timeout)
driven in memory through its two real client sides: the HTTP/1.1 connection
(L{HTTPProxyProtocol}) and an HTTP/2 connection's stream (L{H2ServerProtocol}, fed by an h2
client), on a StringTransport, with Twisted's MemoryReactorClock for the endpoints and the timers.
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events

from ingress.proxy.http.server import HTTPProxyProtocol
from ingress.proxy.http.settings import ProxySettings
from ingress.proxy.http2.connection import H2ServerProtocol
from ingress.routing import RoutingTable
from ingress.routing.report import Built
from tests.unit.exchange_support import NGINX, OK, Endpoints, Transport, routes, shared
from tests.unit.objects import endpoints, ingress, path, rule, service, table

GET = b"GET /a HTTP/1.1\r\nHost: a.test\r\n\r\n"


def _limited() -> Built:
    """a.test rate-limited to one request (a guard), refused with 403 (the ConfigMap's limit-req-status-code)."""
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}, "data": {"limit-req-status-code": "403"}}
    annotations = {NGINX + "limit-rps": "1", NGINX + "limit-burst-multiplier": "1"}
    return table(
        ingress("web", rule("a.test", path("/")), annotations=annotations), service("web"), endpoints("web", "10.0.0.1"), configmap,
        nginx_configmap=("default", "cfg"),
    )


def _h1(routes: RoutingTable, settings: ProxySettings | None = None) -> tuple[HTTPProxyProtocol, Transport, Endpoints, Any]:
    listener, reactor = shared(routes, settings)
    protocol = HTTPProxyProtocol(listener)
    transport = Transport()
    protocol.makeConnection(transport)
    return protocol, transport, Endpoints(reactor), reactor


def test_h1_a_routed_request_is_answered_and_the_connection_kept() -> None:
    protocol, client, upstream, reactor = _h1(routes(addresses=("10.0.0.1",)))
    protocol.dataReceived(GET)
    assert upstream.accept().value().startswith(b"GET /a HTTP/1.1\r\n")
    upstream.answer(OK)
    assert client.value().startswith(b"HTTP/1.1 200 OK\r\n") and client.value().endswith(b"\r\n\r\nok")
    assert not client.disconnecting
    client.clear()
    protocol.dataReceived(GET)  # the next request on the connection: the pooled upstream connection
    assert len(reactor.tcpClients) == 1
    upstream.answer(OK)
    assert client.value().startswith(b"HTTP/1.1 200 OK\r\n")


def test_h1_a_request_body_follows_its_head_upstream() -> None:
    protocol, client, upstream, _ = _h1(routes())
    protocol.dataReceived(b"POST /a HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhel")
    sent = upstream.accept()
    protocol.dataReceived(b"lo")
    assert sent.value().endswith(b"\r\n\r\nhello")
    upstream.answer(OK)
    assert client.value().startswith(b"HTTP/1.1 200 OK\r\n") and not client.disconnecting


def test_h1_no_route_is_404() -> None:
    protocol, client, upstream, reactor = _h1(routes())
    protocol.dataReceived(b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n")
    assert client.value().startswith(b"HTTP/1.1 404 ")
    assert not reactor.tcpClients and not client.disconnecting


def _until_refused(send: Any, upstream: Endpoints, reactor: Any, answered: Any) -> tuple[list[int], int]:
    """
    Requests one after another, each answered by the endpoint if it reached it (a new connection, or the
    pooled one), until one is refused (at most 4): the statuses, and how many requests reached the endpoint.
    """
    statuses: list[int] = []
    reached = 0
    while len(statuses) < 4 and 403 not in statuses:
        connections = len(reactor.tcpClients)
        before = len(upstream.transports[-1].value()) if upstream.transports else 0
        stream = send()
        if len(reactor.tcpClients) > connections:
            upstream.accept()
        if upstream.transports and len(upstream.transports[-1].value()) > before or len(reactor.tcpClients) > connections:
            reached += 1
            upstream.answer(OK)
        statuses.append(answered(stream))
    return statuses, reached


def test_h1_a_guard_refuses_and_the_connection_serves_on() -> None:
    protocol, client, upstream, reactor = _h1(_limited().table)

    def answered(_: object) -> int:
        status = int(client.value()[9:12])
        client.clear()
        return status

    statuses, reached = _until_refused(lambda: protocol.dataReceived(GET), upstream, reactor, answered)
    assert set(statuses[:-1]) == {200} and statuses[-1] == 403, statuses
    assert reached == len(statuses) - 1 and not client.disconnecting  # the refused one reached no endpoint
    protocol.dataReceived(b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n")
    assert client.value().startswith(b"HTTP/1.1 404 ")  # the connection serves on


def test_h1_a_body_over_the_route_limit_is_413_and_closes() -> None:
    protocol, client, upstream, reactor = _h1(routes(annotations={NGINX + "proxy-body-size": "10"}))
    protocol.dataReceived(b"POST /a HTTP/1.1\r\nHost: a.test\r\nContent-Length: 20\r\n\r\n")
    assert client.value().startswith(b"HTTP/1.1 413 ")
    assert client.disconnecting and not reactor.tcpClients


def test_h1_a_refused_connection_is_retried_on_the_other_endpoint() -> None:
    protocol, client, upstream, _ = _h1(routes())
    protocol.dataReceived(GET)
    upstream.refuse()
    assert len({address for address in upstream.addresses()}) == 2
    upstream.accept()
    upstream.answer(OK)
    assert client.value().startswith(b"HTTP/1.1 200 OK\r\n")


def test_h1_no_endpoint_answers_502() -> None:
    protocol, client, upstream, _ = _h1(routes())
    protocol.dataReceived(GET)
    upstream.refuse()
    upstream.refuse()
    assert client.value().startswith(b"HTTP/1.1 502 ")


def test_h1_an_upstream_silent_past_its_timeout_is_504() -> None:
    protocol, client, upstream, reactor = _h1(routes(), ProxySettings(upstream_timeout=5.0))
    protocol.dataReceived(GET)
    upstream.accept()
    reactor.advance(4.0)
    assert client.value() == b""
    reactor.advance(2.0)
    assert client.value().startswith(b"HTTP/1.1 504 ")


class _H2Client:
    """An h2 client over an in-memory HTTP/2 server connection of the proxy."""

    def __init__(self, routes: RoutingTable) -> None:
        listener, self.reactor = shared(routes)
        self.upstream = Endpoints(self.reactor)
        self.server = H2ServerProtocol(listener)
        self.transport = Transport()
        self.server.makeConnection(self.transport)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.h2.initiate_connection()
        self._flush()

    def _flush(self) -> None:
        self.server.dataReceived(self.h2.data_to_send())
        self.reactor.doIteration(0)

    def request(self, method: bytes = b"GET", authority: bytes = b"a.test", body: bytes = b"", length: int | None = None) -> int:
        stream = self.h2.get_next_available_stream_id()
        headers = [(b":method", method), (b":scheme", b"http"), (b":authority", authority), (b":path", b"/a")]
        if length is not None:
            headers.append((b"content-length", b"%d" % length))
        self.h2.send_headers(stream, headers, end_stream=not body and length is None)
        if body:
            self.h2.send_data(stream, body, end_stream=True)
        self._flush()
        return stream

    def response(self, stream: int) -> tuple[int, bytes, bool]:
        """The status, body and whether the stream ended, from what the proxy sent so far."""
        self.reactor.doIteration(0)  # the proxy's HTTP/2 writes go out before the next poll
        status, body, ended = 0, b"", False
        for event in self.h2.receive_data(self.transport.value()):
            if getattr(event, "stream_id", None) != stream:
                continue
            if isinstance(event, h2.events.ResponseReceived):
                status = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                body += event.data
            if isinstance(event, h2.events.StreamEnded) or getattr(event, "stream_ended", None) is not None:
                ended = True
        self.transport.clear()
        return status, body, ended


def test_h2_a_routed_request_is_answered_on_its_stream() -> None:
    client = _H2Client(routes())
    stream = client.request()
    assert client.upstream.accept().value().startswith(b"GET /a HTTP/1.1\r\n")
    client.upstream.answer(OK)
    assert client.response(stream) == (200, b"ok", True)


def test_h2_a_request_body_goes_upstream() -> None:
    client = _H2Client(routes())
    stream = client.request(b"POST", body=b"hello", length=5)
    sent = client.upstream.accept()
    assert sent.value().endswith(b"\r\n\r\nhello")
    client.upstream.answer(OK)
    assert client.response(stream)[0] == 200


def test_h2_no_route_is_404() -> None:
    client = _H2Client(routes())
    stream = client.request(authority=b"b.test")
    assert client.response(stream)[0] == 404
    assert not client.reactor.tcpClients


def test_h2_a_guard_refuses_with_403() -> None:
    client = _H2Client(_limited().table)
    statuses, reached = _until_refused(client.request, client.upstream, client.reactor, lambda stream: client.response(stream)[0])
    assert set(statuses[:-1]) == {200} and statuses[-1] == 403, statuses
    assert reached == len(statuses) - 1


def test_h2_a_body_over_the_route_limit_is_413() -> None:
    client = _H2Client(routes(annotations={NGINX + "proxy-body-size": "10"}))
    stream = client.request(b"POST", length=20)
    assert client.response(stream)[0] == 413
    assert not client.reactor.tcpClients


def test_h2_a_refused_connection_is_retried_on_the_other_endpoint() -> None:
    client = _H2Client(routes())
    stream = client.request()
    client.upstream.refuse()
    client.upstream.accept()
    client.upstream.answer(OK)
    assert client.response(stream) == (200, b"ok", True)
    assert len(set(client.upstream.addresses())) == 2
