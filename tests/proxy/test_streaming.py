"""
Bodies stream through the proxy with flat memory, in both directions and
against a slow reader: the proxy's resident set (sampled from /proc while the
bytes flow) must not grow with the size of what passes through it.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.proxy.clients import RawClient, pattern_block, request, route_each
from tests.support import EchoBackend, Manifests, Twingress

MB = 1 << 20
PIECE = 64 * 1024
GROWTH_LIMIT = 20 * MB


class RSSSampler:
    """Samples a twingress process's RSS every few milliseconds in a thread."""

    def __init__(self, proxy: Twingress, interval: float = 0.02) -> None:
        self.proxy = proxy
        self.interval = interval
        self.baseline = proxy.rss_bytes()
        self.peak = self.baseline
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RSSSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        value = self.proxy.rss_bytes()
        self.peak = max(self.peak, value)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    @property
    def growth(self) -> int:
        return self.peak - self.baseline

    def report(self, what: str) -> str:
        return f"{what}: RSS {self.baseline / MB:.1f} MB -> peak {self.peak / MB:.1f} MB (+{self.growth / MB:.2f} MB, {self.samples} samples)"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    manifests = Manifests(tmp_path_factory.mktemp("manifests"))
    route_each(manifests, "big", "big.test", [echo_pair[0].address])
    proxy = Twingress(manifests.path)
    # warm up: buffers, pooled connection, code paths
    with RawClient(proxy.http_port) as client:
        assert len(client.exchange("GET", f"/warm?size={4 * MB}", host="big.test").body) == 4 * MB
        assert client.exchange("POST", "/warm", host="big.test", body=b"w" * MB).json()["body_bytes"] == MB
    yield proxy
    proxy.stop()


def expected_x_digest(size: int) -> str:
    digest = hashlib.sha256()
    block = b"x" * PIECE
    for _ in range(size // PIECE):
        digest.update(block)
    digest.update(b"x" * (size % PIECE))
    return digest.hexdigest()


def download(sock: socket.socket, size: int, sampler: RSSSampler, initial: bytes = b"", slow_seconds: float = 0.0) -> tuple[int, str]:
    """Read a C{size}-byte body in pieces (slowly at first if asked); returns its length and hash."""
    digest = hashlib.sha256(initial)
    got = len(initial)
    slow_until = time.monotonic() + slow_seconds
    while got < size:
        if time.monotonic() < slow_until:
            data = sock.recv(16 * 1024)
            time.sleep(0.05)  # about 300 KB/s: far slower than the backend can send
        else:
            data = sock.recv(PIECE)
        if not data:
            break
        digest.update(data)
        got += len(data)
    return got, digest.hexdigest()


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(PIECE)
        assert chunk, f"closed before a response head: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def test_100mb_upload_streams_with_flat_memory(big: Twingress) -> None:
    size = 100 * MB
    blocks = [pattern_block(i, PIECE) for i in range(16)]
    digest = hashlib.sha256()
    with RawClient(big.http_port, timeout=60) as client, RSSSampler(big) as sampler:
        client.send(request("POST", "/upload", host="big.test", headers=[("Content-Length", str(size))], content_length=False))
        for i in range(size // PIECE):
            block = blocks[i % len(blocks)]
            digest.update(block)
            client.send(block)
        response = client.read_response("POST")
        sampler.sample()
    print(sampler.report("100 MB upload"))
    assert response.status == 200
    echoed = response.json()
    assert echoed["body_bytes"] == size
    assert echoed["body_sha256"] == digest.hexdigest()
    assert sampler.growth < GROWTH_LIMIT, sampler.report("100 MB upload")


def test_100mb_download_streams_with_flat_memory(big: Twingress) -> None:
    size = 100 * MB
    with socket.create_connection(("127.0.0.1", big.http_port), timeout=60) as sock, RSSSampler(big) as sampler:
        sock.sendall(request("GET", f"/download?size={size}", host="big.test"))
        head, rest = read_head(sock)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"\r\ncontent-length: %d" % size in head.lower()
        got, digest = download(sock, size, sampler, rest)
        sampler.sample()
    print(sampler.report("100 MB download"))
    assert got == size
    assert digest == expected_x_digest(size)
    assert sampler.growth < GROWTH_LIMIT, sampler.report("100 MB download")


def test_slow_reader_gets_backpressure_not_buffering(big: Twingress) -> None:
    size = 50 * MB
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # keep the kernel's share small
    sock.settimeout(60)
    sock.connect(("127.0.0.1", big.http_port))
    with sock, RSSSampler(big) as sampler:
        sock.sendall(request("GET", f"/slow?size={size}", host="big.test"))
        head, rest = read_head(sock)
        assert head.startswith(b"HTTP/1.1 200 ")
        # ~3 s at ~300 KB/s: an unthrottled backend would have sent all 50 MB meanwhile
        started = time.monotonic()
        got, slow_digest = download(sock, 1 * MB, sampler, rest, slow_seconds=3.0)
        sampler.sample()
        slow_peak, slow_elapsed = sampler.peak, time.monotonic() - started
        slow_report = (
            f"50 MB slow reader, first {got / MB:.2f} MB over {slow_elapsed:.1f} s: "
            f"RSS +{(slow_peak - sampler.baseline) / MB:.2f} MB"
        )
        print(slow_report)
        assert slow_digest == expected_x_digest(got)
        assert slow_peak - sampler.baseline < GROWTH_LIMIT, slow_report
        # ... then the rest at full speed: everything arrives, nothing was lost
        rest_got, rest_digest = download(sock, size - got, sampler)
        sampler.sample()
    print(sampler.report("50 MB slow reader, whole transfer"))
    assert got + rest_got == size
    assert rest_digest == expected_x_digest(size - got)
    assert sampler.growth < GROWTH_LIMIT, sampler.report("slow reader")


def test_proxy_serves_after_big_transfers(big: Twingress) -> None:
    with RawClient(big.http_port) as client:
        assert client.exchange("GET", "/after", host="big.test").json()["path"] == "/after"
