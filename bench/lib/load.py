"""
The load generators, as the scenarios run them: h2load for every kind a contender is compared on
(HTTP/1.1 in clear, HTTP/1.1 over TLS, h2 over TLS, gRPC unary over TLS), pinned to the load CPUs.

Only requests answered 2xx count as served: a 404 from a proxy without its route is a failure,
not a fast answer.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bench.lib.procs import BenchFailed, pinned

HOST = "bench.local"  # the routed host
SNI = "localhost"  # the name a client connects to (the bench certificate covers both)
GRPC_HOST = "grpc.bench.local"
GRPC_PATH = "/bench.Echo/Unary"
GRPC_MESSAGE = b"\x00\x00\x00\x00\x0c" + b"hello world\n"  # a length-prefixed, uncompressed message of 12 bytes
HTTP, HTTPS, H2, GRPC = "http/1.1", "https/1.1", "h2", "grpc"
KINDS = (HTTP, HTTPS, H2, GRPC)

_COUNTS_RE = re.compile(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored")
_STATUSES_RE = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")
_RATE_RE = re.compile(r"finished in [\d.]+\w+, ([\d.]+) req/s")


@dataclass
class Served:
    """One h2load run: requests answered 2xx, the others (failed, errored, not 2xx), its rate."""

    ok: int
    failed: int
    rps: float


def parse_h2load(stdout: str) -> Optional[Served]:
    """h2load's report as L{Served}, or None when it has no counts."""
    counts, statuses, rate = _COUNTS_RE.search(stdout), _STATUSES_RE.search(stdout), _RATE_RE.search(stdout)
    if counts is None or statuses is None:
        return None
    done, succeeded, answered_2xx = int(counts.group(2)), int(counts.group(3)), int(statuses.group(1))
    ok = min(succeeded, answered_2xx)
    return Served(ok, done - ok, float(rate.group(1)) if rate else 0.0)


def h2load_argv(kind: str, port: int, workdir: Path, connections: int, streams: int, *amount: str) -> list[str]:
    """h2load's command line for C{kind} to 127.0.0.1:C{port} (C{amount}: "-D", "3" or "-n", "20")."""
    if kind not in KINDS:
        raise BenchFailed(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    argv = ["h2load", "-c", str(connections), *amount]
    if kind in (HTTP, HTTPS):
        argv += ["--h1", "-m", "1"]
    else:
        argv += ["-m", str(streams)]
    argv += ["-H", f":authority: {GRPC_HOST if kind == GRPC else HOST}"]  # h2load sends it as Host over HTTP/1.1
    if kind == GRPC:
        payload = workdir / "grpc-message"
        payload.write_bytes(GRPC_MESSAGE)
        argv += ["-d", str(payload), "-H", "content-type: application/grpc", "-H", "te: trailers"]
    scheme = "http" if kind == HTTP else "https"
    host = "127.0.0.1" if kind == HTTP else SNI
    return [*argv, f"{scheme}://{host}:{port}{GRPC_PATH if kind == GRPC else '/'}"]


def h2load(kind: str, port: int, workdir: Path, cpus: Optional[str], connections: int, streams: int, *amount: str) -> Served:
    """One h2load run on C{cpus}: L{Served}; L{BenchFailed} when h2load fails or reports nothing."""
    argv = pinned(cpus, h2load_argv(kind, port, workdir, connections, streams, *amount))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchFailed(f"h2load: {e}") from e
    served = parse_h2load(done.stdout)
    if done.returncode != 0 or served is None:
        raise BenchFailed(f"h2load failed ({done.returncode}): {done.stdout[-600:]}{done.stderr[-400:]}")
    if kind in (H2, GRPC) and "Application protocol: h2" not in done.stdout:
        raise BenchFailed(f"h2load did not negotiate h2 by ALPN:\n{done.stdout[-600:]}")
    return served
