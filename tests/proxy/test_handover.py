"""
Listening sockets handed over between two twingress processes on one host (C{--handover}): real
twistd processes, real clients, the kernel's own sockets (their inodes, as ss shows them).

An upgrade with the hand-over loses nothing: clients opening connections without pause and a
keep-alive client see every request answered, none refused, none reset, and the listening sockets
after it are the ones before it.  Without it (stop the old process, start the new one) the same
clients are refused: those counts are printed.  Each fault of the protocol leaves the running
process serving.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from ingress.process.handoverwire import FrameReader, frame, new_nonce
from tests.proxy import handover_support
from tests.proxy.handover_support import Node, Traffic, assert_nothing_lost, key_file, listening_inodes, print_counts, start_node, wait_for
from tests.support import ROOT, EchoBackend, Manifests, free_port, http_status, unavailable

# The shared fixtures (tests/proxy/handover_support.py), under the names the tests take.
echo, site, nodes = handover_support.echo, handover_support.site, handover_support.nodes


def _upgrade(site: Manifests, nodes: list[Node], tmp: Path, old_args: tuple[str, ...], new_args: tuple[str, ...], prefix: tuple[str, ...] = ()) -> None:
    port, tls_port = free_port(), free_port()
    handover = ("--handover", str(tmp / "handover.sock"), "--handover-key-file", str(key_file(tmp)), "--https", f"tcp:{tls_port}:interface=127.0.0.1")
    old = start_node(nodes, site, port, *handover, *old_args, prefix=prefix)
    before, tls_before = listening_inodes(port), listening_inodes(tls_port)
    assert before and tls_before
    with Traffic(port) as traffic:
        traffic.wait_answered(50)
        new = start_node(nodes, site, port, *handover, *new_args, prefix=prefix)
        assert old.wait_exit() == 0, old.log()[-3000:]
        traffic.wait_answered(50)
        counts = traffic.stop()
    print_counts(f"hand-over {' '.join(old_args) or '--workers 1'} -> {' '.join(new_args) or '--workers 1'}", counts)
    assert_nothing_lost(counts)
    assert listening_inodes(port) == before and listening_inodes(tls_port) == tls_before
    assert _tls_handshake(tls_port)
    assert "handover: received" in new.log() and "handed over: no new connections here" in old.log()
    # the new one offers them in turn: a third takes them from it
    third = start_node(nodes, site, port, *handover, prefix=prefix)
    assert new.wait_exit() == 0
    assert http_status(port, "w.test") == 200 and listening_inodes(port) == before
    assert third.process.poll() is None


def _tls_handshake(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the self-signed default certificate
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw, server_hostname="w.test") as tls:
        return tls.version() is not None


def test_handover_loses_no_connection(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    _upgrade(site, nodes, tmp_path, (), ())


def test_handover_between_two_worker_pools(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    _upgrade(site, nodes, tmp_path, ("--workers", "2"), ("--workers", "2"))


def test_handover_from_two_workers_to_one(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    """Both sockets of the old SO_REUSEPORT group are served by the one process that follows: none is closed."""
    _upgrade(site, nodes, tmp_path, ("--workers", "2"), ("--workers", "1"))


def test_handover_from_one_process_to_two_workers(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    port = free_port()
    handover = ("--handover", str(tmp_path / "handover.sock"), "--handover-key-file", str(key_file(tmp_path)))
    old = start_node(nodes, site, port, *handover)
    before = listening_inodes(port)
    with Traffic(port) as traffic:
        traffic.wait_answered(50)
        start_node(nodes, site, port, *handover, "--workers", "2")
        assert old.wait_exit() == 0
        traffic.wait_answered(50)
        counts = traffic.stop()
    print_counts("hand-over --workers 1 -> --workers 2", counts)
    assert_nothing_lost(counts)
    after = listening_inodes(port)
    assert before < after and len(after) == 2  # the old socket kept, one more bound into its group


def _need(tool: str) -> None:
    """The util-linux tool a test runs: missing, the test fails under TWINGRESS_REQUIRE_KUBE=1 (CI) rather than skip."""
    if shutil.which(tool) is None:
        unavailable(f"{tool} (util-linux) is not installed")


def test_handover_without_capabilities(site: Manifests, nodes: list[Node], echo: EchoBackend) -> None:
    """
    Both processes as an unprivileged user with no capability at all (setpriv): the hand-over needs none.
    A root process (another uid) that reaches the rendezvous is refused by its peer credentials.
    """
    _need("setpriv")
    shared = Path(tempfile.mkdtemp(prefix="twingress-handover-"))
    try:
        os.chmod(shared, 0o755)
        manifests = Manifests(shared / "manifests")
        manifests.path.mkdir()
        manifests.route("web", "w.test", [echo.address])
        key = key_file(shared)
        for path in (shared, key):
            os.chown(path, 65534, 65534)
        prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all")
        _upgrade(manifests, nodes, shared, (), (), prefix)
        serving = nodes[-1]
        status = Path(f"/proc/{serving.process.pid}/status").read_text()  # setpriv execs: the same pid is twistd
        assert "\nUid:\t65534\t" in status and "\nCapEff:\t0000000000000000" in status and "\nCapBnd:\t0000000000000000" in status
        with socket.socket(socket.AF_UNIX) as stranger:  # root: the file's mode does not stop it, SO_PEERCRED does
            stranger.connect(str(shared / "handover.sock"))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it may have hung up already
                stranger.sendall(frame({"type": "hello", "version": 1, "nonce": new_nonce().hex()}))
            assert _answer(stranger) == ([], 0)  # nothing, not even why
        serving.wait_log("refused a peer on")
        assert "a peer of uid 0" in serving.log()
        assert http_status(serving.http_port, "w.test") == 200 and serving.process.poll() is None
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_stop_then_start_loses_connections(site: Manifests, nodes: list[Node]) -> None:
    """Without the hand-over: the old process stops, then the new one starts. Counted and printed, not asserted."""
    port = free_port()
    old = start_node(nodes, site, port)
    with Traffic(port) as traffic:
        traffic.wait_answered(50)
        old.process.terminate()
        assert old.wait_exit() == 0
        start_node(nodes, site, port)
        traffic.wait_answered(50)
        counts = traffic.stop()
    print_counts("stop, then start (no hand-over)", counts)
    assert counts.sent > 0


def test_a_socket_bound_elsewhere_is_not_adopted(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    """The new version listens on another port: the old socket is refused (logged), the new port bound fresh, the old one drains."""
    old, handover = _serving(site, nodes, tmp_path)
    new = start_node(nodes, site, free_port(), *handover)
    assert old.wait_exit() == 0
    assert f"the predecessor's http socket is bound to ('127.0.0.1', {old.http_port}), not where --http" in new.log()
    assert http_status(new.http_port, "w.test") == 200
    assert listening_inodes(old.http_port) == set()


# -- faults


def _answer(peer: socket.socket) -> tuple[list[dict], int]:
    """Every frame the other side sends until it closes, and how many descriptors came with them."""
    peer.settimeout(10)
    reader, frames, fds = FrameReader(), [], 0
    while True:
        try:
            data, received, _, _ = socket.recv_fds(peer, 65536, 16)
        except ConnectionResetError:  # closed with what we sent unread
            return frames, fds
        fds += len(received)
        for fd in received:
            os.close(fd)
        if not data:
            return frames, fds
        frames.extend(reader.feed(data))


def _serving(site: Manifests, nodes: list[Node], tmp: Path) -> tuple[Node, tuple[str, ...]]:
    handover = ("--handover", str(tmp / "handover.sock"), "--handover-key-file", str(key_file(tmp)))
    return start_node(nodes, site, free_port(), *handover), handover


def _still_serving(node: Node) -> None:
    assert node.process.poll() is None
    assert http_status(node.http_port, "w.test") == 200


def test_a_wrong_key_is_refused(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    old, handover = _serving(site, nodes, tmp_path)
    other = key_file(tmp_path, "other", b"another key, not the predecessor's")
    new = start_node(nodes, site, old.http_port, *handover[:3], str(other), wait=False)
    assert new.wait_exit() == 1
    lines = [line for line in new.log().splitlines() if "twistd ingress:" in line]
    assert len(lines) == 1 and "--handover" in lines[0] and "wrong proof" in lines[0], new.log()
    assert "Traceback" not in new.log()
    old.wait_log("went away before proving")
    _still_serving(old)
    assert "handed over:" not in old.log()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xff" + b"x" * 64,  # a frame far longer than any message
        b"\x00\x00\x00\x05{oops",  # not JSON
        frame({"type": "ready"}),  # "ready" before any proof: would make the predecessor stop
        frame({"type": "hello", "version": 1, "nonce": "00"}),  # a nonce too short
    ],
)
def test_a_garbled_or_hostile_peer_is_refused(site: Manifests, nodes: list[Node], tmp_path: Path, garbage: bytes) -> None:
    old, _ = _serving(site, nodes, tmp_path)
    with socket.socket(socket.AF_UNIX) as peer:
        peer.connect(str(tmp_path / "handover.sock"))
        peer.sendall(garbage)
        frames, fds = _answer(peer)
        assert [message["type"] for message in frames] == ["refused"] and fds == 0  # why, and nothing else
    old.wait_log("refused a peer on")
    _still_serving(old)
    # and a real successor still takes the sockets from it afterwards
    start_node(nodes, site, old.http_port, "--handover", str(tmp_path / "handover.sock"), "--handover-key-file", str(tmp_path / "key"))
    assert old.wait_exit() == 0


_CRASHING_SUCCESSOR = """
import os, signal, sys
from ingress.process.takeover import take_listeners
from ingress.process.handoverwire import read_key
taken = take_listeners(sys.argv[1], read_key(sys.argv[2]))
print("received", len(taken.sockets), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_successor_that_dies_before_ready_leaves_the_old_one_serving(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    """A successor killed after it received the sockets, before it said ready: the old one serves on, losing nothing."""
    old, handover = _serving(site, nodes, tmp_path)
    with Traffic(old.http_port) as traffic:
        traffic.wait_answered(20)
        crashed = subprocess.run(
            [sys.executable, "-c", _CRASHING_SUCCESSOR, str(tmp_path / "handover.sock"), str(tmp_path / "key")],
            cwd=ROOT, capture_output=True, text=True, timeout=30,
        )
        assert crashed.returncode == -signal.SIGKILL and "received 1" in crashed.stdout, crashed.stderr
        old.wait_log("the successor went away before it was ready; serving on")
        traffic.wait_answered(50)
        counts = traffic.stop()
    assert_nothing_lost(counts)
    _still_serving(old)
    assert "handed over:" not in old.log()
    start_node(nodes, site, old.http_port, *handover)  # the next one takes them
    assert old.wait_exit() == 0


_WAITING_SUCCESSOR = """
import sys
from ingress.process.takeover import take_listeners
from ingress.process.handoverwire import read_key
taken = take_listeners(sys.argv[1], read_key(sys.argv[2]))
print("received", len(taken.sockets), flush=True)
sys.stdin.read()
"""


def test_a_second_successor_during_a_hand_over_waits_its_turn(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    """
    Two new processes at once: one wins, the other waits.  The first successor holds the hand-over (it took
    the sockets and never says ready); a second, meanwhile, is refused "in progress" and waits (a log line,
    no exit); the first goes away, the old one serves on, and the second then takes the sockets from it.
    """
    old, handover = _serving(site, nodes, tmp_path)
    first = subprocess.Popen(
        [sys.executable, "-c", _WAITING_SUCCESSOR, str(tmp_path / "handover.sock"), str(tmp_path / "key")],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "received 1"
        second = start_node(nodes, site, old.http_port, *handover, wait=False)
        second.wait_log("waiting for our turn")
        assert second.process.poll() is None and "a hand-over to another process is in progress" in second.log()
    finally:
        first.kill()
        first.wait()
    old.wait_log("the successor went away before it was ready; serving on")
    wait_for(second.ready, 40, "the second successor serving", second)
    assert "handover: received" in second.log(), second.log()
    assert old.wait_exit() == 0
    assert http_status(second.http_port, "w.test") == 200


_HOLDING_SUCCESSOR = """
import select, sys
from ingress.process.takeover import take_listeners
from ingress.process.handoverwire import read_key

taken = take_listeners(sys.argv[1], read_key(sys.argv[2]))
print("received", len(taken.sockets), flush=True)
sys.stdin.readline()
readable, _, _ = select.select([sock for _, sock in taken.sockets], [], [], 20)
connection, _ = readable[0].accept()
print("accepted", flush=True)
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_drain_while_a_successor_holds_the_sockets_leaves_them_as_they_are(site: Manifests, nodes: list[Node], tmp_path: Path, workers: str) -> None:
    """
    SIGTERM reaches the old process after it sent its sockets, before the successor said ready: its drain must
    not attach the filter that drops connection attempts (it is the socket's, so the successor's too).
    """
    handover = ("--handover", str(tmp_path / "handover.sock"), "--handover-key-file", str(key_file(tmp_path)))
    old = start_node(nodes, site, free_port(), *handover, "--workers", workers, "--handover-wait", "0")  # the SIGTERM drains at once
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDING_SUCCESSOR, str(tmp_path / "handover.sock"), str(tmp_path / "key")],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip().startswith("received")
        old.process.terminate()
        assert old.wait_exit() == 0
        assert "cannot drop new connection attempts" not in old.log()
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        with socket.create_connection(("127.0.0.1", old.http_port), timeout=5):  # a dropped SYN would time out here
            assert holder.stdout.readline().strip() == "accepted"
    finally:
        holder.kill()
        holder.wait()


def test_a_predecessor_that_dies_mid_handover_means_binding_fresh(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    """Something at the rendezvous reads the hello and goes away (a predecessor dying): the new one binds fresh and serves."""
    path = tmp_path / "handover.sock"
    dying = socket.socket(socket.AF_UNIX)
    dying.bind(str(path))
    dying.listen(1)
    port = free_port()
    new = start_node(nodes, site, port, "--handover", str(path), "--handover-key-file", str(key_file(tmp_path)), wait=False)
    connection, _ = dying.accept()
    connection.settimeout(10)
    assert FrameReader().feed(connection.recv(65536))[0]["type"] == "hello"
    connection.close()
    dying.close()
    wait_for(new.ready, 30, "the new process ready", new)
    assert "binding fresh" in new.log()
    assert http_status(port, "w.test") == 200
    new.wait_log("a successor may take the listening sockets at")


def test_a_stranger_on_the_port_is_still_an_error(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen(1)
        port = stranger.getsockname()[1]
        new = start_node(nodes, site, port, "--handover", str(tmp_path / "handover.sock"), "--handover-key-file", str(key_file(tmp_path)), wait=False)
        assert new.wait_exit() == 1
    lines = [line for line in new.log().splitlines() if "twistd ingress:" in line]
    assert len(lines) == 1 and f"--http tcp:{port}:interface=127.0.0.1: cannot listen" in lines[0], new.log()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--handover", "/tmp/x.sock"), "--handover needs --handover-key-file"),
        (("--handover", "/tmp/x.sock", "--handover-key-file", "/nonexistent/key"), "--handover-key-file '/nonexistent/key'"),
        (("--handover", "/tmp/x.sock", "--handover-key-file", "/dev/null"), "a key has at least 16"),
        (("--handover", "/nonexistent/x.sock", "--handover-key-file", "/dev/null"), "--handover '/nonexistent/x.sock': its directory does not exist"),
    ],
)
def test_bad_handover_options_are_one_line(site: Manifests, args: tuple[str, ...], message: str) -> None:
    node = Node(site.path, free_port(), *args, wait=False)
    try:
        assert node.wait_exit() == 1
        assert message in node.log() and "Traceback" not in node.log(), node.log()
    finally:
        node.stop()


def test_handover_needs_tcp_listeners(site: Manifests, tmp_path: Path) -> None:
    """Only a plain TCP socket can be handed over and checked: another endpoint kind is a usage error."""
    args = ("--handover", str(tmp_path / "h.sock"), "--handover-key-file", str(key_file(tmp_path)), "--https", "unix:/tmp/twingress-h.sock")
    node = Node(site.path, free_port(), *args, wait=False)
    try:
        assert node.wait_exit() == 1
        assert "with --handover a listener must be tcp: or tcp6:" in node.log() and "Traceback" not in node.log(), node.log()
    finally:
        node.stop()


def test_a_request_in_flight_at_the_hand_over_is_answered_by_the_old_process(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    old, handover = _serving(site, nodes, tmp_path)
    answers: list[int] = []
    slow = threading.Thread(target=lambda: answers.append(http_status(old.http_port, "w.test", "/?delay=2")), daemon=True)
    slow.start()
    wait_for(lambda: old.metric_open() > 0, 10, "the slow request open in the old process", old)
    start_node(nodes, site, old.http_port, *handover)
    assert old.wait_exit() == 0
    slow.join(10)
    assert answers == [200]
    assert "drain over (drained)" in old.log()


def test_a_rendezvous_that_cannot_be_made_is_one_line(echo: EchoBackend) -> None:
    """A directory the process may not write in: the start fails with one line naming --handover."""
    _need("setpriv")
    shared = Path(tempfile.mkdtemp(prefix="twingress-handover-"))
    try:
        os.chmod(shared, 0o755)  # root's: the unprivileged process reads it and cannot create the socket there
        manifests = Manifests(shared / "manifests")
        manifests.path.mkdir()
        manifests.route("web", "w.test", [echo.address])
        key = key_file(shared)
        os.chown(key, 65534, 65534)
        prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        node = Node(manifests.path, free_port(), "--handover", str(shared / "h.sock"), "--handover-key-file", str(key), prefix=prefix, wait=False)
        try:
            assert node.wait_exit() == 1
            lines = [line for line in node.log().splitlines() if "twistd ingress:" in line]
            assert len(lines) == 1 and f"--handover {shared / 'h.sock'}: cannot listen" in lines[0], node.log()
            assert "Traceback" not in node.log()
        finally:
            node.stop()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
