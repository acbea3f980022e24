"""
Graceful shutdown of a real C{twistd -n ingress}: SIGTERM turns readiness off
at once, keeps accepting for the shutdown delay, then closes the listeners,
closes idle keep-alive connections, lets requests in flight finish (with
C{Connection: close}) and exits 0; what is still running at the drain
timeout is cut, and the exit is still 0.

An open TCP stream keeps a twistd process draining until it ends; the
stream listeners' part of the drain is also tested in-process (the cut at
the drain timeout), with real sockets.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from ingress.observe.metrics import Metrics
from ingress.process.drain import GracefulShutdown
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import StreamListeners
from ingress.routing.table import RoutingTable
from tests.kube.twingress import wait_until
from tests.proxy.clients import HeldBackend
from tests.proxy.streams_support import external_stream, recv_exactly, stream_route, tcp_echo, until
from tests.proxy.test_tls_passthrough import UntilEOFBackend, client_hello
from tests.support import EchoBackend, Manifests, Twingress, free_port, refused, wait_for_port
from tests.waiting import eventually

SHUTDOWN_DELAY = 3.0
DRAIN_TIMEOUT = 20.0


@pytest.fixture(scope="module")
def backend() -> Iterator[EchoBackend]:
    echo = EchoBackend("pod-a")
    yield echo
    echo.stop()


def starter(manifests: Path) -> Iterator[Callable[..., Twingress]]:
    """A fixture's body: a function that starts twingress on C{manifests} with options; all stopped at the end."""
    started: list[Twingress] = []

    def run(*args: str) -> Twingress:
        started.append(Twingress(manifests, *args))
        return started[-1]

    yield run
    for process in started:
        process.stop()


@pytest.fixture
def start(manifests: Manifests, backend: EchoBackend) -> Iterator[Callable[..., Twingress]]:
    """Starts twingress (echo.test routed to the backend) with the given options."""
    manifests.route("echo", "echo.test", [backend.address])
    yield from starter(manifests.path)


def _readyz(process: Twingress) -> tuple[int, dict]:
    status, body = process.admin("/readyz")
    return status, json.loads(body)


class _InFlight:
    """A request sent on its own connection; its response is read on a thread."""

    def __init__(self, port: int, path: str, host: str = "echo.test") -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.connection.request("GET", path, headers={"Host": host})
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


def test_sigterm_drains_then_exits_zero(held: HeldBackend, start: Callable[..., Twingress]) -> None:
    process = start("--shutdown-delay", str(SHUTDOWN_DELAY), "--drain-timeout", str(DRAIN_TIMEOUT))
    idle = _idle_keepalive(process.http_port)
    slow = _InFlight(process.http_port, "/slow", host="held.test")
    eventually(held.arrived, "the request to reach the backend before the signal")
    signalled = time.monotonic()
    process.process.send_signal(signal.SIGTERM)

    wait_until(lambda: _readyz(process)[0] == 503, timeout=1.0, what="/readyz 503", interval=0.02)
    assert _readyz(process)[1]["draining"] is True
    during = http.client.HTTPConnection("127.0.0.1", process.http_port, timeout=10)
    during.request("GET", "/during-delay", headers={"Host": "echo.test"})
    assert during.getresponse().status == 200, "new connections are served during the shutdown delay"
    assert time.monotonic() - signalled < SHUTDOWN_DELAY, "the check above ran inside the delay"
    during.close()

    wait_until(lambda: refused(process.http_port), timeout=SHUTDOWN_DELAY + 5, what="listener closed", interval=0.02)
    assert time.monotonic() - signalled >= SHUTDOWN_DELAY
    assert process.process.poll() is None, "still running while a request is in flight"
    assert idle.sock is not None
    idle.sock.settimeout(5)
    assert idle.sock.recv(1) == b"", "the idle keep-alive connection is closed"

    held.released.set()  # the request in flight ends now, after the listeners closed
    slow.join(DRAIN_TIMEOUT)
    assert slow.error is None, slow.error
    assert slow.status == 200
    assert slow.headers.get("connection") == "close"
    code = process.process.wait(DRAIN_TIMEOUT)
    assert code == 0, process.log()[-3000:]
    assert time.monotonic() - signalled < SHUTDOWN_DELAY + DRAIN_TIMEOUT, "exited before the drain timeout"
    assert "drain over (drained)" in process.log()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_connections_arriving_as_the_listeners_close_are_answered_or_refused(start: Callable[..., Twingress], workers: str) -> None:
    """
    Clients that keep opening connections across the moment the listeners close: each is answered
    or refused, none is reset after it connected. Closing a listening socket resets the connections
    the kernel has queued on it; the drain first makes the sockets drop new connection attempts,
    accepts the queue, then closes (before: 4 and 8 such resets in this test, and 4 of 12,683
    requests across a pod deletion on the test node).
    """
    proxy = start("--workers", workers, "--shutdown-delay", "1")
    outcomes: dict[str, int] = {"ok": 0, "refused": 0, "failed": 0}
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", proxy.http_port), timeout=10)
            except ConnectionRefusedError:
                outcomes["refused"] += 1
                time.sleep(0.01)  # pacing after a refusal, not a wait: the loop itself is what runs across the close
                continue
            try:
                connection = http.client.HTTPConnection("echo.test")
                connection.sock = sock
                connection.request("GET", "/", headers={"Host": "echo.test", "Connection": "close"})
                response = connection.getresponse()
                response.read()
                outcomes["ok" if response.status == 200 else "failed"] += 1
            except (OSError, http.client.HTTPException):
                outcomes["failed"] += 1
            finally:
                sock.close()

    clients = [threading.Thread(target=loop) for _ in range(6)]
    for client in clients:
        client.start()
    try:
        eventually(lambda: outcomes["ok"] >= 20, "traffic answered before the signal")
        proxy.process.send_signal(signal.SIGTERM)
        assert proxy.process.wait(30) == 0
        refused_at_exit = outcomes["refused"]
        eventually(lambda: outcomes["refused"] > refused_at_exit, "connections refused after the exit")
    finally:
        stop.set()
        for client in clients:
            client.join(15)
    assert outcomes["ok"] > 0 and outcomes["refused"] > 0, outcomes  # traffic ran before and after the close
    assert outcomes["failed"] == 0, outcomes


def test_request_still_running_at_the_drain_timeout_is_cut(held: HeldBackend, start: Callable[..., Twingress]) -> None:
    process = start("--shutdown-delay", "0.2", "--drain-timeout", "1")
    slow = _InFlight(process.http_port, "/stuck", host="held.test")  # never released: still running at the drain timeout
    eventually(held.arrived, "the request to reach the backend before the signal")
    process.process.send_signal(signal.SIGTERM)
    code = process.process.wait(30)  # well before the request's 60 s
    assert code == 0, process.log()[-3000:]
    slow.join(10)
    assert slow.status == 0 and slow.error is not None, "the request was cut, not answered"
    assert "drain over (timeout): aborted 1 connections still open" in process.log()


def test_a_second_signal_ends_the_drain_at_once(start: Callable[..., Twingress]) -> None:
    process = start("--shutdown-delay", "30", "--drain-timeout", "30")
    process.process.send_signal(signal.SIGTERM)
    wait_until(lambda: _readyz(process)[0] == 503, timeout=5.0, what="/readyz 503", interval=0.02)
    process.process.send_signal(signal.SIGINT)
    assert process.process.wait(20) == 0, process.log()[-3000:]
    assert "SIGINT during the drain: stopping now" in process.log()


def _echo_server() -> tuple[socket.socket, int]:
    """A TCP echo server on a thread: echoes each connection until its EOF."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _echo(connection: socket.socket) -> None:
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)


def test_an_open_tcp_stream_holds_the_drain_until_it_ends(manifests: Manifests, start: Callable[..., Twingress]) -> None:
    server, upstream = _echo_server()
    listen = free_port()
    manifests.write("stream.yaml", external_stream("db", "TCP", listen, upstream))
    process = start("--stream-interface", "127.0.0.1", "--shutdown-delay", "0.5", "--drain-timeout", str(DRAIN_TIMEOUT))
    try:
        wait_for_port("127.0.0.1", listen, process.process)
        client = _connect(listen)
        client.sendall(b"before")
        assert recv_exactly(client, 6) == b"before"
        process.process.send_signal(signal.SIGTERM)
        wait_until(lambda: refused(listen), timeout=10, what="stream listener closed", interval=0.02)
        client.sendall(b"after")
        assert recv_exactly(client, 5) == b"after", "the open stream still flows"
        assert process.process.poll() is None, "still running while the stream is open"
        client.close()
        assert process.process.wait(DRAIN_TIMEOUT) == 0, process.log()[-3000:]
        assert "drain over (drained)" in process.log()
    finally:
        server.close()


def test_an_open_tls_passthrough_holds_the_drain_until_it_ends(manifests: Manifests, start: Callable[..., Twingress]) -> None:
    backend = UntilEOFBackend()
    passthrough = Manifests.ingress("raw", "raw.test", "rawbackend")
    passthrough["metadata"]["annotations"] = {"twingress.io/ssl-passthrough": "true"}
    manifests.write("raw.yaml", *manifests.service("rawbackend", [("127.0.0.1", backend.port)]), passthrough)
    https = free_port()
    process = start("--https", f"tcp:{https}:interface=127.0.0.1", "--shutdown-delay", "0.5", "--drain-timeout", str(DRAIN_TIMEOUT))
    try:
        client = _connect(https)
        hello = client_hello("raw.test")
        client.sendall(hello)
        wait_until(lambda: "passthrough/default/rawbackend:80" in process.admin("/metrics")[1].decode(), what="the relay counted")
        process.process.send_signal(signal.SIGTERM)
        wait_until(lambda: refused(https), timeout=10, what="https listener closed", interval=0.02)
        client.sendall(b"after")
        assert process.process.poll() is None, "still running while the passthrough connection is open"
        client.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := client.recv(100):
            answer += chunk
        assert answer == b"got %d bytes" % (len(hello) + 5), "the open connection still flows both ways"
        client.close()
        assert process.process.wait(DRAIN_TIMEOUT) == 0, process.log()[-3000:]
        assert "drain over (drained)" in process.log()
    finally:
        backend.close()


@pytest.fixture
def stream() -> Iterator[tuple[StreamListeners, RoutingTable]]:
    """Stream listeners in this process with one TCP route to an echo server; the table not applied yet."""
    echo, _ = tcp_echo()
    streams = StreamListeners(reactor, UpstreamPool(reactor, ProxySettings()), Metrics(), interface="127.0.0.1")
    route = stream_route("TCP", free_port(), [("127.0.0.1", echo.getHost().port)])
    yield streams, RoutingTable(streams={route.key: route})
    streams.stop()
    echo.stopListening()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


@pytest_twisted.inlineCallbacks
def test_open_streams_finish_during_the_drain(stream: tuple[StreamListeners, RoutingTable]) -> Any:
    streams, table = stream
    port = next(iter(table.streams))[1]
    streams.apply(table)
    client = yield deferToThread(_connect, port)
    stopped: list[bool] = []
    shutdown = GracefulShutdown(reactor, [], [streams], shutdown_delay=0.1, drain_timeout=30, stop=lambda: stopped.append(True))
    shutdown.begin()
    assert shutdown.readiness() == (False, {"draining": True})
    yield until(lambda: shutdown._poll is not None, what="listeners closed")
    # stopListening closes the socket on the next reactor turn: a connect racing it could still land
    yield until(lambda: not any(getattr(listener.port, "connected", False) for listener in streams.listeners.values()), what="the sockets closed")
    with pytest.raises(ConnectionRefusedError):
        yield deferToThread(_connect, port)
    streams.apply(table)  # a table arriving during the drain opens nothing again
    with pytest.raises(ConnectionRefusedError):
        yield deferToThread(_connect, port)
    yield deferToThread(client.sendall, b"still open")
    assert (yield deferToThread(recv_exactly, client, 10)) == b"still open"
    assert streams.open_count() == 1 and not stopped
    client.close()
    yield until(lambda: stopped, what="stop once the stream ended")
    assert streams.open_count() == 0


@pytest_twisted.inlineCallbacks
def test_streams_open_at_the_drain_timeout_are_cut(stream: tuple[StreamListeners, RoutingTable]) -> Any:
    streams, table = stream
    streams.apply(table)
    client = yield deferToThread(_connect, next(iter(table.streams))[1])
    yield until(lambda: streams.open_count() == 1, what="the stream open")
    stopped: list[bool] = []
    shutdown = GracefulShutdown(reactor, [], [streams], shutdown_delay=0, drain_timeout=0.5, stop=lambda: stopped.append(True))
    shutdown.begin()
    yield until(lambda: stopped, what="stop at the drain timeout")
    assert streams.open_count() == 0
    assert (yield deferToThread(_closed, client)), "the client's stream was closed"
    client.close()


def _closed(client: socket.socket) -> bool:
    """EOF or reset (an aborted stream is reset)."""
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True
