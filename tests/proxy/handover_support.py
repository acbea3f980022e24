"""
What the hand-over tests (test_handover.py) run: twingress processes sharing one HTTP port and one
rendezvous, clients that count what an upgrade costs them, and the listening sockets' inodes as ss
shows them; the fixtures both hand-over test modules import (an echo backend, a site routed to it,
the twingress processes a test starts, stopped after it).
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from tests.support import ROOT, TWISTD, EchoBackend, Manifests, free_port
from tests.waiting import eventually

REQUEST = b"GET / HTTP/1.1\r\nHost: w.test\r\nConnection: close\r\n\r\n"


class Node:
    """twistd ingress on a fixed HTTP port (shared by every process of a test) and an admin port of its own."""

    def __init__(self, manifests: Path, http_port: int, *args: str, prefix: Sequence[str] = (), wait: bool = True) -> None:
        self.http_port = http_port
        self.admin_port = free_port()
        self.log_path = manifests.parent / f"twingress-{self.admin_port}.log"
        command = [
            *prefix, *TWISTD, "--pidfile=", "--logfile=-", "-n", "ingress", "--manifests", str(manifests), "--poll-interval", "0.2",
            "--http", f"tcp:{http_port}:interface=127.0.0.1", "--admin", f"tcp:{self.admin_port}:interface=127.0.0.1",
            "--https", "", "--shutdown-delay", "0", "--access-log", "off", *args,
        ]
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        if wait:
            wait_for(lambda: self.ready(), 30, f"twingress ready on admin port {self.admin_port}", self)

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"twingress exited with {self.process.returncode}:\n{self.log()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", self.admin_port), timeout=1) as s:
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return s.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def metric_open(self) -> float:
        """The client connections open now (twingress_open_connections, summed), from /metrics."""
        with socket.create_connection(("127.0.0.1", self.admin_port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        lines = data.decode(errors="replace").splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("twingress_open_connections"))

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 20) -> None:
        wait_for(lambda: text in self.log(), timeout, f"{text!r} in the log", self)

    def wait_exit(self, timeout: float = 30) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout}s:\n{self.log()[-3000:]}") from None

    def readyz(self) -> bytes:
        """The admin /readyz answer: status line, headers and body."""
        with socket.create_connection(("127.0.0.1", self.admin_port), timeout=5) as s:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return data

    def stop(self) -> None:
        """SIGTERM; a second one if it still runs a moment later (it ends a --handover-wait, or the drain)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(1)
            except subprocess.TimeoutExpired:
                self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str, node: Optional[Node] = None) -> None:
    """L{eventually} in these tests' argument order: C{condition} within C{timeout}, failing with C{what} and the node's log tail."""
    eventually(condition, what, timeout=timeout, interval=0.02, context=(lambda: node.log()[-3000:]) if node is not None else None)


def listening_inodes(port: int) -> set[int]:
    """The inodes of the sockets listening on C{port}, as C{ss -ltne} prints them."""
    out = subprocess.run(["ss", "-ltneH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return {int(found) for found in re.findall(r"\bino:(\d+)", out)}


@dataclass
class Counts:
    sent: int = 0
    answered: int = 0
    refused: int = 0
    reset: int = 0
    other: list[str] = field(default_factory=list)
    keepalive_answered: int = 0
    keepalive_reconnects: int = 0
    keepalive_failed: list[str] = field(default_factory=list)


class Traffic:
    """
    Clients while an upgrade happens: C{openers} threads each opening a new connection per request without
    pause, and one keep-alive HTTP/1.1 connection sending request after request on it.  Every outcome is
    counted: answered (200), refused (ECONNREFUSED), reset (ECONNRESET, or closed before an answer).
    """

    def __init__(self, port: int, openers: int = 2) -> None:
        self.port = port
        self.counts = Counts()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._open_each_time, daemon=True) for _ in range(openers)]
        self.threads.append(threading.Thread(target=self._keep_alive, daemon=True))

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> Counts:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)
        return self.counts

    def wait_answered(self, more: int, timeout: float = 20) -> None:
        """Until C{more} requests more than now are answered (traffic really flows)."""
        target = self.counts.answered + more
        wait_for(lambda: self.counts.answered >= target and self.counts.keepalive_answered > 0, timeout, f"{more} more answers")

    def _open_each_time(self) -> None:
        while not self.stopping.is_set():
            outcome = self._one()
            with self.lock:
                self.counts.sent += 1
                if outcome == "answered":
                    self.counts.answered += 1
                elif outcome == "refused":
                    self.counts.refused += 1
                elif outcome == "reset":
                    self.counts.reset += 1
                else:
                    self.counts.other.append(outcome)

    def _one(self) -> str:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
                s.sendall(REQUEST)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except ConnectionRefusedError:
            return "refused"
        except (ConnectionResetError, BrokenPipeError):
            return "reset"
        except OSError as error:
            return f"error: {error}"
        if not data:
            return "reset"  # closed before any answer
        return "answered" if data.startswith(b"HTTP/1.1 200") else f"answer: {data[:40]!r}"

    def _keep_alive(self) -> None:
        """
        One persistent connection; when the server ends it after an answer (C{Connection: close} in a
        drain) the next request goes on a new one.  A request that meets a connection the server closed
        while it was idle is sent again on a new one, as RFC 9112 (9.3.1) lets a client do for an
        idempotent request; it is counted as a reconnect, not as an answer.
        """
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stopping.is_set():
            for attempt in (1, 2):
                reused = connection.sock is not None
                try:
                    connection.request("GET", "/", headers={"Host": "w.test"})
                    response = connection.getresponse()
                    response.read()
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as error:
                    connection.close()
                    if reused and attempt == 1:
                        self.counts.keepalive_reconnects += 1
                        continue
                    self.counts.keepalive_failed.append(repr(error))
                    break
                except OSError as error:
                    connection.close()
                    self.counts.keepalive_failed.append(repr(error))
                    break
                if response.status == 200:
                    self.counts.keepalive_answered += 1
                else:
                    self.counts.keepalive_failed.append(f"status {response.status}")
                if response.will_close:
                    connection.close()
                break
        connection.close()


def print_counts(what: str, counts: Counts) -> None:
    print(
        f"\n{what}: sent {counts.sent}, answered {counts.answered}, refused {counts.refused}, reset {counts.reset},"
        f" other {len(counts.other)}; keep-alive answered {counts.keepalive_answered}, reconnects {counts.keepalive_reconnects},"
        f" failed {len(counts.keepalive_failed)}; other: {counts.other[:3]}"
    )


def assert_nothing_lost(counts: Counts) -> None:
    assert counts.refused == 0 and counts.reset == 0 and not counts.other, counts
    assert counts.answered == counts.sent and counts.sent > 0
    assert not counts.keepalive_failed and counts.keepalive_answered > 0, counts


def key_file(directory: Path, name: str = "key", key: bytes = b"0123456789abcdef0123456789abcdef") -> Path:
    path = directory / name
    path.write_bytes(key)
    os.chmod(path, 0o600)
    return path


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoBackend]:
    """The one backend of a test module's site."""
    backend = EchoBackend("pod-handover", "127.0.0.1")
    yield backend
    backend.stop()


@pytest.fixture
def site(manifests: Manifests, echo: EchoBackend) -> Manifests:
    """A manifests directory routing w.test to the echo backend."""
    manifests.route("web", "w.test", [echo.address])
    return manifests


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    """The twingress processes a test starts (L{start_node}), stopped after it."""
    started: list[Node] = []
    yield started
    for node in started:
        node.stop()


def start_node(nodes: list[Node], site: Manifests, port: int, *args: str, **kw: object) -> Node:
    """A twingress on C{site} and HTTP C{port}, kept in C{nodes} so that the fixture stops it."""
    nodes.append(Node(site.path, port, *args, **kw))  # type: ignore[arg-type]
    return nodes[-1]
