"""
Worker processes (C{--workers N}): real twistd process trees, real sockets.

The primary opens the HTTP and HTTPS sockets once and N workers serve them
with a copy of every table; these tests check what an operator relies on:
every worker serves, a change reaches all of them, the metrics add up
exactly, a dead worker is replaced while the rest keep serving, a dead primary
leaves no worker behind, SIGTERM drains the whole tree to exit status 0, and
stream ports open and close in every worker, a UDP client's session staying
in the one worker its flow is hashed to.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.proxy.clients import HeldBackend
from tests.proxy.streams_support import BlockingEchoes, external_stream, many_clients, tcp_answer
from tests.support import ROOT, EchoBackend, Manifests, Twingress, free_port, http_status, twistd_command
from tests.waiting import at_least, eventually


@pytest.fixture(scope="module")
def echoes() -> Iterator[tuple[EchoBackend, EchoBackend]]:
    a, b = EchoBackend("pod-w1", "127.0.0.1"), EchoBackend("pod-w2", "127.0.0.2")
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def start(manifests: Manifests, echoes: tuple[EchoBackend, EchoBackend], twingress: Callable[..., Twingress]) -> Callable[..., Twingress]:
    """twingress on a directory routing C{w.test} to both echo backends."""
    manifests.route("web", "w.test", [e.address for e in echoes])
    return twingress


def _get(port: int, host: str = "w.test", path: str = "/") -> int:
    return http_status(port, host, path)


def _workers(proxy: Twingress) -> list[dict]:
    return json.loads(proxy.admin("/readyz")[1])["workers"]


def _children(pid: int) -> list[int]:
    done = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def _metric(proxy: Twingress, name: str, labels: str = "") -> float:
    """The sample C{name{labels}} of the primary's /metrics (0 when absent)."""
    prefix = f"{name}{{{labels}}} " if labels else f"{name} "
    for line in proxy.admin("/metrics")[1].decode().splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return 0.0


@pytest.mark.parametrize("count", [2, 4])
def test_every_worker_serves_http_and_https(start, count: int) -> None:
    https_port = free_port()
    proxy = start("--workers", str(count), "--https", f"tcp:{https_port}:interface=127.0.0.1")
    workers = _workers(proxy)
    assert len(workers) == count and all(w["alive"] and w["generation"] >= 1 for w in workers)
    assert len(set(_children(proxy.process.pid))) == count  # N processes besides the primary
    assert all(_get(proxy.http_port) == 200 for _ in range(20))
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", https_port, timeout=10, context=context)
    connection.request("GET", "/", headers={"Host": "w.test"})
    assert connection.getresponse().status == 200
    connection.close()


def test_a_change_is_live_in_every_worker(start, manifests: Manifests, echoes) -> None:
    proxy = start("--workers", "4")
    generation = proxy.generation()
    manifests.route("late", "late.test", [echoes[0].address])
    proxy.wait_generation_above(generation)
    eventually(lambda: all(w["generation"] > generation for w in _workers(proxy)), "every worker on the new table")
    statuses = [_get(proxy.http_port, "late.test") for _ in range(64)]  # 64 new connections, spread over the workers
    assert statuses == [200] * 64


def test_metrics_are_summed_exactly_over_the_workers(start) -> None:
    proxy = start("--workers", "4")
    before = _metric(proxy, "twingress_http_requests_total", 'protocol="http/1.1",route="default/web",status="200"')
    for _ in range(100):
        assert _get(proxy.http_port) == 200
    assert _metric(proxy, "twingress_http_requests_total", 'protocol="http/1.1",route="default/web",status="200"') == before + 100
    assert _metric(proxy, "twingress_workers") == 4


def test_a_killed_worker_is_replaced_and_the_others_keep_serving(start) -> None:
    proxy = start("--workers", "2")
    results: list[int] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:
                results.append(_get(proxy.http_port))
            except OSError:
                results.append(0)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        at_least(lambda: results, 20, "answers before the kill")
        victim = _workers(proxy)[0]["pid"]
        os.kill(victim, signal.SIGKILL)
        # The deadline is the promise (a replacement within 5 s), waited on as an event, not timed.
        eventually(lambda: _workers(proxy)[0]["pid"] != victim and _workers(proxy)[0]["generation"] >= 1, "a replacement serving", timeout=5.0)
        at_least(lambda: results, len(results) + 20, "answers after the replacement")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    failed = sum(1 for status in results if status != 200)
    # Each client loses at most the one request the killed worker held: a bound by the event, not by how many answers a loaded machine gave meanwhile.
    assert failed <= len(threads), f"{failed} of {len(results)} requests failed"
    assert _metric(proxy, "twingress_worker_restarts_total") == 1


def test_a_killed_primary_leaves_no_worker(start) -> None:
    proxy = start("--workers", "2")
    workers = _children(proxy.process.pid)
    assert len(workers) == 2
    proxy.process.kill()
    proxy.process.wait()
    eventually(lambda: not any(_alive(pid) for pid in workers), "every worker gone after the primary", timeout=5.0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_sigterm_drains_every_worker_and_the_tree_exits_0(held: HeldBackend, start) -> None:
    proxy = start("--workers", "2", "--shutdown-delay", "0.5", "--drain-timeout", "10")
    workers = _children(proxy.process.pid)
    slow: list[int] = []
    request = threading.Thread(target=lambda: slow.append(_get(proxy.http_port, host="held.test", path="/slow")))
    request.start()
    eventually(held.arrived, "the request to reach the backend before the signal")
    proxy.process.send_signal(signal.SIGTERM)
    eventually(lambda: "listeners closed" in proxy.log(), "the listeners closed after the shutdown delay", context=lambda: proxy.log()[-2000:])
    assert proxy.process.poll() is None, "the request in flight holds the drain"
    held.released.set()
    assert proxy.process.wait(20) == 0
    request.join()
    assert slow == [200]  # the request in flight finished
    assert not any(_alive(pid) for pid in workers)
    log = proxy.log()
    assert log.count("exited: A process has ended without apparent errors: process finished with exit code 0") == 2, log[-3000:]
    assert_clean_stop(log)


def test_once_the_workers_close_their_listeners_new_connections_are_refused(held: HeldBackend, start) -> None:
    """
    The primary keeps a copy of every worker's listening socket (to give a replaced worker its
    slot's socket); kept open through the drain, a socket went on completing handshakes that no
    process accepted, and the kernel reset them when the primary exited: one lost request per
    client on the test node. The drain closes the copies: while a slow request keeps the primary
    (and a worker) running, a new connection is refused at once instead of hanging.
    """
    proxy = start("--workers", "2", "--shutdown-delay", "0.3", "--drain-timeout", "20")
    slow: list[int] = []
    request = threading.Thread(target=lambda: slow.append(_get(proxy.http_port, host="held.test", path="/slow")))
    request.start()
    eventually(held.arrived, "the request to reach the backend before the signal")
    proxy.process.send_signal(signal.SIGTERM)

    def refused_at_once() -> bool:
        """A new connection refused (not accepted, nor left unanswered by a socket still open that drops it)."""
        try:
            socket.create_connection(("127.0.0.1", proxy.http_port), timeout=0.5).close()
        except ConnectionRefusedError:
            return True
        except TimeoutError:
            raise AssertionError("no answer (a socket still open, dropping the attempt)") from None
        raise AssertionError("accepted")

    eventually(refused_at_once, "new connections refused once the workers closed their listeners", timeout=3.0)
    assert proxy.process.poll() is None  # the primary still drains the slow request
    held.released.set()
    request.join()
    assert slow == [200]
    assert proxy.process.wait(20) == 0


CLEAN_STOP_OFFENCES = re.compile(r"#(error|critical)\]|\[stderr#|Unhandled error|Traceback|the primary process is gone")


def assert_clean_stop(log: str) -> None:
    """Nothing at level error or critical, no traceback, no worker that took the primary's drain for its death."""
    offences = [line for line in log.splitlines() if CLEAN_STOP_OFFENCES.search(line)]
    assert not offences, "\n".join(offences[:20])


@pytest.mark.parametrize("workers", ["1", "2", "auto"])
def test_a_clean_stop_without_traffic_logs_nothing_above_info(start, workers: str) -> None:
    """
    Issue 30: every SIGTERM to a primary with workers logged four C{Unhandled error in Deferred:
    CancelledError} at level critical (a listener stopped twice: by the drain, then by the
    shutdown), and each worker warned that the primary was gone while it was only draining.
    """
    proxy = start("--workers", workers, "--https", f"tcp:{free_port()}:interface=127.0.0.1", "--shutdown-delay", "0.2")
    proxy.process.send_signal(signal.SIGTERM)
    assert proxy.process.wait(20) == 0
    assert "Server Shut Down." in proxy.log()
    assert_clean_stop(proxy.log())


def test_workers_serve_when_the_primary_is_pid_1(manifests: Manifests, echoes, tmp_path: Path) -> None:
    """
    In a container the primary is PID 1 (Kubernetes adds no init process): a worker must not take
    "my parent is PID 1" for "the primary died" (issue 30: every worker exited at once, restarted
    with backoff forever, and /readyz stayed 503). A new PID namespace makes twistd PID 1 here.
    """
    manifests.route("web", "w.test", [e.address for e in echoes])
    http_port, admin_port = free_port(), free_port()
    command = ["unshare", "--pid", "--fork", "--kill-child", *twistd_command(["--manifests", str(manifests.path)], http_port, admin_port, ["--workers", "2"])]
    log_path = tmp_path / "pid1.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: _ready(admin_port) or process.poll() is not None, "/readyz 200 with the primary as PID 1", timeout=30.0)
        assert process.poll() is None, log_path.read_text()
        (primary,) = _children(process.pid)
        assert _namespaced_pid(primary) == 1  # twistd really is PID 1 of its PID namespace
        workers = json.loads(_admin(admin_port, "/readyz"))["workers"]
        assert [w["restarts"] for w in workers] == [0, 0], workers
        assert all(_get(http_port) == 200 for _ in range(10))
        assert "primary process is gone" not in log_path.read_text()
        assert "twingress worker" not in log_path.read_text()
    finally:
        for primary in _children(process.pid):  # unshare's child: PID 1 inside, the twistd primary
            os.kill(primary, signal.SIGTERM)
        process.wait(20)


def _namespaced_pid(pid: int) -> int:
    """The PID of C{pid} in its own (innermost) PID namespace."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    raise AssertionError("no NSpid")


def _admin(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
        return response.read()


def _ready(port: int) -> bool:
    try:
        _admin(port, "/readyz")
        return True
    except OSError:
        return False


def test_a_replacement_worker_accepts_only_once_it_serves_the_table(manifests: Manifests, echoes, twingress) -> None:
    """
    Issue 30: a replacement worker listened before its first table arrived, so in the second it
    started, new connections got 404 "no matching route" (and TLS the default certificate). With
    a large table the window is wide; clients open a new connection per request while one worker
    is killed again and again, and every answer must come from the table.
    """
    backends = [e.address for e in echoes]
    objects = []
    for index in range(600):
        name = f"r{index}"
        objects += [*manifests.service(name, backends), manifests.ingress(name, f"h{index}.test", name)]
    manifests.write("many.yaml", *objects)
    # HTTPS on: a table then goes live only after its TLS contexts are made on a thread, the wider
    # window. 600 routes: the first build takes a while on a loaded machine.
    proxy = twingress("--workers", "2", "--https", f"tcp:{free_port()}:interface=127.0.0.1", ready_timeout=90.0)
    statuses: list[int] = []
    stop = threading.Event()

    def load(offset: int) -> None:
        index = offset
        while not stop.is_set():
            index = (index + 37) % 600
            try:
                statuses.append(_get(proxy.http_port, host=f"h{index}.test"))
            except OSError:
                statuses.append(0)

    threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):
            victim = _workers(proxy)[0]["pid"]
            os.kill(victim, signal.SIGKILL)
            eventually(lambda victim=victim: _workers(proxy)[0]["pid"] != victim and _workers(proxy)[0]["generation"] >= 1, "a replacement serving", timeout=30.0)
            at_least(lambda: statuses, len(statuses) + 20, "answers after the replacement", timeout=30.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    counts = {status: statuses.count(status) for status in set(statuses)}
    assert len(statuses) > 50, counts
    assert counts.get(404, 0) == 0, f"answers before the table was live: {counts}"


def test_access_log_lines_stay_whole_under_load_from_four_workers(start, tmp_path: Path) -> None:
    access = tmp_path / "access.log"
    proxy = start("--workers", "4", "--access-log", str(access))

    def load() -> None:
        for _ in range(100):
            _get(proxy.http_port, path="/" + "x" * 200)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    eventually(lambda: access.exists() and len(access.read_text().splitlines()) >= 800, "800 access-log lines", timeout=5.0)
    lines = access.read_text().splitlines()
    assert len(lines) == 800
    line_re = re.compile(r'^127\.0\.0\.1 - - \[[^\]]+\] "GET /x{200} HTTP/1\.1" 200 \d+ "-" "[^"]*" host=w\.test route=default/web ')
    assert all(line_re.match(line) for line in lines), [line for line in lines if not line_re.match(line)][:3]


def _stream_ports(proxy: Twingress) -> list[list[str]]:
    """The stream ports each worker listens on, as it reported with its last table."""
    return [worker["streams"] for worker in _workers(proxy)]


def _metric_sum(proxy: Twingress, name: str, label: str) -> float:
    """The sum of the samples of C{name} that carry the label C{label} (C{'route="ns/name"'})."""
    total = 0.0
    for line in proxy.admin("/metrics")[1].decode().splitlines():
        if line.startswith(name + "{") and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_stream_port_opens_and_closes_in_every_worker(start, manifests: Manifests) -> None:
    echo = BlockingEchoes(b"a")
    port = free_port()
    try:
        proxy = start("--workers", "4", "--stream-interface", "127.0.0.1", "--stream-drain-timeout", "1")
        manifests.write("s.yaml", external_stream("s-tcp", "TCP", port, echo.port))
        eventually(lambda: _stream_ports(proxy) == [[f"TCP/{port}"]] * 4, "every worker listening on the new port")
        assert [tcp_answer(port) for _ in range(64)] == [b"a"] * 64  # new connections, hashed over the four sockets
        assert proxy.routes()["streamListeners"]["listening"][f"TCP/{port}"]["route"] == "default/s-tcp"

        manifests.remove("s.yaml")
        eventually(lambda: _stream_ports(proxy) == [[]] * 4, "every worker closed the port")
        assert tcp_answer(port) == b"<ConnectionRefusedError>"
        assert proxy.routes()["streamListeners"] == {"listening": {}, "failed": {}}
    finally:
        echo.close()


def test_udp_sessions_with_four_workers_get_only_their_own_replies(start, manifests: Manifests) -> None:
    echo = BlockingEchoes(b"u")
    port = free_port(kind=socket.SOCK_DGRAM)
    manifests.write("s.yaml", external_stream("s-udp", "UDP", port, echo.udp_port))
    try:
        proxy = start("--workers", "4", "--stream-interface", "127.0.0.1")
        eventually(lambda: _stream_ports(proxy) == [[f"UDP/{port}"]] * 4, "every worker listening on the UDP port")
        answers = many_clients(port, clients=100, rounds=3)
        for index, replies in enumerate(answers):
            assert replies == [f"u:client {index} message {n}".encode() for n in range(3)]
        assert _metric_sum(proxy, "twingress_stream_connections_total", 'route="default/s-udp"') == 100  # one session each
    finally:
        echo.close()


def test_a_taken_stream_port_is_reported_by_the_primary(start, manifests: Manifests) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        taken = busy.getsockname()[1]
        manifests.write("s.yaml", external_stream("taken", "TCP", taken, 9))
        proxy = start("--workers", "2", "--stream-interface", "127.0.0.1")
        assert "in use" in proxy.routes()["streamListeners"]["failed"][f"TCP/{taken}"]
        assert _metric_sum(proxy, "twingress_stream_listener_errors_total", f'port="{taken}"') == 1  # once, not once per process
        problems = [p for p in proxy.routes()["problems"] if p["reason"] == "PortUnavailable"]
        assert [p["object"] for p in problems] == ["StreamIngress/default/taken"]


def test_a_killed_workers_stream_connections_wait_for_its_replacement(start, manifests: Manifests) -> None:
    """
    Issue 63, worker restart: the primary owns the stream ports' sockets, so connections queued on a
    killed worker's socket (completed by the kernel while no worker accepted them) are served by its
    replacement; when each worker bound its own socket they were reset with it.  Worker 0 is stopped
    first, so the connections hashed to its socket can only wait in its queue; 32 connections leave
    none of them on worker 1's socket alone with a chance of 2**-32.
    """
    echo = BlockingEchoes(b"a")
    port = free_port()
    try:
        proxy = start("--workers", "2", "--stream-interface", "127.0.0.1")
        manifests.write("s.yaml", external_stream("s-tcp", "TCP", port, echo.port))
        eventually(lambda: _stream_ports(proxy) == [[f"TCP/{port}"]] * 2, "both workers listening on the stream port")
        victim = _workers(proxy)[0]["pid"]
        os.kill(victim, signal.SIGSTOP)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(32)]  # queued on the stopped worker's socket, or answered
        os.kill(victim, signal.SIGKILL)
        clients += [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(32)]  # while no process accepts on that socket
        eventually(lambda: _workers(proxy)[0]["pid"] != victim and _stream_ports(proxy)[0] == [f"TCP/{port}"], "a replacement serving the stream port", timeout=15.0)
        answers = []
        for client in clients:
            with client:
                try:
                    answers.append(client.recv(100))
                except OSError as error:
                    answers.append(f"<{type(error).__name__}>".encode())
        assert answers == [b"a"] * 64, {answer: answers.count(answer) for answer in set(answers)}
        assert _metric(proxy, "twingress_worker_restarts_total") == 1
    finally:
        echo.close()
