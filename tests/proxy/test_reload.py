"""
Reloads of a running C{twistd -n ingress --manifests DIR} (polled every 0.2 s).

A changed manifest becomes the live table within 2 s (the one timing bound
that is part of the specification); requests in flight and open keep-alive
connections are not disturbed by a swap; a bad file never takes the last good
table down; a removed file takes its routes with it.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import time
from collections.abc import Iterator
from typing import Optional

import pytest
import yaml

from tests.proxy.clients import HeldBackend
from tests.support import EchoBackend, Manifests, Twingress
from tests.waiting import eventually

CONVERGENCE_BOUND = 2.0  # the deadline the new table is waited on (a bound on an event, not a speed measured)


@pytest.fixture
def reloadable(manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    """twingress routing "echo.test" to pod-a only (file echo.yaml)."""
    pod_a, _ = echo_pair
    manifests.route("echo", "echo.test", [pod_a.address])
    process = Twingress(manifests.path)
    yield process
    process.stop()


def ask(port: int, host: str, path: str = "/") -> tuple[int, Optional[str]]:
    """One request on a new connection: (status, the X-Backend that answered)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host})
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("X-Backend")
    finally:
        conn.close()


def wait_for(port: int, host: str, expected: tuple[int, Optional[str]], timeout: float = 10.0) -> tuple[float, list[tuple[int, Optional[str]]]]:
    """
    Ask every 10 ms until C{expected} comes back; returns the seconds it took
    and every answer seen on the way.  Fails after C{timeout}.
    """
    started = time.monotonic()
    seen: list[tuple[int, Optional[str]]] = []

    def answered() -> bool:
        seen.append(ask(port, host))
        return seen[-1] == expected

    eventually(answered, f"{host} to answer {expected}", timeout=timeout, interval=0.01, context=lambda: f"last answers {seen[-5:]}")
    return time.monotonic() - started, seen


def metric(process: Twingress, name: str, labels: str = "") -> float:
    """One sample of the /metrics text (0 when absent)."""
    wanted = name + (("{" + labels + "}") if labels else "")
    for line in process.admin("/metrics")[1].decode().splitlines():
        if line.split(" ")[0] == wanted:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- (a) convergence


def test_changed_backend_is_followed_within_2s(reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    _, pod_b = echo_pair
    assert ask(reloadable.http_port, "echo.test") == (200, "pod-a")
    generation = reloadable.generation()

    manifests.route("echo", "echo.test", [pod_b.address])
    elapsed, seen = wait_for(reloadable.http_port, "echo.test", (200, "pod-b"), timeout=CONVERGENCE_BOUND)
    print(f"\nreload convergence (changed backend): {elapsed * 1000:.0f} ms over {len(seen)} requests")

    assert all(status == 200 for status, _ in seen), f"a request failed during the reload: {seen}"
    assert reloadable.generation() > generation
    # and it stays on the new table
    assert {ask(reloadable.http_port, "echo.test") for _ in range(10)} == {(200, "pod-b")}


def test_added_host_is_routed_within_2s(reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    _, pod_b = echo_pair
    assert ask(reloadable.http_port, "new.test")[0] == 404

    manifests.route("new", "new.test", [pod_b.address])
    elapsed, seen = wait_for(reloadable.http_port, "new.test", (200, "pod-b"), timeout=CONVERGENCE_BOUND)
    print(f"\nreload convergence (added host): {elapsed * 1000:.0f} ms over {len(seen)} requests")

    assert all(status in (200, 404) for status, _ in seen), seen
    assert ask(reloadable.http_port, "echo.test") == (200, "pod-a")  # the other file is untouched
    assert "new.test" in reloadable.routes()["hosts"]


# -- (b) what is open across a swap


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length from a raw socket (the socket stays open)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        body += chunk
    assert len(body) == length, "more than one response arrived"
    return int(lines[0].split(" ")[1]), headers, body


def test_request_in_flight_across_swap_completes_and_connection_follows_new_table(
    reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]
) -> None:
    _, pod_b = echo_pair
    held = HeldBackend()  # answers when released: the request is in flight across the swap for sure
    try:
        generation = reloadable.generation()
        manifests.route("echo", "echo.test", [held.address])
        generation = reloadable.wait_generation_above(generation)
        with socket.create_connection(("127.0.0.1", reloadable.http_port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: echo.test\r\n\r\n")
            eventually(held.arrived, "the request routed on the old table to reach its backend")
            manifests.route("echo", "echo.test", [pod_b.address])
            reloadable.wait_generation_above(generation)
            assert not select.select([sock], [], [], 0)[0], "a response came before the backend was released"

            held.released.set()
            status, headers, body = read_response(sock)
            assert status == 200
            assert headers["x-backend"] == "held"  # routed when it arrived, by the table live then
            assert body == b"ok" and held.server.received[0].startswith(b"GET / HTTP/1.1\r\n")
            assert headers.get("connection", "").lower() != "close"
            _next_request_follows_the_new_table(sock)
    finally:
        held.stop()


def _next_request_follows_the_new_table(sock: socket.socket) -> None:
    """The same connection, the next request: the new table."""
    sock.sendall(b"GET /next HTTP/1.1\r\nHost: echo.test\r\n\r\n")
    status, headers, body = read_response(sock)
    assert (status, headers["x-backend"]) == (200, "pod-b")
    assert json.loads(body)["path"] == "/next"


def test_keep_alive_connection_keeps_working_after_swap(
    reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]
) -> None:
    _, pod_b = echo_pair
    conn = http.client.HTTPConnection("127.0.0.1", reloadable.http_port, timeout=10)
    try:
        conn.request("GET", "/before", headers={"Host": "echo.test"})
        response = conn.getresponse()
        response.read()
        assert (response.status, response.getheader("X-Backend")) == (200, "pod-a")
        sock = conn.sock
        assert sock is not None
        local = sock.getsockname()

        generation = reloadable.generation()
        manifests.route("echo", "echo.test", [pod_b.address])
        reloadable.wait_generation_above(generation)

        for path in ("/after-1", "/after-2", "/after-3"):
            conn.request("GET", path, headers={"Host": "echo.test"})
            response = conn.getresponse()
            body = json.loads(response.read())
            assert (response.status, response.getheader("X-Backend")) == (200, "pod-b")
            assert body["path"] == path
            assert conn.sock is sock and sock.getsockname() == local, "the client connection was reopened"
    finally:
        conn.close()


# -- (c) a bad file keeps the last good table


@pytest.mark.parametrize(
    "text",
    ["kind: Ingress\nmetadata: {name: [unclosed\n", "- just\n- a list\n- of strings\n", "\tkind: tab-indented\n  : :\n"],
    ids=["broken-yaml", "not-objects", "tab-indent"],
)
def test_invalid_file_keeps_last_good_table_then_fix_applies(
    reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend], text: str
) -> None:
    _, pod_b = echo_pair
    generation = reloadable.generation()
    errors_before = metric(reloadable, "twingress_source_errors_total", 'source="manifests"')

    (manifests.path / "echo.yaml").write_text(text)
    generation = reloadable.wait_generation_above(generation)

    # routing is unchanged ...
    assert {ask(reloadable.http_port, "echo.test") for _ in range(5)} == {(200, "pod-a")}
    routes = reloadable.routes()
    assert routes["hosts"]["echo.test"]["prefix"]["/"]["endpoints"] == [f"{echo_pair[0].host}:{echo_pair[0].port}"]
    # ... and the bad file is visible: a problem, a counter, a log line
    problems = [p for p in routes["problems"] if p["object"] == "File/echo.yaml"]
    assert [p["reason"] for p in problems] == ["InvalidManifest"], routes["problems"]
    assert metric(reloadable, "twingress_source_errors_total", 'source="manifests"') >= errors_before + 1
    logged = [line for line in reloadable.log().splitlines() if "echo.yaml" in line]  # once, with the last good content kept
    assert len(logged) == 1 and "] File/echo.yaml: InvalidManifest: " in logged[0] and "last good content stays in use" in logged[0], logged
    assert "skipped" not in logged[0]  # its last good content is served: not skipped

    # fixing it applies, and the problem goes away
    manifests.route("echo", "echo.test", [pod_b.address])
    wait_for(reloadable.http_port, "echo.test", (200, "pod-b"))
    assert [p for p in reloadable.routes()["problems"] if p["object"] == "File/echo.yaml"] == []


def test_new_invalid_file_does_not_disturb_the_others(reloadable: Twingress, manifests: Manifests) -> None:
    generation = reloadable.generation()
    (manifests.path / "broken.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x\n")
    reloadable.wait_generation_above(generation)
    assert {ask(reloadable.http_port, "echo.test") for _ in range(5)} == {(200, "pod-a")}
    assert [p["reason"] for p in reloadable.routes()["problems"] if p["object"] == "File/broken.yaml"] == ["InvalidManifest"]

    generation = reloadable.generation()
    manifests.remove("broken.yaml")
    reloadable.wait_generation_above(generation)
    assert reloadable.routes()["problems"] == []
    assert ask(reloadable.http_port, "echo.test") == (200, "pod-a")


def test_files_not_named_as_manifests_are_ignored(reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """Editor backups and dot-files (like the atomic writes' temporaries) are not read."""
    _, pod_b = echo_pair
    generation = reloadable.generation()
    for name in ("echo.yaml~", ".hidden.yaml", "notes.txt"):
        (manifests.path / name).write_text("this: [is not valid\n")
    # A marker change written after them: the poll that builds it lists them too.
    manifests.route("other", "other.test", [pod_b.address])
    reloadable.wait_generation_above(generation)
    wait_for(reloadable.http_port, "other.test", (200, "pod-b"))
    assert reloadable.routes()["problems"] == []
    assert ask(reloadable.http_port, "echo.test") == (200, "pod-a")


# -- (d) removing a file


def test_deleted_file_removes_its_routes(reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    _, pod_b = echo_pair
    manifests.route("other", "other.test", [pod_b.address])
    wait_for(reloadable.http_port, "other.test", (200, "pod-b"))

    generation = reloadable.generation()
    manifests.remove("other.yaml")
    reloadable.wait_generation_above(generation)

    assert ask(reloadable.http_port, "other.test")[0] == 404
    assert "other.test" not in reloadable.routes()["hosts"]
    assert ask(reloadable.http_port, "echo.test") == (200, "pod-a")

    generation = reloadable.generation()
    manifests.remove("echo.yaml")
    reloadable.wait_generation_above(generation)
    assert ask(reloadable.http_port, "echo.test")[0] == 404
    assert reloadable.routes()["hosts"] == {}
    status, body = reloadable.admin("/readyz")
    assert status == 200, body  # an empty table is still a live table


def test_replaced_file_with_same_size_and_mtime_is_noticed(
    reloadable: Twingress, manifests: Manifests, echo_pair: tuple[EchoBackend, EchoBackend]
) -> None:
    """
    A file replaced by another of the same size whose modification time was
    kept (cp -p, tar, rsync -t, or two writes within one timestamp tick) is
    still a change: it is a new file (inode, ctime), and must be routed by.
    """
    pod_a, pod_b = echo_pair
    target = manifests.path / "echo.yaml"

    def replace(backend: EchoBackend, mtime_ns: Optional[int] = None) -> None:
        objects = [*manifests.service("echo", [backend.address]), manifests.ingress("echo", "echo.test", "echo")]
        text = yaml.safe_dump_all(objects).encode()
        tmp = manifests.path / ".echo.yaml.tmp"
        tmp.write_bytes(text + b"#" * (4095 - len(text)) + b"\n")
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, target)

    generation = reloadable.generation()
    replace(pod_a)
    reloadable.wait_generation_above(generation)
    first = target.stat()
    assert ask(reloadable.http_port, "echo.test") == (200, "pod-a")

    replace(pod_b, mtime_ns=first.st_mtime_ns)
    second = target.stat()
    assert (second.st_size, second.st_mtime_ns) == (first.st_size, first.st_mtime_ns)
    assert (second.st_ino, second.st_ctime_ns) != (first.st_ino, first.st_ctime_ns)
    wait_for(reloadable.http_port, "echo.test", (200, "pod-b"), timeout=5.0)
