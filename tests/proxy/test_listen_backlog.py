"""
A burst of new connections waits in the listener's queue while the proxy is busy elsewhere: the
queue is net.core.somaxconn deep (511 when that is lower), as ingress-nginx's listeners are, not
Twisted's 50.  Past a full queue the kernel drops handshakes: in CI, an h2load run whose 1,000
streams opened as many upstream connections at once overflowed a backlog of 50 1,439 times and left 21
requests waiting a minute for a 5xx.  Here the whole proxy (primary and workers) is stopped, a
burst arrives at an HTTP listener or a stream port, and every handshake must complete from the
queue alone.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingress.runtime.sockets import NGINX_BACKLOG, default_backlog, with_backlog
from tests.kube.twingress import wait_until
from tests.proxy.streams_support import stream_ingress
from tests.support import EchoBackend, Manifests, Twingress, free_port

BURST = 300  # above Twisted's 50, below the 511 floor
HANDSHAKE_WAIT = 3.0  # seconds: a dropped SYN is sent again after 1 s, and dropped again while stopped


@pytest.fixture(scope="module")
def backend() -> Iterator[EchoBackend]:
    echo = EchoBackend("pod-a")
    yield echo
    echo.stop()


def _processes(twingress: Twingress) -> list[int]:
    """The primary and its children (the workers, when there are some)."""
    pid = twingress.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def _handshakes(port: int, count: int, wait: float) -> tuple[int, list[socket.socket]]:
    """Start C{count} connections at once; how many completed their handshake within C{wait} seconds."""
    pending: dict[int, socket.socket] = {}
    opened = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        pending[sock.fileno()] = sock
        opened.append(sock)
    completed = 0
    deadline = time.monotonic() + wait
    while pending and time.monotonic() < deadline:
        _, writable, _ = select.select([], list(pending), [], max(0.0, deadline - time.monotonic()))
        for fileno in writable:
            sock = pending.pop(fileno)
            completed += sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    return completed, opened


def _burst_while_stopped(twingress: Twingress, port: int) -> tuple[int, list[socket.socket]]:
    """L{BURST} connections to C{port} while every process of C{twingress} is stopped; it runs again after."""
    stopped = _processes(twingress)
    try:
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        return _handshakes(port, BURST, HANDSHAKE_WAIT)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("workers", ["1", "2"], ids=["1-worker", "2-workers"])
def test_a_burst_of_connections_waits_in_the_queue_while_the_proxy_is_stopped(
    manifests: Manifests, backend: EchoBackend, workers: str
) -> None:
    manifests.route("echo", "echo.test", [backend.address])
    twingress = Twingress(manifests.path, "--workers", workers)
    opened: list[socket.socket] = []
    try:
        assert len(_processes(twingress)) == (1 if workers == "1" else 3)
        completed, opened = _burst_while_stopped(twingress, twingress.http_port)
        assert completed == BURST
        first = opened[0]
        first.setblocking(True)
        first.settimeout(10)
        first.sendall(b"GET / HTTP/1.1\r\nHost: echo.test\r\nConnection: close\r\n\r\n")
        assert first.recv(12) == b"HTTP/1.1 200"  # the queued connections are served once it runs again
    finally:
        for sock in opened:
            sock.close()
        twingress.stop()


@pytest.mark.parametrize("workers", ["1", "2"], ids=["1-worker", "2-workers"])
def test_a_stream_port_queues_a_burst_too(manifests: Manifests, backend: EchoBackend, workers: str) -> None:
    """A StreamIngress's TCP port (its own listener, or each worker's socket of its SO_REUSEPORT group) gets the same queue."""
    port = free_port()
    manifests.write("db.yaml", *manifests.service("db", [backend.address]))
    manifests.write("stream.yaml", stream_ingress("db", port))
    twingress = Twingress(manifests.path, "--workers", workers)
    opened: list[socket.socket] = []
    try:
        wait_until(lambda: twingress.routes()["streams"].get(f"TCP/{port}", {}).get("listening") is True, 10, "the stream port listens")
        completed, opened = _burst_while_stopped(twingress, port)
        assert completed == BURST
    finally:
        for sock in opened:
            sock.close()
        twingress.stop()


def test_the_default_backlog_is_somaxconn_or_nginxs_511(tmp_path: Path) -> None:
    sysctl = tmp_path / "somaxconn"
    sysctl.write_text("4096\n")
    assert default_backlog(str(sysctl)) == 4096
    sysctl.write_text("128\n")  # older kernels' default: ingress-nginx keeps nginx's 511 then
    assert default_backlog(str(sysctl)) == NGINX_BACKLOG == 511
    sysctl.write_text("many\n")
    assert default_backlog(str(sysctl)) == 511
    assert default_backlog(str(tmp_path / "absent")) == 511


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("tcp:80", "tcp:80:backlog=700"),
        ("tcp:8080:interface=127.0.0.1", "tcp:8080:interface=127.0.0.1:backlog=700"),
        ("haproxy:tcp:80", "haproxy:tcp:80:backlog=700"),
        ("tcp6:443:interface=\\:\\:1", "tcp6:443:interface=\\:\\:1:backlog=700"),
        ("unix:/run/twingress.sock", "unix:/run/twingress.sock:backlog=700"),
        ("tcp:80:backlog=64", "tcp:80:backlog=64"),  # the operator's own stays
        ("tcp:backlog=64:port=80", "tcp:backlog=64:port=80"),
        ("ssl:443:privateKey=key.pem", "ssl:443:privateKey=key.pem"),  # not a kind this adds to
    ],
)
def test_a_description_gets_the_backlog_unless_it_names_one(description: str, expected: str) -> None:
    assert with_backlog(description, 700) == expected
