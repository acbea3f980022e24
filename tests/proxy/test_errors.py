"""
Errors as clients see them: the right status, a short body, the connection
closed where HTTP requires it (and usable where the proxy says it is), and
the proxy still serving afterwards.

One twingress with tight limits serves the module:
C{--upstream-timeout 1 --max-body-size 1k --max-header-size 2k --header-timeout 1}.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.proxy.clients import (
    RawClient,
    Response,
    ScriptedBackend,
    chunked,
    read_request_head,
    request,
    route_each,
)
from tests.support import EchoBackend, Manifests, Twingress, free_port

# -- scripted backends that misbehave ----------------------------------------


def _close_after_head(sock: socket.socket, backend: ScriptedBackend) -> None:
    backend.record(read_request_head(sock))
    sock.shutdown(socket.SHUT_RDWR)


def _reset_after_head(sock: socket.socket, backend: ScriptedBackend) -> None:
    backend.record(read_request_head(sock))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST


def _close_at_once(sock: socket.socket, backend: ScriptedBackend) -> None:
    backend.record(b"")


def _garbage(sock: socket.socket, backend: ScriptedBackend) -> None:
    backend.record(read_request_head(sock))
    sock.sendall(b"HTTP/1.1 two hundred OK\r\nContent-Length: 0\r\n\r\n")


def _truncated_body(sock: socket.socket, backend: ScriptedBackend) -> None:
    backend.record(read_request_head(sock))
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"y" * 100)
    time.sleep(0.2)  # not a wait: the scripted backend holds the connection a moment, then closes it short


BEHAVIOURS: dict[str, Callable[[socket.socket, ScriptedBackend], None]] = {
    "close-after-head": _close_after_head,
    "reset-after-head": _reset_after_head,
    "close-at-once": _close_at_once,
    "garbage-status": _garbage,
    "truncated-body": _truncated_body,
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[dict]:
    a, b = echo_pair
    manifests = Manifests(tmp_path_factory.mktemp("manifests"))
    route_each(manifests, "echo", "echo.test", [a.address, b.address])
    route_each(manifests, "notready", "notready.test", [a.address, b.address], ready=False)
    route_each(manifests, "refused", "refused.test", [("127.0.0.3", free_port("127.0.0.3"))])
    backends = {name: ScriptedBackend(handler) for name, handler in BEHAVIOURS.items()}
    for name, backend in backends.items():
        route_each(manifests, name, f"{name}.test", [backend.address])
    proxy = Twingress(
        manifests.path,
        "--upstream-timeout", "1",
        "--max-body-size", "1k",
        "--max-header-size", "2k",
        "--header-timeout", "1",
    )
    yield {"proxy": proxy, "backends": backends}
    proxy.stop()
    for backend in backends.values():
        backend.stop()


@pytest.fixture
def px(world: dict) -> Twingress:
    return world["proxy"]


def assert_short_error(response: Response, status: int) -> None:
    assert response.status == status, (response.status, response.body)
    assert response.framing == "length"
    assert int(response.header("Content-Length") or -1) == len(response.body)
    assert 0 < len(response.body) <= 128, response.body
    assert response.body.startswith(b"%d" % status)
    assert response.has("Date") and response.has("Server")


def assert_consistent_connection(client: RawClient, response: Response) -> None:
    """A response that says close is followed by a close; otherwise the connection serves on."""
    if "close" in response.connection_tokens:
        assert client.closed_by_peer(), "Connection: close but the proxy kept the connection open"
    else:
        follow = client.exchange("GET", "/same-connection")
        assert follow.status == 200 and follow.json()["path"] == "/same-connection"


def assert_closed_after(client: RawClient, response: Response) -> None:
    assert "close" in response.connection_tokens, response.fields
    assert client.closed_by_peer(), "the proxy did not close the connection"


def assert_serving(proxy: Twingress) -> None:
    """A normal request on a new connection succeeds."""
    with RawClient(proxy.http_port, timeout=5) as client:
        response = client.exchange("GET", "/still-serving")
        assert response.status == 200
        assert response.json()["path"] == "/still-serving"


# -- routing errors -------------------------------------------------------------


def test_no_route_is_404(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        response = client.exchange("GET", "/", host="nowhere.test")
        assert_short_error(response, 404)
        assert_consistent_connection(client, response)
    assert_serving(px)


def test_no_route_with_expect_continue_is_404_without_waiting_for_the_body(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(request("POST", "/", host="nowhere.test", headers=[("Expect", "100-continue"), ("Content-Length", "100")]))
        response = client.read_response("POST", interim=True)
        assert_short_error(response, 404)  # final answer at once: no 100 Continue first
        assert_closed_after(client, response)  # the announced body was never read
    assert_serving(px)


def test_all_endpoints_not_ready_is_503(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        response = client.exchange("GET", "/", host="notready.test")
        assert_short_error(response, 503)
        assert_consistent_connection(client, response)
    assert_serving(px)


# -- upstream errors ------------------------------------------------------------


def test_refused_connection_is_502(px: Twingress) -> None:
    for _ in range(2):  # first try, then with the endpoint marked down
        with RawClient(px.http_port, timeout=5) as client:
            response = client.exchange("GET", "/", host="refused.test")
            assert_short_error(response, 502)
            assert_consistent_connection(client, response)
    assert_serving(px)


@pytest.mark.parametrize("behaviour", ["close-after-head", "reset-after-head", "close-at-once", "garbage-status"])
def test_backend_that_does_not_answer_is_502(px: Twingress, world: dict, behaviour: str) -> None:
    backend: ScriptedBackend = world["backends"][behaviour]
    before = backend.connections
    with RawClient(px.http_port, timeout=5) as client:
        response = client.exchange("GET", "/", host=f"{behaviour}.test")
        assert_short_error(response, 502)
        assert_consistent_connection(client, response)
    assert backend.connections > before, "the proxy never reached the scripted backend"
    assert_serving(px)


def test_backend_dying_mid_body_cuts_the_client_off(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(request("GET", "/", host="truncated-body.test"))
        head = client.read_head()
        assert head.status == 200
        assert head.header("Content-Length") == "1000"
        received = client.read_to_close()  # must end (close or reset), not hang
        assert len(received) < 1000, "a truncated body must not look complete"
    assert_serving(px)


def test_slow_upstream_is_504(px: Twingress) -> None:
    started = time.monotonic()
    with RawClient(px.http_port, timeout=10) as client:
        response = client.exchange("GET", "/slow?delay=5")
        assert_short_error(response, 504)
        assert time.monotonic() - started < 4.5, "answered by the backend's delay, not the upstream timeout"
        assert_consistent_connection(client, response)
    assert_serving(px)


# -- request limits ---------------------------------------------------------------


def test_body_over_limit_is_413(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(request("POST", "/big", body=b"b" * 2000))
        response = client.read_response("POST")
        assert_short_error(response, 413)
        assert_closed_after(client, response)
    assert_serving(px)


def test_body_at_limit_is_accepted(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        response = client.exchange("POST", "/fits", body=b"b" * 1024)
        assert response.status == 200
        assert response.json()["body_bytes"] == 1024


def test_chunked_body_over_limit_is_413(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(request("POST", "/big-chunked", headers=[("Transfer-Encoding", "chunked")]))
        client.send(chunked([b"c" * 600, b"c" * 600, b"c" * 600]))
        response = client.read_response("POST")
        assert_short_error(response, 413)
        assert_closed_after(client, response)
    assert_serving(px)


def test_curl_expecting_continue_gets_413_before_sending_body(px: Twingress, tmp_path: Path) -> None:
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"p" * 2_000_000)
    result = subprocess.run(
        [
            "curl", "-sS", "-v", "--max-time", "20", "--expect100-timeout", "15",
            "-H", "Host: echo.test", "-H", "Expect: 100-continue",
            "--data-binary", f"@{payload}", "-o", "/dev/null", "-w", "%{http_code}",
            f"http://127.0.0.1:{px.http_port}/curl-big",
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.stdout == b"413", (result.stdout, result.stderr.decode()[-2000:])
    assert b"100 Continue" not in result.stderr
    assert_serving(px)


def test_head_over_limit_is_431(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(request("GET", "/", headers=[("X-Big", "h" * 3000)]))
        response = client.read_response()
        assert_short_error(response, 431)
        assert_closed_after(client, response)
    assert_serving(px)


def test_unfinished_head_over_limit_is_431(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(b"GET / HTTP/1.1\r\nHost: echo.test\r\n" + b"X-Filler: fill\r\n" * 200)  # no blank line yet
        response = client.read_response()
        assert_short_error(response, 431)
        assert_closed_after(client, response)
    assert_serving(px)


def test_too_many_header_fields_is_431(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(request("GET", "/", headers=[(f"X-{i}", "1") for i in range(101)]))
        response = client.read_response()
        assert_short_error(response, 431)
        assert_closed_after(client, response)
    assert_serving(px)


def test_head_not_finished_in_time_is_408(px: Twingress) -> None:
    with RawClient(px.http_port, timeout=6) as client:
        client.send(b"GET /half HTTP/1.1\r\nHost: echo.test\r\nX-Half: ")  # ... and nothing more
        response = client.read_response()  # fails on the socket timeout if no 408 comes
        assert_short_error(response, 408)
        assert_closed_after(client, response)
    assert_serving(px)


def test_keep_alive_connection_idle_after_response_is_not_408(px: Twingress) -> None:
    """The header timeout is for a started head; an idle keep-alive connection is not answered 408."""
    with RawClient(px.http_port, timeout=5) as client:
        assert client.exchange("GET", "/first").status == 200
        time.sleep(1.5)  # not a wait: idle for longer than --header-timeout, far shorter than the keep-alive timeout
        assert client.still_open(0.1)
        assert client.exchange("GET", "/second").json()["path"] == "/second"


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /x HTTP/1.1 extra\r\nHost: echo.test\r\n\r\n",
        b"GET  /x HTTP/1.1\r\nHost: echo.test\r\n\r\n",
        b"GET /x HTTP/1.1\nHost: echo.test\n\n",
        b"GET /x HTTP/1.1\r\nHost: echo.test\r\nBad Name: v\r\n\r\n",
        b"GET /x HTTP/1.1\r\n\r\n",  # no Host
        b"POST /x HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    ],
    ids=["no-version", "extra-token", "double-space", "bare-lf", "space-in-name", "no-host", "cl-and-te"],
)
def test_malformed_request_is_400(px: Twingress, raw: bytes) -> None:
    with RawClient(px.http_port, timeout=5) as client:
        client.send(raw)
        response = client.read_response()
        assert_short_error(response, 400)
        assert_closed_after(client, response)
    assert_serving(px)
