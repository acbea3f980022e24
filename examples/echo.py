"""
A small echo backend: the demo's pods and the tests' real upstream.  Not part of the
product (it is not in the C{ingress} package or the image); it needs only Twisted.

C{GET /anything} answers JSON with the method, path, Host, protocol version,
headers and the backend's own name.  Query parameters make it useful for
tests: C{status=N} sets the status, C{size=N} streams N bytes
(C{chunked=1}: without Content-Length), C{delay=S} waits before answering;
C{on=NAME} keeps C{status} and C{delay} to the backend of that name (the
others answer 200 at once: one failing pod among healthy ones).
A request body is hashed while it streams in (C{body_sha256},
C{body_bytes}).  C{/ws} is a WebSocket echo.

Run it with C{python examples/echo.py --listen tcp:8081 --name pod-a}.  With
C{--protocol tcp} or C{udp} it is a stream backend instead: every read or
datagram comes back after C{NAME: } (the stream example's pods).
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any, Optional

from twisted.internet import reactor as default_reactor
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import DatagramProtocol, Factory, Protocol
from twisted.python import usage
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from twisted.web.websocket import WebSocketResource, WebSocketTransport
from zope.interface import implementer

_BLOCK = b"x" * 65536


@implementer(IPushProducer)
class _ByteStream:
    """Writes C{size} bytes to a request, pausing when the client side is full."""

    def __init__(self, request: Request, size: int) -> None:
        self.request = request
        self.left = size
        self.paused = False
        self.stopped = False

    def start(self) -> None:
        self.request.registerProducer(self, True)
        self._write()

    def _write(self) -> None:
        while self.left > 0 and not self.paused and not self.stopped:
            block = _BLOCK if self.left >= len(_BLOCK) else _BLOCK[: self.left]
            self.left -= len(block)
            self.request.write(block)
        if self.left <= 0 and not self.stopped:
            self.stopped = True
            self.request.unregisterProducer()
            self.request.finish()

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self._write()

    def stopProducing(self) -> None:
        self.stopped = True


class EchoResource(Resource):
    """Answers every path (except C{/ws}) with what it saw."""

    isLeaf = True

    def __init__(self, name: str, reactor: object = default_reactor) -> None:
        super().__init__()
        self.name = name
        self.reactor = reactor

    def render(self, request: Request) -> bytes | int:
        args = _query(request)
        if args.get("on", self.name) != self.name:
            args.pop("status", None)
            args.pop("delay", None)
        delay = float(args.get("delay", "0") or 0)
        if delay:
            call = self.reactor.callLater(delay, self._answer, request, args)  # type: ignore[attr-defined]
            request.notifyFinish().addErrback(lambda _: call.cancel() if call.active() else None)
            return NOT_DONE_YET
        return self._answer(request, args, direct=True)

    def _answer(self, request: Request, args: dict[str, str], direct: bool = False) -> bytes | int:
        request.setResponseCode(int(args.get("status", "200")))
        request.setHeader(b"x-backend", self.name.encode())
        if "size" in args:
            size = int(args["size"])
            request.setHeader(b"content-type", b"application/octet-stream")
            if args.get("chunked") != "1":
                request.setHeader(b"content-length", str(size).encode())
            _ByteStream(request, size).start()
            return NOT_DONE_YET
        body = json.dumps(self.describe(request)).encode() + b"\n"
        request.setHeader(b"content-type", b"application/json")
        if args.get("chunked") != "1":
            request.setHeader(b"content-length", str(len(body)).encode())
        if direct:
            return body
        request.write(body)
        request.finish()
        return NOT_DONE_YET

    def describe(self, request: Request) -> dict[str, object]:
        """The JSON document: what the proxy delivered, as this backend saw it."""
        digest = hashlib.sha256()
        size = 0
        content = request.content
        content.seek(0)
        while block := content.read(1 << 20):
            digest.update(block)
            size += len(block)
        return {
            "name": self.name,
            "method": request.method.decode(),
            "path": request.path.decode(),
            "uri": request.uri.decode(),
            "host": (request.getHeader(b"host") or b"").decode(),
            "protocol": request.clientproto.decode(),
            "headers": {k.decode(): [v.decode() for v in vs] for k, vs in request.requestHeaders.getAllRawHeaders()},
            "body_bytes": size,
            "body_sha256": digest.hexdigest(),
        }


def _query(request: Request) -> dict[str, str]:
    query = request.uri.partition(b"?")[2]
    out: dict[str, str] = {}
    for pair in query.split(b"&"):
        key, _, value = pair.partition(b"=")
        if key:
            out[key.decode()] = value.decode()
    return out


class _EchoSocket:
    """WebSocket echo: every message comes back unchanged."""

    def __init__(self) -> None:
        self.transport: Optional[WebSocketTransport] = None

    def negotiationStarted(self, transport: WebSocketTransport) -> None:
        self.transport = transport

    def negotiationFinished(self) -> None:
        pass

    def pongReceived(self, payload: bytes) -> None:
        pass

    def textMessageReceived(self, message: str) -> None:
        assert self.transport is not None
        self.transport.sendTextMessage(message)

    def bytesMessageReceived(self, data: bytes | bytearray) -> None:
        assert self.transport is not None
        self.transport.sendBytesMessage(bytes(data))

    def connectionLost(self, reason: Failure) -> None:
        pass


class _EchoSocketFactory:
    def buildProtocol(self, request: Request) -> _EchoSocket:
        return _EchoSocket()


class _Root(Resource):
    def __init__(self, name: str, reactor: object) -> None:
        super().__init__()
        self.echo = EchoResource(name, reactor)
        self.ws = WebSocketResource(_EchoSocketFactory())  # type: ignore[arg-type]

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path == b"ws" and request.requestHeaders.hasHeader(b"upgrade"):
            return self.ws
        request.postpath.insert(0, path)
        request.prepath.pop()
        return self.echo


def make_site(name: str, reactor: object = default_reactor) -> Site:
    """The echo backend as a Site, for tests and the demo."""
    site = Site(_Root(name, reactor))
    site.displayTracebacks = False
    site.log = lambda request: None  # type: ignore[method-assign]
    return site


@implementer(IHalfCloseableProtocol)
class _StreamEcho(Protocol):
    """
    TCP: every read comes back as C{NAME: data}.  Half-closeable: when the client ends its side
    (C{echo hello | nc}, socat, a proxy relaying a FIN), the replies already written are sent and
    then the connection closes.  Without it Twisted closes at once on EOF, dropping a reply still
    queued when the data and the FIN arrive in one read.
    """

    def __init__(self, name: bytes) -> None:
        self.name = name

    def dataReceived(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(self.name + b": " + data)

    def readConnectionLost(self) -> None:
        assert self.transport is not None
        self.transport.loseConnection()  # after the queued replies

    def writeConnectionLost(self) -> None:
        pass


class _DatagramEcho(DatagramProtocol):
    """UDP: every datagram comes back as C{NAME: data}, to its sender."""

    def __init__(self, name: bytes) -> None:
        self.name = name

    def datagramReceived(self, datagram: bytes, address: Any) -> None:
        assert self.transport is not None
        self.transport.write(self.name + b": " + datagram, address)


class Options(usage.Options):
    optParameters = [
        ["listen", "l", "tcp:8081:interface=127.0.0.1", "Endpoint description to listen on (udp:PORT:interface=ADDRESS for --protocol udp)."],
        ["name", "n", "echo", "Name reported in every answer."],
        ["protocol", "p", "http", "http (JSON about each request), tcp or udp (every read or datagram back after 'NAME: ')."],
        ["ready", None, None, "A file to write once listening ('ok') or not ('failed: why'), for scripts that start several backends."],
    ]


def _listen(options: Options) -> Deferred[Any]:
    name = options["name"]
    if options["protocol"] == "udp":
        kind, _, rest = options["listen"].partition(":")
        port, *keywords = rest.split(":")
        interface = dict(k.partition("=")[::2] for k in keywords).get("interface", "")
        return maybeDeferred(default_reactor.listenUDP, int(port), _DatagramEcho(name.encode()), interface=interface)  # type: ignore[attr-defined]  # the global reactor is an IReactorUDP
    factory = Factory.forProtocol(lambda: _StreamEcho(name.encode())) if options["protocol"] == "tcp" else make_site(name)
    return serverFromString(default_reactor, options["listen"]).listen(factory)


def main(argv: Optional[list[str]] = None) -> None:
    """Listen, or exit 1 with one line (and that line in the --ready file): a busy port is not a traceback."""
    options = Options()
    options.parseOptions(argv if argv is not None else sys.argv[1:])
    failed: list[str] = []

    def report(outcome: str) -> None:
        if options["ready"]:
            with open(options["ready"], "w") as ready:
                ready.write(outcome + "\n")

    def cannot(failure: Failure) -> None:
        why = getattr(failure.value, "socketError", None) or failure.getErrorMessage()  # CannotListenError's own text repeats the address
        failed.append(f"the backend {options['name']} cannot listen on {options['listen']}: {why}")
        report(f"failed: {failed[0]}")
        default_reactor.stop()  # type: ignore[attr-defined]  # the global reactor is an IReactorCore

    default_reactor.callWhenRunning(lambda: _listen(options).addCallbacks(lambda _: report("ok"), cannot))  # type: ignore[attr-defined]  # the global reactor is an IReactorCore
    default_reactor.run()  # type: ignore[attr-defined]  # the global reactor is an IReactorCore
    if failed:
        if not options["ready"]:
            print(f"{sys.argv[0]}: {failed[0]}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
