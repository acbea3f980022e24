"""Child processes of the test control plane: start with a log file, stop, wait for readiness.

Each component's output is appended to its own log; a component that does not come up raises
L{ClusterStartError} carrying the tail of that log, so a failed start says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.waiting import WaitTimeout, eventually

LOG_TAIL_LINES = 40


class ClusterStartError(RuntimeError):
    """A component did not start; the message carries the tail of its log."""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def urlopen(url, *, context: ssl.SSLContext | None = None, timeout: float = 5.0):
    """urlopen that ignores http(s)_proxy from the environment: everything here is local."""
    handlers: list = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers).open(url, timeout=timeout)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    # If pytest dies without tearing down, the kernel kills the component (PR_SET_PDEATHSIG).
    # The signal is tied to the thread that started the child: start components from the
    # main thread.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


class Component:
    """One child process whose output goes to a log file (appended across restarts).
    C{preexec} runs in the child before exec, after the parent-death signal is set (the node's
    containerd joins its cgroup there)."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, preexec: Callable[[], None] | None = None, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.preexec = preexec
        self.env = env
        self.process: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        assert not self.running, f"{self.name} is already running"
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=self._preexec,
                env=self.env,
            )

    def _preexec(self) -> None:  # pragma: no cover - runs in the child before exec
        _die_with_parent()
        if self.preexec is not None:
            self.preexec()

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        if timeout <= 0:
            proc.kill()
            proc.wait()
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def failure(self, what: str) -> ClusterStartError:
        state = "is running"
        if self.process is not None and self.process.poll() is not None:
            state = f"exited with status {self.process.returncode}"
        return ClusterStartError(
            f"{self.name} {what} ({state}). Last lines of {self.log_path}:\n"
            f"{log_tail(self.log_path)}"
        )

    def wait_until(self, check, what: str, timeout: float) -> None:
        """Poll CHECK() until true; fail early (with the log's tail) if the process exits."""

        def condition() -> bool:
            if not self.running:
                raise self.failure(f"did not become {what}")
            return bool(check())

        try:
            eventually(condition, f"{self.name} to become {what}", timeout=timeout, interval=0.1, fatal=(ClusterStartError,))
        except WaitTimeout as error:
            raise self.failure(f"did not become {what} within {timeout:.0f}s ({error})") from None
