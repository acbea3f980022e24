"""Child processes for the benchmarks: start pinned to a CPU, wait for a port, stop for sure.

Every child runs in its own session (so a Ctrl-C in the terminal reaches only the
harness, which then stops the children in order) with stdout and stderr going to
a log file whose tail is shown when something fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

LOOPBACK = "127.0.0.1"


class StartError(RuntimeError):
    """A child process died or never listened; the message carries its log tail."""


@dataclass
class Proc:
    """A started child: its name (for messages), the Popen handle and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, lines: int = 40) -> str:
        """The last lines the process wrote to stdout/stderr."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def start(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    cpu: Optional[int | str],
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[Path] = None,
) -> Proc:
    """Start C{argv} under C{taskset -c cpu} (unless cpu is None) in a new session."""
    full = (["taskset", "-c", str(cpu)] if cpu is not None else []) + list(argv)
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        try:
            popen = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except OSError as e:
            raise StartError(f"{name}: cannot run {full!r}: {e}") from e
    return Proc(name, popen, log)


def port_accepts(port: int) -> bool:
    """True when a TCP connection to 127.0.0.1:port succeeds."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(proc: Proc, port: int, timeout: float) -> None:
    """Return once C{proc} accepts on C{port}; raise L{StartError} if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.popen.poll()
        if code is not None:
            raise StartError(f"{proc.name} exited with code {code} before listening on "
                             f"127.0.0.1:{port}; its output:\n{proc.tail()}")
        if port_accepts(port):
            return
        time.sleep(0.05)
    raise StartError(f"{proc.name} did not accept on 127.0.0.1:{port} within {timeout:.0f} s; "
                     f"its output:\n{proc.tail()}")


def stop(proc: Proc, grace: float = 5.0) -> None:
    """SIGTERM the child's process group, then SIGKILL it if it is still there after C{grace}."""
    if proc.popen.poll() is not None:
        _signal_group(proc.pid, signal.SIGKILL)  # reap leftovers (e.g. nginx workers)
        return
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.popen.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.popen.wait(timeout=grace)
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    """Signal the process group we created for one child (its id is the child's pid)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass

