"""
Graceful shutdown of a real C{twistd -n ingress}: SIGTERM turns readiness off
at once, keeps accepting for the shutdown delay, then closes the listeners,
closes idle keep-alive connections, lets requests in flight finish (with
C{Connection: close}) and exits 0; what is still running at the drain
timeout is cut, and the exit is still 0.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.support import EchoBackend, Manifests, Twingress

SHUTDOWN_DELAY = 3.0
DRAIN_TIMEOUT = 20.0


@pytest.fixture(scope="module")
def backend() -> Iterator[EchoBackend]:
    echo = EchoBackend("pod-a")
    yield echo
    echo.stop()


def _wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s: {what}")


def _readyz(process: Twingress) -> tuple[int, dict]:
    status, body = process.admin("/readyz")
    return status, json.loads(body)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


class _InFlight:
    """A request sent on its own connection; its response is read on a thread."""

    def __init__(self, port: int, path: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.connection.request("GET", path, headers={"Host": "echo.test"})
        self.status = 0
        self.headers: dict[str, str] = {}
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            response = self.connection.getresponse()
            response.read()
            self.status, self.headers = response.status, {k.lower(): v for k, v in response.getheaders()}
        except (OSError, http.client.HTTPException) as error:
            self.error = error

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the in-flight request got no answer and no close"


def _idle_keepalive(port: int) -> http.client.HTTPConnection:
    """A connection that has had one request answered and is now idle between requests."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/first", headers={"Host": "echo.test"})
    response = connection.getresponse()
    response.read()
    assert response.status == 200 and not response.will_close
    return connection


def test_sigterm_drains_then_exits_zero(tmp_path: Path, manifests: Manifests, backend: EchoBackend) -> None:
    manifests.route("echo", "echo.test", [backend.address])
    process = Twingress(manifests.path, "--shutdown-delay", str(SHUTDOWN_DELAY), "--drain-timeout", str(DRAIN_TIMEOUT))
    try:
        idle = _idle_keepalive(process.http_port)
        slow = _InFlight(process.http_port, "/slow?delay=6")
        time.sleep(0.3)  # the request reaches the backend before the signal
        signalled = time.monotonic()
        process.process.send_signal(signal.SIGTERM)

        _wait_for(lambda: _readyz(process)[0] == 503, 1.0, "/readyz 503")
        assert _readyz(process)[1]["draining"] is True
        during = http.client.HTTPConnection("127.0.0.1", process.http_port, timeout=10)
        during.request("GET", "/during-delay", headers={"Host": "echo.test"})
        assert during.getresponse().status == 200, "new connections are served during the shutdown delay"
        assert time.monotonic() - signalled < SHUTDOWN_DELAY, "the check above ran inside the delay"
        during.close()

        _wait_for(lambda: _refused(process.http_port), SHUTDOWN_DELAY + 5, "listener closed")
        assert time.monotonic() - signalled >= SHUTDOWN_DELAY
        assert process.process.poll() is None, "still running while a request is in flight"
        assert idle.sock is not None
        idle.sock.settimeout(5)
        assert idle.sock.recv(1) == b"", "the idle keep-alive connection is closed"

        slow.join(DRAIN_TIMEOUT)
        assert slow.error is None, slow.error
        assert slow.status == 200
        assert slow.headers.get("connection") == "close"
        code = process.process.wait(DRAIN_TIMEOUT)
        assert code == 0, process.log()[-3000:]
        assert time.monotonic() - signalled < SHUTDOWN_DELAY + DRAIN_TIMEOUT, "exited before the drain timeout"
        assert "drain over (drained)" in process.log()
    finally:
        process.stop()


def test_request_still_running_at_the_drain_timeout_is_cut(manifests: Manifests, backend: EchoBackend) -> None:
    manifests.route("echo", "echo.test", [backend.address])
    process = Twingress(manifests.path, "--shutdown-delay", "0.2", "--drain-timeout", "1")
    try:
        slow = _InFlight(process.http_port, "/stuck?delay=60")
        time.sleep(0.3)
        process.process.send_signal(signal.SIGTERM)
        code = process.process.wait(30)  # well before the request's 60 s
        assert code == 0, process.log()[-3000:]
        slow.join(10)
        assert slow.status == 0 and slow.error is not None, "the request was cut, not answered"
        assert "drain over (timeout): aborted 1 connections still open" in process.log()
    finally:
        process.stop()


def test_a_second_signal_ends_the_drain_at_once(manifests: Manifests, backend: EchoBackend) -> None:
    manifests.route("echo", "echo.test", [backend.address])
    process = Twingress(manifests.path, "--shutdown-delay", "30", "--drain-timeout", "30")
    try:
        process.process.send_signal(signal.SIGTERM)
        _wait_for(lambda: _readyz(process)[0] == 503, 5.0, "/readyz 503")
        process.process.send_signal(signal.SIGINT)
        assert process.process.wait(20) == 0, process.log()[-3000:]
        assert "SIGINT during the drain: stopping now" in process.log()
    finally:
        process.stop()
