"""
A third framing, in memory: what a new client protocol (HTTP/3, say) must write to use the
request path.  L{ToyClient} is the whole of it - a L{ingress.proxy.http.client.ClientSide}
that hands a real L{Exchange} a parsed head and keeps what comes back - and it gets routing,
guards, endpoint choice, pooled connections and retries from the exchange, as HTTP/1.1 and
HTTP/2 do.  Its line count is the diff size of a third framing (test_the_toy_framing_is_small).
"""

from __future__ import annotations

import inspect
from typing import Any

from ingress.proxy.http import h1
from ingress.proxy.http.exchange import Exchange
from ingress.proxy.http.forwarding import ForwardedFor
from ingress.proxy.http.shared import Shared
from ingress.proxy.http.states import BODY
from ingress.proxy.idle import Deadline
from ingress.routing.report import Built
from tests.unit.exchange_support import NGINX, OK, Endpoints, request, routes, shared
from tests.unit.objects import endpoints, ingress, path, rule, service, table


# -- the third framing: everything below up to the tests -------------------------------------
class ToyClient:
    """One request of a toy protocol: the response is kept as (status, body), and whether it ended or was cut."""

    tunnels = False
    client_full = False
    transport = None

    def __init__(self, listener: Shared) -> None:
        self.timer = Deadline(listener.reactor, lambda kind: self.exchange.timed_out())
        self.exchange = Exchange(self, listener, listener.settings, None, self.peer(), "toy")
        self.status, self.body, self.ended = 0, b"", ""

    def send(self, head: h1.Head, body: bytes = b"") -> None:
        self.exchange.run(head, bool(body))
        if body and self.exchange.state == BODY:  # admitted: the exchange takes the body
            self.exchange.send_upstream(body)
            self.exchange.body_done()

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> None:
        self.status, self.body = head.status, body
        self.exchange.sent(len(body))

    def send_body(self, data: bytes) -> None:
        self.body += data
        self.exchange.sent(len(data))

    def answer(self, status: int, close: bool, location: bytes, fields: bytes) -> None:
        self.status = status
        self._finish(status)

    def end_response(self) -> None:
        self._finish(self.exchange.status)

    def _finish(self, status: int) -> None:
        self.exchange.done(status)
        self.exchange.end()
        self.ended = "ended"

    def refuse(self, status: int, detail: str) -> None:
        self.answer(status, True, b"", b"")

    def cut_off(self) -> None:
        self.exchange.end()
        self.ended = "cut"

    def close(self) -> None:
        self.cut_off()

    def peer(self) -> ForwardedFor:
        return ForwardedFor("192.0.2.7", b"X-Forwarded-For: 192.0.2.7\r\n", b"http")

    def local_host(self) -> str:
        return "127.0.0.1"

    def local_port(self) -> bytes:
        return b"80"

    def send_interim(self, head: h1.Head) -> None: ...
    def open_tunnel(self, head: h1.Head, body: bytes) -> None: ...
    def send_tunnel(self, data: bytes) -> None: ...
    def pause_reading(self, reason: str) -> None: ...
    def resume_reading(self, reason: str) -> None: ...
    def expect_body(self, framing: h1.Framing) -> None: ...
    def relay_http2(self) -> None: ...
    def guard_decided(self, passed: bool) -> None: ...
# -- end of the third framing ------------------------------------------------------------------


def test_a_routed_request_is_answered_by_its_endpoint() -> None:
    listener, reactor = shared(routes())
    upstream = Endpoints(reactor)
    client = ToyClient(listener)
    client.send(request(b"/hello"))
    sent = upstream.accept()
    assert sent.value().startswith(b"GET /hello HTTP/1.1\r\n")
    assert b"\r\nX-Forwarded-For: 192.0.2.7\r\n" in sent.value()
    upstream.answer(OK)
    assert (client.status, client.body, client.ended) == (200, b"ok", "ended")
    assert client.exchange.body_sent == 2
    assert listener.pool.idle_count() == 1  # the connection went back to the pool


def test_a_guard_refuses_with_403() -> None:
    """A rate limit (a guard: L{ingress.proxy.http.guards.Guards}) over its burst answers the ConfigMap's status."""
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}, "data": {"limit-req-status-code": "403"}}
    annotations = {NGINX + "limit-rps": "1", NGINX + "limit-burst-multiplier": "1"}
    listener, reactor = shared(_limited(configmap, annotations).table)
    upstream = Endpoints(reactor)
    statuses = []
    for _ in range(3):
        client = ToyClient(listener)
        client.send(request())
        if reactor.tcpClients and len(upstream.protocols) < len(reactor.tcpClients):
            upstream.accept()
            upstream.answer(OK)
        statuses.append(client.status)
    assert statuses[0] == 200 and 403 in statuses, statuses
    assert len(reactor.tcpClients) == statuses.count(200)  # a refused request never reached an endpoint


def _limited(configmap: dict[str, Any], annotations: dict[str, str]) -> Built:
    return table(
        ingress("web", rule("a.test", path("/")), annotations=annotations), service("web"), endpoints("web", "10.0.0.1"), configmap,
        nginx_configmap=("default", "cfg"),
    )


def test_an_unknown_host_is_404() -> None:
    listener, reactor = shared(routes())
    client = ToyClient(listener)
    client.send(request(host=b"other.test"))
    assert (client.status, client.ended) == (404, "ended")
    assert not reactor.tcpClients


def test_a_refused_connection_is_retried_on_the_other_endpoint() -> None:
    listener, reactor = shared(routes())
    upstream = Endpoints(reactor)
    client = ToyClient(listener)
    client.send(request())
    upstream.refuse()
    first, second = upstream.addresses()
    assert first != second and {first[0], second[0]} == {"10.0.0.1", "10.0.0.2"}
    upstream.accept()
    upstream.answer(OK)
    assert (client.status, client.ended, client.exchange.attempts.count) == (200, "ended", 2)
    assert client.exchange.attempts.tried == second


def test_the_toy_framing_is_small() -> None:
    """The diff size of a third framing: the lines between the markers above (the class and nothing else)."""
    lines = inspect.getsource(ToyClient).splitlines()
    print(f"the diff size of a third framing: {len(lines)} lines")
    assert len(lines) < 90
