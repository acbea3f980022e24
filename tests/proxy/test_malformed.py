"""
Malformed, hostile and slow requests against a running C{twistd -n ingress},
through real sockets.

Every refused request must get its status (400, or 408/413/414/431/501/505
where that is the answer), with C{Connection: close}, and the server must
then close the connection: nothing after the one response, no second
(smuggled) response, no hanging socket.  The proxy must go on serving normal
requests on new connections.
"""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Optional

import pytest

from tests.support import EchoBackend, Manifests, Twingress, accept_in_threads

HOST = b"echo.test"


# -- a raw HTTP/1.1 exchange


@dataclass
class Reply:
    """What came back on one connection: the first response, anything after it, and how it ended."""

    raw: bytes
    status: int = 0
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: bytes = b""
    rest: bytes = b""
    ending: str = ""  # "eof" (the server closed), "reset", or "timeout"

    def header(self, name: str) -> Optional[str]:
        values = self.headers.get(name.lower())
        return ", ".join(values) if values else None

    @property
    def closed(self) -> bool:
        return self.ending in ("eof", "reset")

    def __str__(self) -> str:
        return f"status {self.status}, ended by {self.ending}, raw {self.raw[:300]!r}"


def parse_reply(raw: bytes, ending: str) -> Reply:
    reply = Reply(raw=raw, ending=ending)
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        return reply
    lines = raw[:end].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return reply
    reply.status = int(parts[1])
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        reply.headers.setdefault(name.decode("latin-1").strip().lower(), []).append(value.decode("latin-1").strip())
    length = int(reply.header("content-length") or 0)
    reply.body = raw[end + 4 : end + 4 + length]
    reply.rest = raw[end + 4 + length :]
    return reply


def exchange(port: int, *parts: bytes, pause: float = 0.0, timeout: float = 5.0) -> Reply:
    """
    Send C{parts} (with C{pause} between them) on a new connection and read
    until the server closes it or C{timeout} passes without a byte.

    Sending stops once the server has answered (or closed): what it answered
    before the rest arrived is what counts.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        for index, part in enumerate(parts):
            if index and pause and select.select([s], [], [], pause)[0]:
                break  # already answered: the rest would only hit a closed connection
            try:
                s.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break
        chunks = []
        ending = "eof"
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                ending = "timeout"
                break
            except ConnectionResetError:
                ending = "reset"
                break
            if not chunk:
                break
            chunks.append(chunk)
    return parse_reply(b"".join(chunks), ending)


def good_request(port: int, path: bytes = b"/after") -> Reply:
    return exchange(port, b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, HOST))


def assert_refused(reply: Reply, status: int) -> None:
    """One error response with C{Connection: close}, then the server closed the connection."""
    assert reply.status == status, str(reply)
    assert (reply.header("connection") or "").lower() == "close", str(reply)
    assert reply.body.startswith(b"%d " % status), str(reply)
    assert reply.rest == b"", f"bytes after the refusal: {reply.rest[:200]!r}"
    assert reply.ending == "eof", f"the server did not close cleanly after the response: {reply}"


def assert_still_serves(proxy: Twingress) -> None:
    reply = good_request(proxy.http_port)
    assert reply.status == 200, str(reply)
    assert reply.header("x-backend") in ("pod-a", "pod-b"), str(reply)
    assert proxy.process.poll() is None


# -- fixtures


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    """One twingress for the table of malformed requests: every case must leave it serving."""
    directory = tmp_path_factory.mktemp("malformed")
    manifests = Manifests(directory / "manifests")
    manifests.path.mkdir()
    route_to_both(manifests, echo_pair)
    process = Twingress(manifests.path)
    yield process
    process.stop()


def route_to_both(manifests: Manifests, pair: tuple[EchoBackend, EchoBackend]) -> None:
    """echo.test to both backends: one EndpointSlice each, since they listen on different ports."""
    service, first_slice = manifests.service("echo", [pair[0].address])
    _, second_slice = manifests.service("echo", [pair[1].address])
    second_slice["metadata"]["name"] = "echo-2"
    manifests.write("echo.yaml", service, first_slice, second_slice, Manifests.ingress("echo", HOST.decode(), "echo"))


# -- one malformed request each


def req(*lines: bytes, body: bytes = b"") -> bytes:
    return b"".join(line + b"\r\n" for line in lines) + b"\r\n" + body


H = b"Host: echo.test"

MALFORMED = [
    ("cl-te-conflict", req(b"POST / HTTP/1.1", H, b"Content-Length: 5", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"), 400),
    ("two-different-content-lengths", req(b"POST / HTTP/1.1", H, b"Content-Length: 3", b"Content-Length: 5", body=b"hello"), 400),
    ("non-numeric-content-length", req(b"POST / HTTP/1.1", H, b"Content-Length: five", body=b"hello"), 400),
    ("negative-content-length", req(b"POST / HTTP/1.1", H, b"Content-Length: -5", body=b"hello"), 400),
    ("te-not-ending-in-chunked", req(b"POST / HTTP/1.1", H, b"Transfer-Encoding: chunked, gzip", body=b"0\r\n\r\n"), 400),
    ("invalid-chunk-size", req(b"POST / HTTP/1.1", H, b"Transfer-Encoding: chunked", body=b"zz\r\nhello\r\n0\r\n\r\n"), 400),
    ("chunk-data-too-long", req(b"POST / HTTP/1.1", H, b"Transfer-Encoding: chunked", body=b"3\r\nhello\r\n0\r\n\r\n"), 400),
    ("obs-fold", req(b"GET / HTTP/1.1", H, b"X-Folded: one", b" two"), 400),
    ("bare-lf-line-endings", b"GET / HTTP/1.1\nHost: echo.test\n\n", 400),
    ("bare-lf-one-line", b"GET / HTTP/1.1\r\nHost: echo.test\nX-A: b\r\n\r\n", 400),
    ("bare-cr", req(b"GET / HTTP/1.1", H, b"X-A: b\rX-B: c"), 400),
    ("nul-in-header", req(b"GET / HTTP/1.1", H, b"X-A: b\x00c"), 400),
    ("control-char-in-header", req(b"GET / HTTP/1.1", H, b"X-A: \x1b[2J"), 400),
    ("space-before-colon", req(b"GET / HTTP/1.1", b"Host : echo.test"), 400),
    ("invalid-method", req(b"G{}T / HTTP/1.1", H), 400),
    ("missing-host", req(b"GET / HTTP/1.1"), 400),
    ("two-hosts", req(b"GET / HTTP/1.1", H, b"Host: other.test"), 400),
    # RFC 9110 7.2: an invalid Host value is a 400, not a lookup of whatever part of it looks like a host
    ("host-with-userinfo-after-port", req(b"GET / HTTP/1.1", b"Host: echo.test:80@evil.test"), 400),
    ("host-with-non-numeric-port", req(b"GET / HTTP/1.1", b"Host: echo.test:evil"), 400),
    ("http-2.0", req(b"GET / HTTP/2.0", H), 505),
    ("unknown-transfer-coding", req(b"POST / HTTP/1.1", H, b"Transfer-Encoding: foo, chunked", body=b"0\r\n\r\n"), 501),
    ("body-over-max", req(b"POST / HTTP/1.1", H, b"Content-Length: 2000000000", body=b"x" * 100), 413),
    ("request-line-20k", req(b"GET /" + b"a" * 20000 + b" HTTP/1.1", H), 414),
    ("header-section-40k", req(b"GET / HTTP/1.1", H, *[b"X-Filler-%d: %s" % (i, b"v" * 100) for i in range(400)]), 431),
    ("one-40k-header", req(b"GET / HTTP/1.1", H, b"X-Big: " + b"v" * 40000), 431),
    ("too-many-fields", req(b"GET / HTTP/1.1", H, *[b"X-F%d: v" % i for i in range(150)]), 431),
]


@pytest.mark.parametrize("data, status", [(d, s) for _, d, s in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_request_is_refused_and_closed(shared: Twingress, data: bytes, status: int) -> None:
    reply = exchange(shared.http_port, data)
    assert_refused(reply, status)
    assert_still_serves(shared)


@pytest.mark.parametrize(
    "parts, status",
    [
        ((b"GET /" + b"a" * 10000, b"a" * 10000 + b" HTTP/1.1\r\nHost: echo.test\r\n\r\n"), 414),
        ((b"GET / HTTP/1.1\r\nHost: echo.test\r\n" + b"X-A: b\r\n" * 2000, b"X-A: b\r\n" * 3000 + b"\r\n"), 431),
        ((b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-A: b", b"\nX-B: c\r\n\r\n"), 400),
        ((b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-A: b\r", b"X-B: c\r\n\r\n"), 400),
    ],
    ids=["request-line-in-pieces", "header-section-in-pieces", "bare-lf-across-reads", "bare-cr-across-reads"],
)
def test_malformed_head_sent_in_pieces(shared: Twingress, parts: tuple[bytes, ...], status: int) -> None:
    """The same refusals when the head arrives over several reads (the incomplete-head checks)."""
    reply = exchange(shared.http_port, *parts, pause=0.2)
    assert_refused(reply, status)
    assert_still_serves(shared)


@pytest.mark.parametrize(
    "garbage",
    [
        random.Random(7).randbytes(2048) + b"\r\n\r\n",
        # A TLS ClientHello on the plain-HTTP port: no CR or LF anywhere, cannot be a request line.
        bytes.fromhex("160301007a0100007603035f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f80900002cc02bc02fc02cc030cca9cca8c009c013c00ac014009c009d002f0035c012000a1301130213030100002100000010000e00000b6563686f2e7465737400170000ff01000100"),
        b"\x00" * 64,
    ],
    ids=["random-bytes", "tls-client-hello", "nul-bytes"],
)
def test_garbage_binary_request_is_400(shared: Twingress, garbage: bytes) -> None:
    """Bytes that cannot begin a request line are refused at once, not after the header timeout."""
    reply = exchange(shared.http_port, garbage, timeout=5.0)
    assert_refused(reply, 400)
    assert_still_serves(shared)


def test_refused_request_is_counted(shared: Twingress) -> None:
    def malformed_400() -> float:
        text = shared.admin("/metrics")[1].decode()
        for line in text.splitlines():
            if line.startswith('twingress_http_malformed_requests_total{status="400"}'):
                return float(line.split()[-1])
        return 0.0

    before = malformed_400()
    for _ in range(3):
        assert_refused(exchange(shared.http_port, req(b"GET / HTTP/1.1", H, b"X-A: \x00")), 400)
    assert malformed_400() == before + 3


# -- slow heads


@pytest.fixture
def impatient(manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    """twingress with a one-second header timeout."""
    route_to_both(manifests, echo_pair)
    process = Twingress(manifests.path, "--header-timeout", "1")
    yield process
    process.stop()


@pytest.mark.parametrize(
    "partial",
    [b"GET / HTTP/1.1\r\nHost: echo.test\r\n", b"G", b"GET / HTTP/1.1\r\nHost: echo.test\r\n\r"],
    ids=["fields-without-blank-line", "one-byte", "half-blank-line"],
)
def test_slow_head_gets_408(impatient: Twingress, partial: bytes) -> None:
    started = time.monotonic()
    reply = exchange(impatient.http_port, partial, timeout=6.0)
    waited = time.monotonic() - started
    assert_refused(reply, 408)
    assert waited >= 0.5, f"408 after {waited:.2f}s, before the header timeout"
    assert_still_serves(impatient)


def test_trickled_head_is_not_kept_alive_by_each_byte(impatient: Twingress) -> None:
    """A slowloris sending one byte at a time still gets 408: the timeout is for the whole head."""
    head = b"GET / HTTP/1.1\r\nHost: echo.test\r\nX-Slow: " + b"z" * 100
    received = b""
    with socket.create_connection(("127.0.0.1", impatient.http_port), timeout=5) as s:
        for byte in head:
            if select.select([s], [], [], 0.25)[0]:
                break  # answered
            s.sendall(bytes([byte]))
        else:
            pytest.fail("the whole head was trickled over 30 s without a 408")
        try:
            while chunk := s.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    assert_refused(parse_reply(received, "eof"), 408)
    assert_still_serves(impatient)


def test_idle_connection_is_closed_without_a_response(impatient: Twingress) -> None:
    """A connection that never sends a byte is closed after the header timeout, with nothing written."""
    reply = exchange(impatient.http_port, timeout=6.0)
    assert reply.raw == b"" and reply.closed, str(reply)


# -- configured limits


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    """twingress with small limits, to check each option is enforced at its exact value."""
    manifests = Manifests(tmp_path_factory.mktemp("strict") / "manifests")
    manifests.path.mkdir()
    route_to_both(manifests, echo_pair)
    process = Twingress(
        manifests.path,
        "--max-request-line", "100",
        "--max-header-size", "1k",
        "--max-header-fields", "10",
        "--max-body-size", "1k",
    )
    yield process
    process.stop()


HC = b"Host: echo.test\r\nConnection: close"  # two fields: every answer ends its connection


def head_of(line: bytes, total: int) -> bytes:
    """A head starting with C{line}, Host and Connection, padded by one field to exactly C{total} bytes."""
    start = line + b"\r\n" + HC + b"\r\nX-Pad: "
    return start + b"p" * (total - len(start) - 4) + b"\r\n\r\n"


def chunked(size: int) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (size, b"c" * size)


LIMITS = [
    ("request-line-at-limit", req(b"GET /" + b"a" * 86 + b" HTTP/1.1", HC), 200),
    ("request-line-over-limit", req(b"GET /" + b"a" * 87 + b" HTTP/1.1", HC), 414),
    ("head-at-limit", head_of(b"GET / HTTP/1.1", 1024), 200),
    ("head-over-limit", head_of(b"GET / HTTP/1.1", 1025), 431),
    ("fields-at-limit", req(b"GET / HTTP/1.1", HC, *[b"X-F%d: v" % i for i in range(8)]), 200),
    ("fields-over-limit", req(b"GET / HTTP/1.1", HC, *[b"X-F%d: v" % i for i in range(9)]), 431),
    ("length-at-limit", req(b"POST / HTTP/1.1", HC, b"Content-Length: 1024", body=b"b" * 1024), 200),
    ("length-over-limit", req(b"POST / HTTP/1.1", HC, b"Content-Length: 1025", body=b"b" * 1025), 413),
    ("chunked-at-limit", req(b"POST / HTTP/1.1", HC, b"Transfer-Encoding: chunked", body=chunked(1024)), 200),
    ("chunked-over-limit", req(b"POST / HTTP/1.1", HC, b"Transfer-Encoding: chunked", body=chunked(1025)), 413),
]


@pytest.mark.parametrize("data, status", [(d, s) for _, d, s in LIMITS], ids=[i for i, _, _ in LIMITS])
def test_configured_limits_are_enforced_at_their_value(strict: Twingress, data: bytes, status: int) -> None:
    """--max-request-line 100, --max-header-size 1k, --max-header-fields 10, --max-body-size 1k."""
    reply = exchange(strict.http_port, data)
    if status == 200:
        assert reply.status == 200 and reply.closed, str(reply)
        assert reply.header("x-backend") in ("pod-a", "pod-b"), str(reply)
    else:
        assert_refused(reply, status)
    assert_still_serves(strict)


# -- request smuggling


class RecordingBackend:
    """
    A raw HTTP backend that records every byte it receives and answers each
    head it sees with a small 200: what an application behind the proxy saw.
    """

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.received: list[bytes] = []
        self.lock = threading.Lock()
        accept_in_threads(self.listener, self._serve)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def seen(self) -> bytes:
        with self.lock:
            return b"".join(self.received)

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with self.lock:
                    self.received.append(data)
                buffer += data
                while (end := buffer.find(b"\r\n\r\n")) >= 0:
                    buffer = buffer[end + 4 :]
                    body = b"recorded\n"
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Backend: recorder\r\n\r\n%s" % (len(body), body))

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def recorder(manifests: Manifests) -> Iterator[tuple[Twingress, RecordingBackend]]:
    backend = RecordingBackend()
    manifests.route("rec", "rec.test", [backend.address])
    process = Twingress(manifests.path)
    yield process, backend
    process.stop()
    backend.close()


SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: rec.test\r\n\r\n"
SMUGGLED_HEX = b"%x" % len(SMUGGLED)
SMUGGLING = [
    ("cl0-te-chunked", req(b"POST /front HTTP/1.1", b"Host: rec.test", b"Content-Length: 0", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n" + SMUGGLED)),
    ("te-chunked-cl", req(b"POST /front HTTP/1.1", b"Host: rec.test", b"Transfer-Encoding: chunked", b"Content-Length: 4", body=SMUGGLED_HEX + b"\r\n" + SMUGGLED + b"\r\n0\r\n\r\n")),
    ("cl-te-obfuscated", req(b"POST /front HTTP/1.1", b"Host: rec.test", b"Content-Length: 5", b"Transfer-Encoding: xchunked", body=b"0\r\n\r\n" + SMUGGLED)),
    ("te-space-before-colon", req(b"POST /front HTTP/1.1", b"Host: rec.test", b"Transfer-Encoding : chunked", body=b"0\r\n\r\n" + SMUGGLED)),
    ("te-obs-fold", req(b"POST /front HTTP/1.1", b"Host: rec.test", b"Transfer-Encoding:", b" chunked", body=b"0\r\n\r\n" + SMUGGLED)),
    ("duplicate-cl", req(b"POST /front HTTP/1.1", b"Host: rec.test", b"Content-Length: 0", b"Content-Length: %d" % len(SMUGGLED), body=SMUGGLED)),
    ("te-bare-lf", b"POST /front HTTP/1.1\r\nHost: rec.test\r\nTransfer-Encoding: chunked\nContent-Length: 0\r\n\r\n0\r\n\r\n" + SMUGGLED),
    # Refused in the body: the (valid) head may already be upstream, the smuggled request never is.
    ("chunk-size-overflow", req(b"POST /body HTTP/1.1", b"Host: rec.test", b"Transfer-Encoding: chunked", body=b"10000000000000000\r\n" + SMUGGLED + b"\r\n0\r\n\r\n")),
    ("chunk-size-invalid", req(b"POST /body HTTP/1.1", b"Host: rec.test", b"Transfer-Encoding: chunked", body=b"2a;\r\n" + SMUGGLED + b"\r\n0\r\n\r\n")),
]


@pytest.mark.parametrize("data", [d for _, d in SMUGGLING], ids=[i for i, _ in SMUGGLING])
def test_request_smuggling_is_refused_and_never_reaches_the_backend(recorder: tuple[Twingress, RecordingBackend], data: bytes) -> None:
    proxy, backend = recorder
    reply = exchange(proxy.http_port, data)
    assert_refused(reply, 400)
    # The backend is reachable (a normal request gets there) ...
    control = exchange(proxy.http_port, b"GET /control HTTP/1.1\r\nHost: rec.test\r\nConnection: close\r\n\r\n")
    assert control.status == 200 and control.header("x-backend") == "recorder", str(control)
    seen = backend.seen()
    assert b"GET /control " in seen
    # ... but never saw the smuggled request (nor its carrier).
    assert b"/smuggled" not in seen
    assert b"/front" not in seen


# -- many bad clients at once


def test_200_parallel_garbage_clients_then_a_good_request(shared: Twingress) -> None:
    results: list[Optional[Reply]] = [None] * 200
    errors: list[BaseException] = []
    start = threading.Barrier(200, timeout=30)

    def client(index: int) -> None:
        try:
            garbage = random.Random(index).randbytes(64 + index * 7) + b"\r\n\r\n"
            start.wait()
            results[index] = exchange(shared.http_port, garbage, timeout=10.0)
        except BaseException as error:  # noqa: B902 - reported below
            errors.append(error)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[:3]
    statuses = [r.status if r is not None else None for r in results]
    assert statuses == [400] * 200, {s: statuses.count(s) for s in set(statuses)}
    assert all(r is not None and r.closed for r in results)
    assert_still_serves(shared)


def test_pipelined_request_after_a_refused_one_is_not_served(shared: Twingress) -> None:
    """After a refusal nothing more on that connection is read: one response, then close."""
    data = req(b"GET / HTTP/1.1", H, b"X-A: \x01") + req(b"GET /second HTTP/1.1", H)
    reply = exchange(shared.http_port, data)
    assert_refused(reply, 400)
    assert b"HTTP/1.1 200" not in reply.raw


def test_good_request_before_a_malformed_one_is_answered_first(shared: Twingress) -> None:
    data = req(b"GET /first HTTP/1.1", H) + req(b"GET / HTTP/1.1", H, b"X-A: \x00")
    with socket.create_connection(("127.0.0.1", shared.http_port), timeout=5) as s:
        s.sendall(data)
        raw = b""
        try:
            while chunk := s.recv(65536):
                raw += chunk
        except (TimeoutError, ConnectionResetError):
            raw += b"<no close>"
    first = parse_reply(raw, "eof")
    assert first.status == 200 and b'"path": "/first"' in first.body, raw[:300]
    second = parse_reply(first.rest, "eof")
    assert second.status == 400 and (second.header("connection") or "").lower() == "close", raw[-300:]
    assert second.rest == b""
