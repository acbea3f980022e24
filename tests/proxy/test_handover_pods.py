"""
The hand-over as k8s/'s DaemonSet runs it, between real twistd processes with no capability: the rendezvous on
a Linux abstract name (C{--handover @NAME}: no file, no volume), the admin listener on a unix socket of each
process's own (what the kubelet's exec probe, C{python -m ingress.probe}, asks), and C{--after-handover wait}:
the old process, whose successor took over with no SIGTERM first (a surge pod), drains and then stays,
holding nothing, /healthz 200 and /readyz 503, until its SIGTERM, which it answers by exiting 0 at once.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingress.probe import probe
from tests.proxy import handover_support
from tests.proxy.handover_support import Node, Traffic, assert_nothing_lost, key_file, listening_inodes, print_counts, start_node, wait_for
from tests.support import ROOT, EchoBackend, Manifests, free_port, http_status, unavailable

echo, nodes = handover_support.echo, handover_support.nodes

NOBODY = 65534


@pytest.fixture
def shared(echo: EchoBackend) -> Iterator[Path]:
    """A directory an unprivileged twingress can use (its manifests, its key, each process's admin socket)."""
    path = Path(tempfile.mkdtemp(prefix="twingress-pods-"))
    os.chmod(path, 0o755)
    manifests = Manifests(path / "manifests")
    manifests.path.mkdir()
    manifests.route("web", "w.test", [echo.address])
    key = key_file(path)
    for each in (path, key):
        os.chown(each, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _prefix() -> tuple[str, ...]:
    """Each process as nobody with no capability (as root runs the tests); as the current user otherwise."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        unavailable("setpriv (util-linux) is not installed")
    return ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all")


def _pod(nodes: list[Node], shared: Path, port: int, name: str, rendezvous: str) -> tuple[Node, str]:
    """A twingress as the DaemonSet's container runs: its admin on its own unix socket, ready once its probe says so."""
    admin = str(shared / f"{name}-admin.sock")
    node = start_node(
        nodes, Manifests(shared / "manifests"), port,
        "--handover", rendezvous, "--handover-key-file", str(shared / "key"), "--after-handover", "wait", "--admin", f"unix:{admin}",
        prefix=_prefix(), wait=False,
    )
    wait_for(lambda: node.process.poll() is None and probe(admin, "/readyz")[0], 30, f"{name} ready (its probe)", node)
    return node, admin


def _probe_command(admin: str, path: str) -> subprocess.CompletedProcess[str]:
    """The kubelet's exec probe, as k8s/ writes it."""
    return subprocess.run([sys.executable, "-m", "ingress.probe", admin, path], cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_a_surge_hand_over_on_an_abstract_name_then_the_old_one_waits_for_its_sigterm(nodes: list[Node], shared: Path) -> None:
    port, rendezvous = free_port(), f"@twingress-test-{secrets.token_hex(6)}"
    old, old_admin = _pod(nodes, shared, port, "old", rendezvous)
    before = listening_inodes(port)
    assert before and not list(shared.glob("*handover*"))  # no file: the name is the network namespace's
    with Traffic(port) as traffic:
        traffic.wait_answered(50)
        new, new_admin = _pod(nodes, shared, port, "new", rendezvous)
        old.wait_log("drain over (drained)", timeout=30)
        traffic.wait_answered(50)
        counts = traffic.stop()
    print_counts("hand-over over an abstract name, --after-handover wait", counts)
    assert_nothing_lost(counts)
    assert listening_inodes(port) == before
    assert "holding nothing, /readyz 503, exiting on SIGTERM" in old.log()
    healthz, readyz, ready = _probe_command(old_admin, "/healthz"), _probe_command(old_admin, "/readyz"), _probe_command(new_admin, "/readyz")
    assert old.process.poll() is None  # still, after the drain and the probes (the kubelet would restart an exited container)
    assert healthz.returncode == 0 and ready.returncode == 0, (healthz, ready)
    assert readyz.returncode == 1 and '"handed_over": true' in readyz.stderr and len(readyz.stderr.strip().splitlines()) == 1, readyz
    signalled = time.monotonic()
    old.process.terminate()
    assert old.wait_exit(timeout=10) == 0
    print(f"\nthe held process exited {time.monotonic() - signalled:.2f}s after its SIGTERM")
    # the successor took the name over: a third takes the sockets from it in turn
    third, _ = _pod(nodes, shared, port, "third", rendezvous)
    new.wait_log("drain over (drained)", timeout=30)
    assert http_status(port, "w.test") == 200 and listening_inodes(port) == before and third.process.poll() is None


def test_a_squatter_on_the_name_only_denies_the_hand_over(nodes: list[Node], shared: Path) -> None:
    """Another process (another uid) holds the abstract name: the new twingress exits 1 with one line, takes nothing."""
    port, rendezvous = free_port(), f"@twingress-test-{secrets.token_hex(6)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as squatter:
        squatter.bind("\0" + rendezvous[1:])
        squatter.listen(8)
        squatter.settimeout(0.1)
        node = start_node(
            nodes, Manifests(shared / "manifests"), port,
            "--handover", rendezvous, "--handover-key-file", str(shared / "key"), "--admin", "", prefix=_prefix(), wait=False,
        )
        deadline = time.monotonic() + 30
        while node.process.poll() is None and time.monotonic() < deadline:
            try:
                squatter.accept()[0].close()
            except TimeoutError:
                pass
        assert node.wait_exit() == 1
    lines = [line for line in node.log().splitlines() if "twistd ingress:" in line]
    assert len(lines) == 1 and f"--handover {rendezvous}" in lines[0] and "uid" in lines[0], node.log()
    assert "Traceback" not in node.log() and listening_inodes(port) == set()


def test_the_probe_says_why_in_one_line(tmp_path: Path) -> None:
    """Nothing listening, or a bad command line: exit 1 (2) and one line; its start time is printed."""
    started = time.monotonic()
    missing = _probe_command(str(tmp_path / "none.sock"), "/readyz")
    print(f"\npython -m ingress.probe, start to exit: {time.monotonic() - started:.3f}s")
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1 and "none.sock" in missing.stderr, missing
    usage = subprocess.run([sys.executable, "-m", "ingress.probe"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and len(usage.stderr.strip().splitlines()) == 1


def test_a_stale_admin_socket_is_replaced(nodes: list[Node], shared: Path) -> None:
    """A container restarted in the same pod finds its predecessor's admin socket file and lock in the emptyDir: it listens there anyway."""
    admin = shared / "admin.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
        gone.bind(str(admin))  # closed unlistened: the file stays, nothing answers
    os.chown(admin, NOBODY, NOBODY)
    os.symlink("1", f"{admin}.lock")  # Twisted's lock, naming pid 1: alive (the restarted container's own twistd is pid 1 again)
    os.lchown(f"{admin}.lock", NOBODY, NOBODY)
    node = start_node(nodes, Manifests(shared / "manifests"), free_port(), "--admin", f"unix:{admin}", prefix=_prefix(), wait=False)
    wait_for(lambda: node.process.poll() is None and probe(str(admin), "/healthz")[0], 30, "the admin socket answering", node)
