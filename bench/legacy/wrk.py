"""Run wrk and parse its text report (wrk 4.x, C{--latency}) into a L{WrkResult}."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_SOCKET_ERRORS = re.compile(
    r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_TOTAL = re.compile(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h)")
_PERCENTILE = re.compile(r"^\s*(50|75|90|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", re.M)
_LATENCY_AVG = re.compile(r"^\s*Latency\s+([\d.]+)(us|ms|s|m|h)", re.M)


class WrkError(RuntimeError):
    """wrk could not run, or printed something we cannot read."""


@dataclass
class WrkResult:
    """One wrk run. Latencies are in milliseconds; C{socket_errors} counts by kind."""

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

    def p(self, percentile: str) -> float:
        """A latency percentile in ms ("50", "75", "90" or "99")."""
        return self.percentiles_ms[percentile]

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"errors": self.errors}


def to_ms(value: str, unit: str) -> float:
    """wrk's C{12.34ms} / C{567.00us} / C{1.02s} as milliseconds."""
    return round(float(value) * _UNITS_MS[unit], 4)


def parse(text: str) -> WrkResult:
    """Parse wrk's report; raise L{WrkError} when the mandatory lines are missing."""
    rps = _RPS.search(text)
    total = _TOTAL.search(text)
    avg = _LATENCY_AVG.search(text)
    percentiles = {m[0]: to_ms(m[1], m[2]) for m in _PERCENTILE.findall(text)}
    if not (rps and total and avg) or set(percentiles) != {"50", "75", "90", "99"}:
        raise WrkError(f"cannot parse wrk output (was --latency given?):\n{text}")
    return WrkResult(
        requests=int(total[1]),
        seconds=to_ms(total[2], total[3]) / 1000.0,
        rps=float(rps[1]),
        latency_avg_ms=to_ms(avg[1], avg[2]),
        percentiles_ms=percentiles,
        socket_errors=_socket_errors(text),
        non_2xx=int(m[1]) if (m := _NON_2XX.search(text)) else 0,
    )


def _socket_errors(text: str) -> dict[str, int]:
    """wrk prints the socket errors line only when there were some."""
    m = _SOCKET_ERRORS.search(text)
    counts = [int(g) for g in m.groups()] if m else [0, 0, 0, 0]
    return dict(zip(("connect", "read", "write", "timeout"), counts, strict=True))


def run(
    url: str,
    host: str,
    seconds: int,
    connections: int,
    threads: int,
    cpu: Optional[int],
    headers: Sequence[str] = (),
) -> tuple[WrkResult, str]:
    """Run wrk once against C{url} with a C{Host} header (and C{headers}, "Name: value"); return the result and its raw text."""
    argv = (["taskset", "-c", str(cpu)] if cpu is not None else []) + [
        "wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
        "-H", f"Host: {host}", *(arg for header in headers for arg in ("-H", header)), url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise WrkError(f"wrk exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    return parse(done.stdout), done.stdout


def version() -> str:
    """wrk's version line (wrk -v prints it and exits non-zero)."""
    done = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    first = (done.stdout or done.stderr or "?").splitlines()[0]
    return first.split(" Copyright")[0].strip()
