"""
A twingress with C{--handover} stopped before its successor exists (C{kubectl delete pod}: SIGTERM first):
it serves on for C{--handover-wait} seconds with its listening sockets held, hands them over if a successor
comes meanwhile, and drains as without the option if none does.  Real twistd processes, real clients.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.proxy import handover_support
from tests.proxy.handover_support import Node, Traffic, assert_nothing_lost, key_file, listening_inodes, print_counts, start_node
from tests.support import Manifests, free_port, http_status, unavailable

# The shared fixtures (tests/proxy/handover_support.py), under the names the tests take.
echo, site, nodes = handover_support.echo, handover_support.site, handover_support.nodes

WAITING = "while a successor may take the listening sockets"


def _handover(tmp: Path) -> tuple[str, ...]:
    return ("--handover", str(tmp / "handover.sock"), "--handover-key-file", str(key_file(tmp)))


def _terminated(node: Node) -> None:
    """SIGTERM, and the process says it waits (it then serves on, not ready)."""
    node.process.terminate()
    node.wait_log(WAITING)
    answer = node.readyz()
    assert answer.startswith(b"HTTP/1.1 503") and b'"handover_wait": true' in answer, answer


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_successor_after_the_sigterm_takes_the_sockets_and_loses_nothing(site: Manifests, nodes: list[Node], tmp_path: Path, workers: str) -> None:
    """
    SIGTERM first, the successor later, clients opening connections without pause all along: every request
    answered, none refused or reset, the same listening socket after.  The wait (600 s) is far longer than the
    test's deadline for the old process's exit: it exits because it handed over.
    """
    port = free_port()
    old = start_node(nodes, site, port, *_handover(tmp_path), "--handover-wait", "600", "--workers", workers)
    before = listening_inodes(port)
    assert before
    with Traffic(port) as traffic:
        traffic.wait_answered(50)
        _terminated(old)
        traffic.wait_answered(50)  # served during the wait
        new = start_node(nodes, site, port, *_handover(tmp_path), "--workers", workers)
        assert old.wait_exit(30) == 0, old.log()[-3000:]
        traffic.wait_answered(50)
        counts = traffic.stop()
    print_counts(f"SIGTERM, then a successor (--workers {workers})", counts)
    assert_nothing_lost(counts)
    assert listening_inodes(port) == before
    assert "handed over: no new connections here" in old.log() and "handover: received" in new.log()
    assert "no successor took" not in old.log()
    assert http_status(port, "w.test") == 200 and new.process.poll() is None


@pytest.mark.parametrize("workers", ["1", "2"])
def test_no_successor_means_serving_through_the_wait_then_draining(site: Manifests, nodes: list[Node], tmp_path: Path, workers: str) -> None:
    old = start_node(nodes, site, free_port(), *_handover(tmp_path), "--handover-wait", "5", "--workers", workers)
    _terminated(old)
    assert http_status(old.http_port, "w.test") == 200
    assert "no successor took" not in old.log()  # that answer came during the wait
    assert old.wait_exit(40) == 0, old.log()[-3000:]
    log = old.log()
    assert "no successor took the listening sockets in time: draining" in log and "drain over" in log
    assert "handed over:" not in log


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_second_sigterm_ends_the_wait(site: Manifests, nodes: list[Node], tmp_path: Path, workers: str) -> None:
    """An operator's second Ctrl-C: the drain starts at once; a 600 s wait would miss the exit's deadline."""
    old = start_node(nodes, site, free_port(), *_handover(tmp_path), "--handover-wait", "600", "--workers", workers)
    _terminated(old)
    old.process.terminate()
    assert old.wait_exit(30) == 0, old.log()[-3000:]
    assert "SIGTERM during the wait for a successor: draining now" in old.log()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_twice_in_a_terminal(site: Manifests, nodes: list[Node], tmp_path: Path, workers: str) -> None:
    """
    SIGINT to the whole process group, as a terminal's Ctrl-C sends it (workers included): the wait serves on
    (the workers leave their drain to the primary), and a second Ctrl-C drains at once.
    """
    if shutil.which("setsid") is None:
        unavailable("setsid (util-linux) is not installed")
    old = start_node(nodes, site, free_port(), *_handover(tmp_path), "--handover-wait", "600", "--workers", workers, prefix=("setsid",))
    assert os.getpgid(old.process.pid) == old.process.pid  # its own group: the SIGINT below reaches it alone
    os.killpg(old.process.pid, signal.SIGINT)
    old.wait_log(WAITING)
    assert http_status(old.http_port, "w.test") == 200 and old.process.poll() is None
    os.killpg(old.process.pid, signal.SIGINT)
    assert old.wait_exit(30) == 0, old.log()[-3000:]
    assert "SIGINT during the wait for a successor: draining now" in old.log()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--handover-wait", "5"), "--handover-wait needs --handover"),
        (("--handover-wait", "-1", "--handover", "HANDOVER"), "--handover-wait: -1 is negative"),
        (("--handover-wait", "soon", "--handover", "HANDOVER"), "--handover-wait: could not convert"),
    ],
)
def test_bad_handover_wait_is_one_line(site: Manifests, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    args = tuple(str(tmp_path / "h.sock") if arg == "HANDOVER" else arg for arg in args)
    if "--handover" in args:
        args += ("--handover-key-file", str(key_file(tmp_path)))
    node = Node(site.path, free_port(), *args, wait=False)
    try:
        assert node.wait_exit() == 1
        lines = [line for line in node.log().splitlines() if "twistd ingress:" in line]
        assert len(lines) == 1 and message in lines[0], node.log()
        assert "Traceback" not in node.log()
    finally:
        node.stop()
