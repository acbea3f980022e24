"""
Child processes: started pinned to CPUs in a session of their own (so a Ctrl-C reaches only the
bench, which stops them in order), their output in a log whose tail a failure shows, stopped for
sure (the whole process group: nginx's and twingress's workers too).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

LOOPBACK = "127.0.0.1"


class BenchFailed(RuntimeError):
    """A scenario cannot go on: a child died or never listened, a load failed; the message says why."""


@dataclass
class Proc:
    """A started child: its name (for messages), the Popen handle and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, lines: int = 30) -> str:
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


def pinned(cpus: Optional[str], argv: Sequence[str]) -> list[str]:
    """C{argv} under C{taskset -c cpus} (a taskset list: "0", "0-1", "0,2"), or as is without CPUs."""
    return (["taskset", "-c", cpus] if cpus else []) + list(argv)


def start(name: str, argv: Sequence[str], log_dir: Path, cpus: Optional[str],
          env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None) -> Proc:
    """Start C{argv} pinned to C{cpus}, in a new session, its output in C{log_dir}/C{name}.log."""
    full = pinned(cpus, argv)
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        try:
            popen = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=dict(env) if env is not None else None, cwd=cwd)
        except OSError as e:
            raise BenchFailed(f"{name}: cannot run {full!r}: {e}") from e
    return Proc(name, popen, log)


def port_accepts(port: int) -> bool:
    """True when a TCP connection to 127.0.0.1:C{port} succeeds."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(proc: Proc, port: int, timeout: float) -> None:
    """Return once C{proc} accepts on C{port}; L{BenchFailed} if it exits or the time is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.popen.poll()
        if code is not None:
            raise BenchFailed(f"{proc.name} exited with code {code} before listening on {LOOPBACK}:{port}:\n{proc.tail()}")
        if port_accepts(port):
            return
        time.sleep(0.05)
    raise BenchFailed(f"{proc.name} did not accept on {LOOPBACK}:{port} within {timeout:.0f} s:\n{proc.tail()}")


def stop(proc: Proc, grace: float = 5.0) -> None:
    """SIGTERM the child's process group, SIGKILL after C{grace} seconds, and SIGKILL what is left of the group."""
    if proc.popen.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.popen.wait(timeout=grace)
    _signal_group(proc.pid, signal.SIGKILL)  # leftovers: workers whose parent went first


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Children:
    """The children of one run, in a work directory, all stopped when the run's ExitStack unwinds."""

    def __init__(self, stack: ExitStack, workdir: Path, start_timeout: float) -> None:
        self.stack, self.workdir, self.start_timeout = stack, workdir, start_timeout

    def spawn(self, name: str, argv: Sequence[str], port: int, cpus: Optional[str], **popen: Any) -> Proc:
        """Start a child, register its stop, wait until it accepts on C{port}."""
        proc = start(name, argv, self.workdir, cpus, **popen)
        self.stack.callback(stop, proc)
        wait_for_port(proc, port, self.start_timeout)
        return proc
