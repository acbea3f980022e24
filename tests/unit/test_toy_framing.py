"""
A third framing is a client side and nothing else: a toy one, in memory, runs real requests through
the exchange (L{ingress.proxy.request.exchange.Exchange.run}) to an in-memory upstream (Twisted's
iosim), and gets what HTTP/1.1 and HTTP/2 get: the routed answer, a 404, a 413, a guard's 401, an
access guard's 403.

L{LineClient} is the whole framing: one request a line ("METHOD HOST TARGET [FIELD=VALUE]..."),
one line back for each ("STATUS BODY").  Everything between, the table, forwarding, routing,
admission, guards, limits, the pooled upstream connection, is the exchange's.
"""

from __future__ import annotations

import base64
from typing import Any, Optional

from passlib.hash import ldap_sha1
from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.test import iosim

from ingress.observe.metrics import Metrics
from ingress.proxy.http1.factory import HTTPProxyFactory
from ingress.proxy.idle import Deadline
from ingress.proxy.message import h1
from ingress.proxy.request.exchange import Exchange
from ingress.proxy.request.forwarding import UNKNOWN_PEER, ForwardedFor
from ingress.proxy.request.limits import RequestLimits
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.runtime.live import LiveTable
from tests.unit.objects import endpoints, ingress, ingress_class, path, rule, service, table

NGINX = "nginx.ingress.kubernetes.io/"


class LineClient:
    """A toy framing's client side (L{ingress.proxy.request.client.ClientSide}): a request a line, a line an answer."""

    tunnels = False
    client_full = False

    def __init__(self, shared: HTTPProxyFactory, transport: StringTransport) -> None:
        self.shared, self.transport = shared, transport
        self.timer = Deadline(shared.reactor, lambda kind: self.exchange.timed_out() if self.exchange else None)
        self.limits = RequestLimits.of(shared.settings)
        self.exchange: Optional[Exchange] = None
        self._answer = [0, b""]

    def line_received(self, line: bytes) -> None:
        method, host, target, *fields = line.split(b" ")
        lines = b"".join(field.replace(b"=", b": ", 1) + b"\r\n" for field in fields)
        head = h1.parse_request_head(b"%s %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (method, target, host, lines))
        self.exchange = Exchange(self, self.shared, self.shared.settings, self.limits, UNKNOWN_PEER, "toy")
        self.exchange.run(head, has_body=bool(head.framing.content_length))

    def peer(self) -> ForwardedFor:
        return ForwardedFor.for_transport(self.transport, b"http")

    def local_host(self) -> str:
        return str(self.transport.getHost().host)

    def local_port(self) -> bytes:
        return b"%d" % self.transport.getHost().port

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> int:
        self._answer = [head.status, body]
        return len(body)

    def send_body(self, data: bytes) -> int:
        self._answer[1] += data
        return len(data)

    def end_response(self) -> None:
        self._finish(*self._answer)

    def answer(self, status: int, close: bool, location: bytes, fields: bytes) -> None:
        self._finish(status, location)

    def refuse(self, status: int, detail: str) -> None:
        self._finish(status, detail.encode())

    def cut_off(self) -> None:
        self._finish(0, b"cut off")

    def _finish(self, status: int, body: bytes) -> None:
        exchange, self.exchange = self.exchange, None
        assert exchange is not None
        exchange.done(status)
        exchange.end()
        exchange.let_go()
        self.timer.cancel()
        self.transport.write(b"%d %s\n" % (status, body))

    def read_body(self, framing: h1.Framing, max_body: int) -> None: ...  # a toy: its requests have no body to read

    def relay_http2(self) -> None: ...

    def send_interim(self, head: h1.Head) -> None: ...

    def open_tunnel(self, head: h1.Head, body: bytes) -> None: ...

    def send_tunnel(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def pause_reading(self, reason: str) -> None: ...

    def resume_reading(self, reason: str) -> None: ...

    def guarded(self, passed: bool) -> None: ...


class Backend(Protocol):
    """An endpoint's HTTP/1.1 server, in memory: each request answered 200 with "backend" and its target."""

    def __init__(self) -> None:
        self.buffer = b""

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted's name)
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            body = b"backend " + head.split(b" ")[1]
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))


def _secret() -> dict[str, Any]:
    htpasswd = base64.b64encode(f"user:{ldap_sha1.hash('secret')}\n".encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "basic", "namespace": "default"}, "data": {"auth": htpasswd}}


def _proxy() -> tuple[LineClient, StringTransport, MemoryReactorClock]:
    built = table(
        ingress_class("twingress"), service("web"), endpoints("web", "10.244.0.5"), _secret(),
        ingress("open", rule("a.test", path("/"))),
        ingress("small", rule("small.test", path("/")), annotations={NGINX + "proxy-body-size": "1k"}),
        ingress("basic", rule("basic.test", path("/")), annotations={NGINX + "auth-type": "basic", NGINX + "auth-secret": "basic"}),
        ingress("ranges", rule("ranges.test", path("/")), annotations={NGINX + "whitelist-source-range": "10.0.0.0/8"}),
    )  # fmt: skip
    live = LiveTable()
    live.swap(built.table)
    reactor, settings = MemoryReactorClock(), ProxySettings()
    factory = HTTPProxyFactory(live, UpstreamPool(reactor, settings), settings, Metrics(), reactor)
    transport = StringTransport(hostAddress=IPv4Address("TCP", "127.0.0.1", 80), peerAddress=IPv4Address("TCP", "127.0.0.1", 50000))
    return LineClient(factory, transport), transport, reactor


def _upstream(reactor: MemoryReactorClock) -> tuple[str, int]:
    """The connection the pool asked for, made: to a L{Backend} through iosim, its bytes pumped both ways."""
    host, port, factory, _, _ = reactor.tcpClients.pop()
    client, backend = factory.buildProtocol(None), Backend()
    iosim.connect(backend, iosim.makeFakeServer(backend), client, iosim.makeFakeClient(client)).flush()
    return host, port


def test_a_routed_request_reaches_its_endpoint_and_its_answer_comes_back() -> None:
    client, transport, reactor = _proxy()
    client.line_received(b"GET a.test /hello")
    assert transport.value() == b""  # the exchange is connecting to the endpoint
    assert _upstream(reactor) == ("10.244.0.5", 8080)
    assert transport.value() == b"200 backend /hello\n"


def test_the_exchange_answers_what_routing_and_the_guards_decide() -> None:
    client, transport, reactor = _proxy()
    client.line_received(b"GET nowhere.test /")  # no route
    client.line_received(b"POST small.test / content-length=5000")  # over the route's proxy-body-size
    client.line_received(b"GET basic.test /")  # basic auth, no credentials: the guard's 401
    client.line_received(b"GET ranges.test /")  # 127.0.0.1 is not in the route's source ranges
    assert transport.value().splitlines() == [b"404 ", b"413 request body too large", b"401 ", b"403 "]
    assert reactor.tcpClients == []  # none of them went upstream
