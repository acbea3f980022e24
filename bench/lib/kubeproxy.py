"""
twingress against the cluster of L{bench.lib.cluster}, and probing it by traffic: a change is live
when a real request through the proxy answers from the expected backend, not when twingress says
so.  Also what twingress says (/readyz's generation and informer counts, /metrics' build histogram,
/debug/routes) for the figures only traffic cannot give: a rebuild's time, the table's memory.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import socket
import ssl
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

from bench.lib import procs
from bench.lib.cluster import SCALE_BACKEND_NAMES, SCALE_NS, log, proc_status, summary
from bench.lib.results import REPO

BUILD_METRICS = re.compile(r"(twingress_table_build_seconds_(?:sum|count)|twingress_table_generation) (\S+)$")


class Http:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1:port, opened again when it closes."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.port, self.timeout = port, timeout
        self.conn: Optional[http.client.HTTPConnection] = None

    def get(self, path: str, host: str = "localhost") -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(procs.LOOPBACK, self.port, timeout=self.timeout)
                self.conn.request("GET", path, headers={"Host": host})
                response = self.conn.getresponse()
                body = response.read()
                if response.will_close:
                    self.close()
                return response.status, body
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def backend_of(status: int, body: bytes) -> Optional[str]:
    """The echo backend's name in a 200 answer, or None."""
    if status != 200:
        return None
    try:
        name = json.loads(body).get("name")
    except ValueError:
        return None
    return name if isinstance(name, str) else None


class Twingress:
    """C{twistd -n ingress --kubeconfig ...} of this tree on free loopback ports, pinned to CPUS (the
    run's proxy CPUs), stopped with the run; EXTRA_ARGS come last and win (e.g. C{--https tcp:PORT})."""

    def __init__(self, children: procs.Children, kubeconfig: Path, workers: int, cpus: Optional[str], name: str = "twingress",
                 extra_args: Sequence[str] = ()) -> None:
        self.http_port = procs.free_port()
        self.admin_port = procs.free_port()
        while self.admin_port == self.http_port:
            self.admin_port = procs.free_port()
        argv = [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; sys.exit(run())",
                "--pidfile=", "--logfile=-", "-n", "ingress", "--kubeconfig", str(kubeconfig),
                "--http", f"tcp:{self.http_port}:interface=127.0.0.1", "--admin", f"tcp:{self.admin_port}:interface=127.0.0.1",
                "--https", "", "--workers", str(workers), *extra_args]
        self.proc = procs.start(name, argv, children.workdir, cpus, cwd=REPO)
        children.stack.callback(self.stop)
        self.proxy = Http(self.http_port)
        self.admin = Http(self.admin_port, timeout=60.0)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc.popen.poll() is not None:
            raise procs.BenchFailed(f"twingress exited with {self.proc.popen.returncode}:\n{self.proc.tail()}")

    def admin_get(self, path: str) -> tuple[int, bytes]:
        try:
            return self.admin.get(path)
        except (OSError, http.client.HTTPException) as e:
            self.check_alive()
            raise procs.BenchFailed(f"twingress admin {path}: {e}; its log:\n{self.proc.tail()}") from e

    def readyz(self) -> dict[str, Any]:
        try:
            body = json.loads(self.admin_get("/readyz")[1])
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}

    def wait_ready(self, timeout: float) -> float:
        """Seconds until /readyz answers 200."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            self.check_alive()
            try:
                if self.admin.get("/readyz")[0] == 200:
                    return time.monotonic() - t0
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        raise procs.BenchFailed(f"twingress not ready within {timeout:.0f} s:\n{self.proc.tail()}")

    def generation(self) -> int:
        return int(self.readyz().get("generation", -1))

    def informer_objects(self, kind: str = "Ingress") -> int:
        return int(self.readyz().get("informers", {}).get(kind, {}).get("objects", -1))

    def metrics(self) -> dict[str, float]:
        """The build histogram's sum and count and the live generation, from /metrics."""
        found = (BUILD_METRICS.match(line) for line in self.admin_get("/metrics")[1].decode().splitlines())
        return {m.group(1): float(m.group(2)) for m in found if m}

    def route_hosts(self) -> list[str]:
        return list(json.loads(self.admin_get("/debug/routes")[1]).get("hosts", {}))

    def wait_live(self, host: str, path: str, expected: str, t0: float, timeout: float, interval: float = 0.0) -> tuple[Optional[float], int]:
        """Poll the proxy until HOST+PATH answers 200 from backend EXPECTED: (seconds since T0 or None, polls).
        Back to back, or with INTERVAL seconds between polls."""
        polls = 0
        while True:
            if polls and interval:
                time.sleep(interval)
            polls += 1
            try:
                answered = backend_of(*self.proxy.get(path, host))
            except (OSError, http.client.HTTPException):
                answered = None
            if answered == expected:
                return time.monotonic() - t0, polls
            if time.monotonic() - t0 > timeout:
                self.check_alive()
                return None, polls

    def wait_generation_stable(self, quiet: float = 3.0, timeout: float = 300.0) -> int:
        """Until the live generation has not changed for QUIET seconds; returns it."""
        start = time.monotonic()
        last, since = self.generation(), time.monotonic()
        while time.monotonic() - start < timeout:
            time.sleep(0.2)
            g = self.generation()
            if g != last:
                last, since = g, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return g
        return last

    def stop(self) -> None:
        self.proxy.close()
        self.admin.close()
        procs.stop(self.proc, grace=10.0)


Change = Callable[[int], tuple[str, str, str]]
"""change(i) makes the API write and returns (host, path, the backend that must answer)."""


def series(name: str, tw: Twingress, n: int, change: Change, gap: float, timeout: float, interval: float = 0.0) -> dict[str, Any]:
    """N changes, each timed from its API write returning to the first answer from the expected backend."""
    times: list[float] = []
    polls: list[int] = []
    failures = 0
    for i in range(n):
        host, path, expected = change(i)
        seconds, count = tw.wait_live(host, path, expected, time.monotonic(), timeout, interval)
        polls.append(count)
        if seconds is None:
            failures += 1
            log(f"{name} #{i}: {host}{path} not live from {expected} within {timeout} s")
        else:
            times.append(seconds * 1000.0)
        time.sleep(gap)
    result = summary(times, failures)
    result["polls_median"] = statistics.median(polls) if polls else 0
    result["samples_ms"] = [round(t, 2) for t in times]
    log(f"{name}: {format_series(result)}")
    return result


def format_series(r: dict[str, Any]) -> str:
    if not r.get("n"):
        return f"no samples ({r.get('failures', 0)} failures)"
    return f"n={r['n']} p50={r['p50_ms']:.1f} ms p99={r['p99_ms']:.1f} ms max={r['max_ms']:.1f} ms" + (f" failures={r['failures']}" if r["failures"] else "")


def wait_all_live(tw: Twingress, routes: int, scale_hosts: int, last_host: str, t0: float, timeout: float,
                  kind: str = "Ingress", ns: str = SCALE_NS) -> dict[str, Any]:
    """From T0 (the last create returned): the informer holds ROUTES objects of KIND (informers_s), the
    last host answers through the proxy (last_host_s), and /debug/routes has every host of NS (all_live_s)."""
    marks: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout:
        tw.check_alive()
        if "informers_s" not in marks:
            if tw.informer_objects(kind) < routes:
                time.sleep(0.05)
                continue
            marks["informers_s"] = time.monotonic() - t0
        if "last_host_s" not in marks:
            if backend_of(*tw.proxy.get("/", last_host)) not in SCALE_BACKEND_NAMES:
                time.sleep(0.01)
                continue
            marks["last_host_s"] = time.monotonic() - t0
        marks["route_hosts"] = sum(1 for h in tw.route_hosts() if h.endswith(f".{ns}.test"))
        if marks["route_hosts"] >= scale_hosts:
            marks["all_live_s"] = time.monotonic() - t0
            return marks
        time.sleep(0.2)
    marks["timeout"] = True
    return marks


def rebuilds(tw: Twingress, count: int, touch: Callable[[int], None]) -> dict[str, Any]:
    """TOUCH an object COUNT times: each build's time (the build histogram's difference), twingress's CPU
    around it, and the write-to-new-generation time from the API call's return."""
    builds: list[float] = []
    swaps: list[float] = []
    cpus: list[float] = []
    counts: list[int] = []
    for k in range(count):
        before = tw.metrics()
        cpu0 = proc_status(tw.pid)["cpu_s"]
        generation = int(before.get("twingress_table_generation", 0))
        touch(k)
        t0 = time.monotonic()
        while tw.generation() <= generation:
            if time.monotonic() - t0 > 120:
                raise procs.BenchFailed("no rebuild within 120 s after touching a route")
            time.sleep(0.005)
        swaps.append((time.monotonic() - t0) * 1000.0)
        tw.wait_generation_stable(quiet=1.0, timeout=60)  # a second (coalesced) build finished, then the histogram
        cpus.append((proc_status(tw.pid)["cpu_s"] - cpu0) * 1000.0)
        after = tw.metrics()
        dcount = after["twingress_table_build_seconds_count"] - before["twingress_table_build_seconds_count"]
        dsum = after["twingress_table_build_seconds_sum"] - before["twingress_table_build_seconds_sum"]
        counts.append(int(dcount))
        builds.append(dsum / dcount * 1000.0 if dcount else float("nan"))
    return {"build_ms": [round(b, 1) for b in builds], "build_ms_median": statistics.median(builds), "build_ms_max": max(builds),
            "builds_per_touch": counts, "process_cpu_ms": [round(c) for c in cpus], "process_cpu_ms_median": statistics.median(cpus),
            "write_to_swap_ms": [round(s, 1) for s in swaps], "write_to_swap_ms_median": statistics.median(swaps)}


def steady_memory(tw: Twingress) -> dict[str, Any]:
    """VmRSS once the generation has not moved for 3 s (and 2 s more), and VmHWM (the peak)."""
    generation = tw.wait_generation_stable(quiet=3.0)
    time.sleep(2.0)
    status = proc_status(tw.pid)
    return {"generation": generation, "rss_mb": status["VmRSS"], "hwm_mb": status["VmHWM"], "cpu_s": status["cpu_s"]}


class Prober:
    """Probes through the proxy: a keep-alive GET's answering backend, or a new TLS handshake's certificate (by its SHA-256)."""

    def __init__(self, http_port: int, https_port: int) -> None:
        self.http = Http(http_port, timeout=5.0)
        self.https_port = https_port
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.tls.check_hostname = False
        self.tls.verify_mode = ssl.CERT_NONE  # the certificate is compared by its hash

    def served_cert_sha(self, server_name: str) -> str:
        with socket.create_connection((procs.LOOPBACK, self.https_port), timeout=5.0) as raw:
            with self.tls.wrap_socket(raw, server_hostname=server_name) as s:
                return hashlib.sha256(s.getpeercert(binary_form=True) or b"").hexdigest()

    def answering_backend(self, server_name: str, path: str) -> Optional[str]:
        return backend_of(*self.http.get(path, server_name))

    def serves(self, server_name: str, cert_sha: str) -> bool:
        """Whether a TLS handshake with this SNI gets the certificate of this SHA-256."""
        try:
            return self.served_cert_sha(server_name) == cert_sha
        except OSError:  # ssl.SSLError included
            return False
