# -*- test-case-name: tests.proxy.test_gateway_mirror -*-
"""
Copies of a request for a route's mirrors (L{ingress.routing.policies.mirror}): the bytes the
upstream is sent (head, then body as it is read), also written to one endpoint of each mirror
on a connection of the copy's own, whose answer is read only to know the copy arrived.

A copy never holds the original up: bytes for a copy whose connection is not open yet are kept
up to L{PENDING_LIMIT}; a mirror connection that stops taking bytes (its transport pauses us as a
producer) while more arrive loses the copy; either is counted (C{cut}), and so are copies with
no endpoint, copies whose connection failed, and copies answered.  A copy's connection is closed
when the answer begins, or after the upstream timeout without one.

An ingress-nginx C{mirror-target} (L{URLMirror}) gets its own head: the same fields with the URL's
path (its variables filled in for the client's request) and Host, and without the body's framing
when C{mirror-request-body} is off; it is connected by name or address, over TLS for https.
"""

from __future__ import annotations

import random
from typing import Any, Optional, cast

from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTCP, IReactorTime
from twisted.internet.protocol import ClientFactory, Protocol, connectionDone
from twisted.internet.ssl import CertificateOptions
from twisted.python.failure import Failure
from zope.interface import implementer

from ingress.observe.metrics import Metrics
from ingress.proxy.message import h1
from ingress.proxy.message.target import origin_form
from ingress.proxy.request.forwarding import drop_lines_re
from ingress.proxy.request.variables import expand
from ingress.proxy.transport import IConnectionTransport, release_connector
from ingress.routing.policies.mirror import Mirror, URLMirror

PENDING_LIMIT = 1 << 20  # bytes kept for a copy whose connection is being opened


@implementer(IPushProducer)
class MirrorCopy(Protocol):
    """One request's copy on its way to one mirror endpoint."""

    def __init__(self, reactor: IReactorTime, metrics: Metrics, route: str, head: bytes, timeout: float, body: bool = True) -> None:
        self.reactor = reactor
        self.body = body  # mirror-request-body: "off" sends the head alone
        self.metrics = metrics
        self.route = route
        self.timeout = timeout
        self._pending = [head]
        self._pending_size = len(head)
        self._full = False
        self.ended = False  # answered, failed or cut: nothing more is written
        self._timer: Optional[IDelayedCall] = None
        self._connection: Optional[IConnectionTransport] = None

    def send(self, data: bytes) -> None:
        """More of the request (reactor thread)."""
        if self.ended or not self.body:
            return
        connection = self._connection
        if connection is None:
            self._pending.append(data)
            self._pending_size += len(data)
            if self._pending_size > PENDING_LIMIT:
                self._end("cut")
            return
        if self._full:
            self._end("cut")
            return
        connection.write(data)
        self._rearm()

    def connectionMade(self) -> None:
        connection = self._connection = cast(IConnectionTransport, self.transport)
        if self.ended:
            connection.abortConnection()
            return
        connection.registerProducer(self, True)
        data, self._pending = b"".join(self._pending), []
        connection.write(data)
        self._rearm()

    def dataReceived(self, data: bytes) -> None:
        self._end("answered")  # the mirror took the request; what it says is ignored

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._end("failed")

    def failed(self) -> None:
        """The connection could not be opened."""
        self._end("failed")

    def _rearm(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.reset(self.timeout)
        else:
            self._timer = self.reactor.callLater(self.timeout, self._end, "failed")

    def _end(self, outcome: str) -> None:
        if self.ended:
            return
        self.ended = True
        self._pending = []
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self.metrics.mirror_requests.labels(self.route, outcome).inc()
        if self._connection is not None:
            self._connection.abortConnection()

    # IPushProducer: the transport tells us when its buffer is full.
    def pauseProducing(self) -> None:
        self._full = True

    def resumeProducing(self) -> None:
        self._full = False

    def stopProducing(self) -> None:
        self._full = True


class _CopyFactory(ClientFactory):
    """Connects one copy."""

    noisy = False

    def __init__(self, copy: MirrorCopy) -> None:
        self.copy = copy

    def buildProtocol(self, addr: Any) -> MirrorCopy:
        return self.copy

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        self.copy.failed()

    def clientConnectionLost(self, connector: Any, reason: Failure) -> None:
        release_connector(connector)  # a connection per copy: no cycle of it left for the collector


_HOST_RE = drop_lines_re(frozenset({b"host"}))
_BODY_RE = drop_lines_re(frozenset({b"content-length", b"transfer-encoding"}))
_TLS: list[Any] = []  # the client TLS options of https mirrors, made on first use (no verification: nginx's default)


def url_head(url: URLMirror, head: bytes, request: h1.Head, client_ip: str, scheme: bytes) -> bytes:
    """The head a mirror-target receives: the upstream's fields with the URL's target and Host (and no body framing without the body)."""
    line_end = head.index(b"\r\n")
    method = head[: head.index(b" ")]
    block = _HOST_RE.sub(b"", head[line_end + 2 : -2])
    if not url.body:
        block = _BODY_RE.sub(b"", block)
    target = expand(url.path, request, client_ip, scheme).encode("latin-1") if url.path else origin_form(request.target)
    return b"%s %s HTTP/1.1\r\n%sHost: %s\r\n\r\n" % (method, target, block, url.authority.encode("latin-1"))


def _connect_url(reactor: Any, url: URLMirror, copy: MirrorCopy, connect_timeout: float) -> None:
    if not url.tls:
        reactor.connectTCP(url.host, url.port, _CopyFactory(copy), timeout=connect_timeout)
        return
    if not _TLS:
        _TLS.append(CertificateOptions())
    reactor.connectSSL(url.host, url.port, _CopyFactory(copy), _TLS[0], timeout=connect_timeout)


def start_copies(
    mirror: Mirror,
    head: bytes,
    pool: Any,
    reactor: Any,
    metrics: Metrics,
    route: str,
    connect_timeout: float,
    timeout: float,
    request: Optional[h1.Head] = None,
    client: tuple[str, bytes] = ("", b"http"),
) -> tuple[MirrorCopy, ...]:
    """A copy for each of the route's mirrors whose share draws this request, connecting now (C{client}: its address and scheme)."""
    copies = []
    if request is not None:
        for url in mirror.urls:
            copy = MirrorCopy(reactor, metrics, route, url_head(url, head, request, *client), timeout, url.body)
            _connect_url(reactor, url, copy, connect_timeout)
            copies.append(copy)
    for target in mirror.targets:
        if target.percent < 100.0 and random.random() * 100.0 >= target.percent:
            continue
        address = pool.choose(target.upstream)
        if address is None:
            metrics.mirror_requests.labels(route, "no-endpoint").inc()
            continue
        copy = MirrorCopy(reactor, metrics, route, head, timeout)
        tcp: IReactorTCP = reactor
        tcp.connectTCP(address[0], address[1], _CopyFactory(copy), timeout=connect_timeout)
        copies.append(copy)
    return tuple(copies)
