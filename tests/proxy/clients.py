"""
Real-socket clients (and a scriptable raw backend) for data-plane tests.

L{RawClient} speaks HTTP/1.x over a plain socket and parses responses itself,
strictly and without normalising anything, so tests can see exactly what the
proxy put on the wire: the status line, every field as sent, the body's own
framing (chunked stays chunked), and whether the connection was closed.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from tests.support import Manifests

CRLF = b"\r\n"


class ProtocolViolation(AssertionError):
    """What came back is not valid HTTP/1.1 framing."""


@dataclass
class Response:
    """One response as it was on the wire."""

    version: bytes
    status: int
    reason: bytes
    fields: list[tuple[bytes, bytes]]
    raw_body: bytes = b""
    body: bytes = b""
    framing: str = "none"  # "length", "chunked", "close" or "none"
    trailers: list[tuple[bytes, bytes]] = field(default_factory=list)

    def header(self, name: str) -> Optional[str]:
        """The first value of field C{name} (case-insensitive), or None."""
        values = self.headers(name)
        return values[0] if values else None

    def headers(self, name: str) -> list[str]:
        lower = name.lower().encode()
        return [v.decode("latin-1") for n, v in self.fields if n.lower() == lower]

    def has(self, name: str) -> bool:
        return bool(self.headers(name))

    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def connection_tokens(self) -> set[str]:
        return {t.strip().lower() for v in self.headers("Connection") for t in v.split(",") if t.strip()}


def request(
    method: str,
    target: str,
    host: Optional[str] = "echo.test",
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "HTTP/1.1",
    content_length: Optional[bool] = None,
) -> bytes:
    """A request as bytes; Content-Length is added for a body unless told otherwise."""
    lines = [f"{method} {target} {version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines.extend(f"{name}: {value}" for name, value in headers)
    if content_length or (content_length is None and body):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(pieces: Iterable[bytes], trailer: bytes = b"") -> bytes:
    """C{pieces} in chunked framing (each one chunk), with the last-chunk and trailer section."""
    out = []
    for piece in pieces:
        if piece:
            out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
    out.append(b"0\r\n" + trailer + b"\r\n")
    return b"".join(out)


class RawClient:
    """
    One client connection on a raw socket, with a read buffer shared by
    consecutive responses (keep-alive, pipelining).
    """

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buffer = b""
        self.eof = False
        self.reset = False  # the peer ended the connection with RST

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    @property
    def local_port(self) -> int:
        return int(self.sock.getsockname()[1])

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    # -- reading --------------------------------------------------------------

    def _fill(self) -> bool:
        if self.eof:
            return False
        try:
            data = self.sock.recv(262144)
        except ConnectionResetError:
            data = b""
            self.reset = True
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    def read_until(self, marker: bytes) -> bytes:
        """Bytes up to and including C{marker}; the connection closing first is a violation."""
        start = 0
        while True:
            index = self.buffer.find(marker, start)
            if index >= 0:
                end = index + len(marker)
                out, self.buffer = self.buffer[:end], self.buffer[end:]
                return out
            start = max(0, len(self.buffer) - len(marker) + 1)
            if not self._fill():
                raise ProtocolViolation(f"connection closed before {marker!r}; had {self.buffer[:300]!r}")

    def read_exact(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise ProtocolViolation(f"connection closed after {len(self.buffer)} of {size} bytes")
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def read_to_close(self) -> bytes:
        while self._fill():
            pass
        out, self.buffer = self.buffer, b""
        return out

    def read_head(self) -> Response:
        head = self.read_until(CRLF + CRLF)
        lines = head[:-4].split(CRLF)
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolViolation(f"bad status line {lines[0]!r}")
        fields = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or name != name.strip() or not name:
                raise ProtocolViolation(f"bad field line {line!r}")
            fields.append((name, value.strip(b" \t")))
        return Response(parts[0], int(parts[1]), parts[2] if len(parts) > 2 else b"", fields)

    def read_response(self, method: str = "GET", interim: bool = False) -> Response:
        """
        The next response, body framed as RFC 9112 6.3 says (HEAD, 1xx, 204 and
        304 have none).  1xx responses are skipped unless C{interim} is set.
        """
        while True:
            response = self.read_head()
            if response.status >= 200 or interim or response.status == 101:
                break
        if method == "HEAD" or response.status < 200 or response.status in (204, 304):
            return response
        te = ",".join(response.headers("Transfer-Encoding")).lower()
        lengths = response.headers("Content-Length")
        if te:
            if lengths:
                raise ProtocolViolation("both Transfer-Encoding and Content-Length")
            if te.split(",")[-1].strip() != "chunked":
                raise ProtocolViolation(f"unexpected Transfer-Encoding {te!r}")
            self._read_chunked(response)
        elif lengths:
            if len(set(lengths)) != 1:
                raise ProtocolViolation(f"several Content-Length values {lengths}")
            response.framing = "length"
            response.body = response.raw_body = self.read_exact(int(lengths[0]))
        else:
            response.framing = "close"
            response.body = response.raw_body = self.read_to_close()
        return response

    def _read_chunked(self, response: Response) -> None:
        response.framing = "chunked"
        raw = []
        payload = []
        while True:
            line = self.read_until(CRLF)
            raw.append(line)
            size_text = line[:-2].split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolViolation(f"bad chunk size line {line!r}") from None
            if size == 0:
                break
            data = self.read_exact(size + 2)
            if data[-2:] != CRLF:
                raise ProtocolViolation("chunk data not followed by CRLF")
            raw.append(data)
            payload.append(data[:-2])
        while True:
            line = self.read_until(CRLF)
            raw.append(line)
            if line == CRLF:
                break
            name, _, value = line[:-2].partition(b":")
            response.trailers.append((name, value.strip()))
        response.raw_body = b"".join(raw)
        response.body = b"".join(payload)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the server closes (EOF or reset) within C{timeout} with nothing more sent."""
        if self.eof:
            return True
        if self.buffer:
            return False
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1)
        except TimeoutError:
            return False
        except ConnectionResetError:
            self.eof = self.reset = True
            return True
        if data:
            self.buffer += data
            return False
        self.eof = True
        return True

    def still_open(self, wait: float = 0.3) -> bool:
        """Nothing arrives and no close within C{wait}: the connection is idle and open."""
        return not self.closed_by_peer(wait) and not self.buffer

    def exchange(self, method: str, target: str, **kwargs: object) -> Response:
        self.send(request(method, target, **kwargs))  # type: ignore[arg-type]
        return self.read_response(method)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pattern_block(index: int, size: int = 65536) -> bytes:
    """A deterministic block that differs per index (so reordering or loss changes the hash)."""
    seed = hashlib.sha256(b"%d" % index).digest()
    return (seed * (size // len(seed) + 1))[:size]


class ScriptedBackend:
    """
    A tiny threaded TCP server on C{host}; each accepted connection is handed to
    C{handler(sock)} in its own thread.  Counts connections and keeps what the
    handler read in C{received}.
    """

    def __init__(self, handler: Callable[[socket.socket, ScriptedBackend], None], host: str = "127.0.0.1") -> None:
        self.handler = handler
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(64)
        self.host = host
        self.port = int(self.listener.getsockname()[1])
        self.connections = 0
        self.received: list[bytes] = []
        self.lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def _serve(self) -> None:
        while not self._stopped:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._run, args=(sock,), daemon=True).start()

    def _run(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(10)
            self.handler(sock, self)
        except OSError:
            pass
        finally:
            sock.close()

    def record(self, data: bytes) -> None:
        with self.lock:
            self.received.append(data)

    def stop(self) -> None:
        self._stopped = True
        self.listener.close()


class HeldBackend:
    """
    A backend that reads each request and answers it only once the test sets C{released}: the
    test sees the request arrive (L{arrived}, the event a test of what is in flight waits for)
    and decides when it is over, instead of guessing both with sleeps and C{?delay=}.
    """

    def __init__(self, name: str = "held") -> None:
        self.name = name
        self.released = threading.Event()
        self.server = ScriptedBackend(self._handle)

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def _handle(self, sock: socket.socket, server: ScriptedBackend) -> None:
        server.record(read_request_head(sock))
        if self.released.wait(60):
            sock.sendall(b"HTTP/1.1 200 OK\r\nX-Backend: " + self.name.encode() + b"\r\nContent-Length: 2\r\n\r\nok")
        sock.settimeout(60)
        while sock.recv(65536):  # until the proxy closes its side (cut, or done with the connection)
            pass

    def arrived(self) -> bool:
        """Whether a request has reached this backend (through the proxy)."""
        with self.server.lock:
            return bool(self.server.received)

    def stop(self) -> None:
        self.released.set()
        self.server.stop()


def read_request_head(sock: socket.socket, limit: int = 65536) -> bytes:
    """Read from C{sock} until a blank line (for scripted backends)."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def service_per_endpoint(name: str, endpoints: Sequence[tuple[str, int]], namespace: str = "default", ready: bool = True) -> list[dict]:
    """
    A selector-less Service ("http" on port 80) with one EndpointSlice per
    endpoint, each carrying that endpoint's own port.

    L{tests.support.Manifests.service} puts every address in one slice at the
    first endpoint's port, which is only right when all endpoints share a
    port; echo backends on different loopback addresses usually do not.
    """
    objects: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }
    ]
    for index, (host, port) in enumerate(endpoints):
        objects.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": f"{name}-{index}", "namespace": namespace, "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": port}],
                "endpoints": [{"addresses": [host], "conditions": {"ready": ready}}],
            }
        )
    return objects


def route_each(manifests: Manifests, name: str, host: str, endpoints: Sequence[tuple[str, int]], ready: bool = True) -> None:
    """Like C{Manifests.route}, but every endpoint keeps its own port (L{service_per_endpoint})."""
    manifests.write(f"{name}.yaml", *service_per_endpoint(name, endpoints, ready=ready), manifests.ingress(name, host, name))


class WSClient:
    """
    A WebSocket client on a raw socket, framed by wsproto: the handshake goes
    through the proxy like any request, then frames flow through its tunnel.
    """

    def __init__(self, port: int, host: str, target: str = "/ws", timeout: float = 10.0, extra_headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import AcceptConnection, RejectConnection
        from wsproto.events import Request as WSRequest

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list[object] = []
        self.closed = False
        self.sock.sendall(self.ws.send(WSRequest(host=host, target=target, extra_headers=list(extra_headers))))
        event = self.next_event()
        if isinstance(event, RejectConnection):
            raise AssertionError(f"WebSocket handshake rejected with {event.status_code}: {event.headers}")
        assert isinstance(event, AcceptConnection), event
        self.accept = event

    def __enter__(self) -> WSClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def _receive(self) -> None:
        data = self.sock.recv(262144)
        if not data:
            self.closed = True
        self.ws.receive_data(data or None)
        self.events.extend(self.ws.events())

    def next_event(self) -> object:
        while not self.events:
            if self.closed:
                raise AssertionError("connection closed while waiting for a WebSocket event")
            self._receive()
        return self.events.pop(0)

    def send(self, event: object) -> None:
        self.sock.sendall(self.ws.send(event))  # type: ignore[arg-type]

    def send_text(self, text: str) -> None:
        from wsproto.events import TextMessage

        self.send(TextMessage(data=text))

    def send_bytes(self, data: bytes) -> None:
        from wsproto.events import BytesMessage

        self.send(BytesMessage(data=data))

    def receive_message(self) -> str | bytes:
        """The next whole message (reassembling fragments); control frames are not expected."""
        from wsproto.events import Message, TextMessage

        parts: list = []
        while True:
            event = self.next_event()
            assert isinstance(event, Message), f"expected a message, got {event!r}"
            parts.append(event.data)
            if event.message_finished:
                return "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)

    def wait_closed(self) -> bool:
        """Read until the socket closes; True if it did (before the socket timeout)."""
        while not self.closed:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return True
            if not data:
                self.closed = True
                break
            self.ws.receive_data(data)
            self.events.extend(self.ws.events())
        return True
