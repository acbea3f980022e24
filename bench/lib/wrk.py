"""
wrk, as the HTTP/1.1 latency scenario runs it (pinned to the load CPUs, C{--latency}), and its
text report (wrk 4.x) parsed: requests, rate, the latency percentiles, socket errors and non-2xx.

Why wrk beside h2load: its latency percentiles are the ones operators quote for HTTP/1.1, and its
per-connection pipeline of one request at a time is the keep-alive client an ingress mostly sees.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from bench.lib.procs import BenchFailed, pinned

_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_TOTAL = re.compile(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h)")
_PERCENTILE = re.compile(r"^\s*(50|75|90|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", re.M)
_LATENCY_AVG = re.compile(r"^\s*Latency\s+([\d.]+)(us|ms|s|m|h)", re.M)


@dataclass
class WrkResult:
    """One wrk run; latencies in milliseconds, C{socket_errors} by kind."""

    requests: int
    seconds: float
    rps: float
    latency_avg_ms: float
    percentiles_ms: dict[str, float]
    socket_errors: dict[str, int] = field(default_factory=dict)
    non_2xx: int = 0

    @property
    def errors(self) -> int:
        """Everything that is not a good response: socket errors plus non-2xx/3xx."""
        return sum(self.socket_errors.values()) + self.non_2xx

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"errors": self.errors}


def to_ms(value: str, unit: str) -> float:
    """wrk's C{12.34ms} / C{567.00us} / C{1.02s} as milliseconds."""
    return round(float(value) * _UNITS_MS[unit], 4)


def parse(text: str) -> WrkResult:
    """wrk's report as a L{WrkResult}; L{BenchFailed} when its mandatory lines are missing."""
    rps, total, avg = _RPS.search(text), _TOTAL.search(text), _LATENCY_AVG.search(text)
    percentiles = {m[0]: to_ms(m[1], m[2]) for m in _PERCENTILE.findall(text)}
    if not (rps and total and avg) or set(percentiles) != {"50", "75", "90", "99"}:
        raise BenchFailed(f"cannot parse wrk's output (was --latency given?):\n{text[-800:]}")
    errors = _SOCKET_ERRORS.search(text)
    counts = [int(g) for g in errors.groups()] if errors else [0, 0, 0, 0]  # the line is there only when there were some
    return WrkResult(int(total[1]), to_ms(total[2], total[3]) / 1000.0, float(rps[1]), to_ms(avg[1], avg[2]), percentiles,
                     dict(zip(("connect", "read", "write", "timeout"), counts, strict=True)),
                     int(m[1]) if (m := _NON_2XX.search(text)) else 0)


def run(url: str, host: str, seconds: int, connections: int, cpus: Optional[str], headers: Sequence[str] = ()) -> WrkResult:
    """wrk once against C{url} (one thread) with a C{Host} header and C{headers} ("Name: value"), pinned to C{cpus}."""
    argv = pinned(cpus, ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-H", f"Host: {host}",
                         *(arg for header in headers for arg in ("-H", header)), url])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchFailed(f"wrk: {e}") from e
    if done.returncode != 0:
        raise BenchFailed(f"wrk exited with {done.returncode}:\n{done.stdout[-600:]}{done.stderr[-400:]}")
    return parse(done.stdout)
