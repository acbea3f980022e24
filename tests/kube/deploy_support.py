"""
What the deployment tests need besides the node: a client that sends requests through the node's
ports for as long as a lifecycle event lasts and tells refused from failed, and the node's processes.

L{Traffic} sends one request per new connection (so every request meets the listeners as they
are at that moment), from a few threads, and records for each request when it was sent and how
it ended:

- C{ok}: an answer with the expected status;
- C{refused}: the connection was refused: no process listened on the port (the gap between an
  old pod and the new one, or a restarting container): nothing was accepted, so nothing was lost
  by the proxy, but the client saw an error;
- C{failed}: the connection was accepted and then the request failed (reset, closed without an
  answer, timed out, or a wrong status): a request the proxy accepted and lost.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True)
class Outcome:
    sent: float  # time.monotonic() when the connection was opened
    kind: str  # "ok", "refused" or "failed"
    detail: str = ""
    backend: str = ""


@dataclass
class TrafficReport:
    """What a run of L{Traffic} saw around one event (C{event_at}: monotonic time of the event)."""

    outcomes: list[Outcome]
    event_at: float
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = {kind: sum(1 for o in self.outcomes if o.kind == kind) for kind in ("ok", "refused", "failed")}

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind == "failed"]

    def recovery_seconds(self) -> float:
        """From the event until the first of the answers after which every request was answered."""
        last_bad = max((o.sent for o in self.outcomes if o.kind != "ok" and o.sent >= self.event_at), default=None)
        if last_bad is None:
            return 0.0
        after = [o.sent for o in self.outcomes if o.kind == "ok" and o.sent > last_bad]
        if not after:
            raise AssertionError(f"no request succeeded after the last error: {self.summary()}")
        return min(after) - self.event_at

    def summary(self) -> str:
        failures = sorted({o.detail for o in self.failed})[:5]
        when = sorted({round(o.sent - self.event_at, 2) for o in self.failed})[:10]
        return f"{len(self.outcomes)} requests: {self.counts}" + (f"; failures: {failures} at +{when} s" if failures else "")


class Traffic:
    """C{threads} clients sending C{GET /} with C{Host: host} to C{address}:C{port}, a new connection per request."""

    def __init__(self, address: str, port: int, host: str, tls: bool = False, threads: int = 3) -> None:
        self.address, self.port, self.host, self.tls = address, port, host, tls
        self.threads = threads
        self._outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._context = ssl.create_default_context()
        self._context.check_hostname, self._context.verify_mode = False, ssl.CERT_NONE

    @contextmanager
    def running(self) -> Iterator[Traffic]:
        workers = [threading.Thread(target=self._loop, daemon=True) for _ in range(self.threads)]
        for worker in workers:
            worker.start()
        try:
            yield self
        finally:
            self._stop.set()
            for worker in workers:
                worker.join(REQUEST_TIMEOUT + 5)

    def report(self, event_at: float) -> TrafficReport:
        with self._lock:
            return TrafficReport(list(self._outcomes), event_at)

    def _loop(self) -> None:
        while not self._stop.is_set():
            outcome = self.one()
            with self._lock:
                self._outcomes.append(outcome)
            if outcome.kind == "refused":
                time.sleep(0.05)  # nothing listens: do not spin

    def one(self) -> Outcome:
        sent = time.monotonic()
        try:
            raw = socket.create_connection((self.address, self.port), timeout=REQUEST_TIMEOUT)
        except ConnectionRefusedError:
            return Outcome(sent, "refused")
        except OSError as error:
            return Outcome(sent, "failed", f"connect: {error}")
        try:
            return self._exchange(raw, sent)
        except (OSError, http.client.HTTPException) as error:
            return Outcome(sent, "failed", f"{type(error).__name__}: {error}")
        finally:
            raw.close()

    def _exchange(self, raw: socket.socket, sent: float) -> Outcome:
        sock = self._context.wrap_socket(raw, server_hostname=self.host) if self.tls else raw
        sock.settimeout(REQUEST_TIMEOUT)
        connection = http.client.HTTPConnection(self.host)
        connection.sock = sock
        connection.request("GET", "/", headers={"Host": self.host, "Connection": "close"})
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            return Outcome(sent, "failed", f"status {response.status}")
        return Outcome(sent, "ok", backend=_backend(body))


def _backend(body: bytes) -> str:
    """The echo pod's name, which the test echo server (testenv/node/echo) puts in its answer."""
    try:
        return str(json.loads(body).get("pod", ""))
    except ValueError:
        return ""


def process_ids(*patterns: str) -> list[int]:
    """PIDs (in this PID namespace: the node's) whose command line contains every one of C{patterns}."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if all(pattern in command for pattern in patterns):
                found.append(int(entry.name))
    return found


def process_uid(pid: int) -> Optional[int]:
    """The real uid of C{pid} (None when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
