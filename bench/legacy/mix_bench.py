#!/usr/bin/env python3
"""
A realistic mix (issue 32, target 6): browser-like clients over h2 and one-request HTTP/1.1
clients, every connection a new TLS 1.3 handshake, half of them resumed; the CPU per request
and per connection of twingress, nginx, Traefik and Caddy.

Keep-alive benches measure the request path; here handshakes dominate.  The load is
bench/mixload (Go, standard library only, built into the cache on first use): -c workers, each
opening connection after connection, in a fixed pattern so that every proxy gets the same
mix: a browser (ALPN h2, 1 GET then 9 at once, close) or an HTTP/1.1 client (ALPN http/1.1, one
GET with Connection: close), every other cycle offering a session ticket from an earlier
connection.  The proxies are peers_bench.py's (it is imported: the same processes, certificate
and checks), except that nginx has TLS session resumption on here (a shared session cache and
tickets; tls_bench's nginx turns both off).  Each proxy in turn, pinned to the proxy CPU, the
load and the backend on the other; a warm-up run, then the measured run.  See bench/README.md.

Run with the project venv::

    bench/peers.sh
    .venv/bin/python -m bench mix [--duration 10] [--proxies twingress,nginx,traefik,caddy] [--json PATH]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import cpuload  # noqa: E402
import h2_bench  # noqa: E402
import peers_bench  # noqa: E402
import procs  # noqa: E402
import targets  # noqa: E402
import tls_bench  # noqa: E402
from harness import install_signal_handlers, run_in_workdir  # noqa: E402
from peers_bench import CADDY, H2, NGINX, TRAEFIK, TWINGRESS  # noqa: E402
from report import REPO, environment, write_and_exit_status  # noqa: E402

PROXIES = (TWINGRESS, NGINX, TRAEFIK, CADDY)
MIXLOAD = REPO / "bench" / "mixload"
# tls_bench's nginx turns resumption off (its handshake row must be full handshakes); a mix
# in which half the clients resume needs it on: a shared session cache and session tickets.
NGINX_NO_RESUMPTION = "ssl_session_cache off;\n        ssl_session_tickets off;"
NGINX_RESUMPTION = "ssl_session_cache shared:SSL:10m;\n        ssl_session_tickets on;"


class BenchFailed(RuntimeError):
    """The harness cannot go on (a tool missing, the load generator not built)."""


def build_mixload() -> Path:
    """bench/mixload, built once into the cache (again when its source is newer), as h2_bench's grpcecho."""
    binary = h2_bench.CACHE / "mixload"
    sources = [MIXLOAD / "main.go", MIXLOAD / "go.mod"]
    if binary.exists() and binary.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
        return binary
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    if not os.access(go, os.X_OK):
        raise BenchFailed(f"Go not found ({go}): bench/mixload is built with it (set GO=/path/to/go)")
    h2_bench.CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["nice", "-n", "10", go, "build", "-o", str(binary), "."], cwd=MIXLOAD, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchFailed(f"go build bench/mixload failed:\n{done.stderr}")
    return binary


def nginx_conf(workdir: Path, port: int, backend_port: int) -> str:
    """peers_bench's (h2_bench's) nginx for TLS, with session resumption on."""
    conf = h2_bench.nginx_h2_conf(workdir, port, backend_port)
    if NGINX_NO_RESUMPTION not in conf:
        raise BenchFailed(f"tls_bench.nginx_tls_conf changed: no {NGINX_NO_RESUMPTION!r} to turn resumption on in")
    return conf.replace(NGINX_NO_RESUMPTION, NGINX_RESUMPTION)


@dataclass
class MixRow:
    target: str
    seconds: float = 0.0
    requests: int = 0
    connections: int = 0
    resumed_share: Optional[float] = None
    errors: int = 0
    cpu_seconds: Optional[float] = None
    cpu_busy: dict[str, float] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    failure: Optional[str] = None

    @property
    def rps(self) -> Optional[float]:
        return self.requests / self.seconds if self.seconds else None

    @property
    def cps(self) -> Optional[float]:
        return self.connections / self.seconds if self.seconds else None

    @property
    def cpu_us_per_request(self) -> Optional[float]:
        return round(1e6 * self.cpu_seconds / self.requests, 1) if self.cpu_seconds is not None and self.requests else None

    @property
    def cpu_us_per_connection(self) -> Optional[float]:
        return round(1e6 * self.cpu_seconds / self.connections, 1) if self.cpu_seconds is not None and self.connections else None


class Bench(peers_bench.Bench):
    """peers_bench's proxies (TLS, h2 by ALPN), measured under bench/mixload."""

    def __init__(self, args: argparse.Namespace, stack: Any, workdir: Path) -> None:
        super().__init__(args, stack, workdir)
        self.mixload = args.mixload_path

    def start(self, proxy: str, kind: str, port: int, backend_port: int) -> procs.Proc:
        if proxy == NGINX:
            conf = self.nginx_logging(nginx_conf(self.workdir, port, backend_port), self.access_log(proxy, kind))
            return self.nginx(tls_bench.NGINX_TLS, conf, port, self.args.proxy_cpu)
        return super().start(proxy, kind, port, backend_port)

    def load(self, port: int, seconds: int) -> tuple[int, dict[str, Any], str]:
        """One mixload run on the load CPU: (exit status, its JSON, its stderr)."""
        argv = ["taskset", "-c", str(self.args.load_cpu), str(self.mixload), "-addr", f"127.0.0.1:{port}",
                "-sni", targets.HOST, "-host", targets.HOST, "-ca", str(self.workdir / "bench.crt"),
                "-c", str(self.args.clients), "-duration", f"{seconds}s", "-h2", str(self.args.h2),
                "-h1", str(self.args.h1), "-groups", self.args.groups, "-body", targets.BODY.decode()]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
        try:
            out = json.loads(done.stdout)
        except ValueError:
            raise BenchFailed(f"mixload exited {done.returncode} with no JSON:\n{done.stdout[-2000:]}{done.stderr[-2000:]}") from None
        return done.returncode, out, done.stderr.strip()

    def mix_row(self, proxy: str, backend_port: int) -> MixRow:
        """Start C{proxy}, check it (our certificate, the body, h2 by ALPN), warm it up, measure it, stop it."""
        assert self.cert is not None
        row = MixRow(proxy)
        port = procs.free_port()
        try:
            proc = self.start(proxy, H2, port, backend_port)
            try:
                seen = tls_bench.wait_until_served(proc, port, {targets.HOST: self.cert.sha256, tls_bench.WRK_SNI: self.cert.sha256},
                                                   self.args.start_timeout)
                self.negotiated[proxy] = f"{seen[targets.HOST]['version']} {seen[targets.HOST]['cipher']}"
                peers_bench.wait_until_h2(proc, port, self.cert.sha256, self.args.start_timeout)
                print(f"==> mix {proxy}: warm-up {self.args.warmup} s, measuring {self.args.duration} s", flush=True)
                if self.args.warmup:
                    status, warm, stderr = self.load(port, self.args.warmup)
                    if status != 0:
                        row.failure = f"warm-up: {stderr} {warm.get('error_samples')}"
                        return row
                before, used = cpuload.cpu_times(), cpuload.group_cpu_seconds(proc.pid)
                status, out, stderr = self.load(port, self.args.duration)
                row.cpu_busy = cpuload.busy_percent(before, cpuload.cpu_times(), self.cpus)
                row.cpu_seconds = round(cpuload.group_cpu_seconds(proc.pid) - used, 3)
                if proc.popen.poll() is not None:
                    raise BenchFailed(f"{proc.name} exited during the run:\n{proc.tail()}")
            finally:
                procs.stop(proc)
        except (procs.StartError, BenchFailed, tls_bench.BenchFailed, OSError, http.client.HTTPException,
                subprocess.TimeoutExpired) as e:
            row.failure = str(e)
            return row
        row.raw = out
        row.seconds, row.requests, row.connections = out["seconds"], out["requests"], out["connections"]
        row.resumed_share, row.errors = out["resumed_share"], out["errors"]
        if status != 0:
            row.failure = f"mixload: {stderr}; samples {out.get('error_samples')}"
        elif not out["handshakes"]["resumed"]:
            row.failure = "no connection was resumed"
        return row

    def run_all(self) -> list[MixRow]:
        backend, backend_port = self.start_backend()
        rows = []
        for proxy in self.args.proxies:
            self.unlogged(proxy, H2, 0)  # an earlier run's lines, if any
            row = self.mix_row(proxy, backend_port)
            row.failure = row.failure or self.unlogged(proxy, H2, row.requests)
            rows.append(row)
        if backend.popen.poll() is not None:
            raise BenchFailed(f"the backend exited during the run:\n{backend.tail()}")
        return rows


def _f(value: Optional[float], spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table(rows: list[MixRow], args: argparse.Namespace) -> str:
    ref = next((row for row in rows if row.target == NGINX and not row.failure), None)
    head = (f"{'target':<10} {'req/s':>8} {'conn/s':>7} {'resumed':>7} {'CPU/req':>8} {'CPU/conn':>9} "
            f"{'vs nginx':>8} {'errors':>6}  cpu{args.proxy_cpu}/cpu{args.load_cpu}")
    lines = [head, "-" * len(head)]
    for row in rows:
        if row.failure and not row.requests:
            lines.append(f"{row.target:<10} {'FAILED':>8}")
            continue
        ratio = (row.cpu_us_per_request / ref.cpu_us_per_request
                 if ref and row.cpu_us_per_request and ref.cpu_us_per_request else None)
        busy = "/".join(f"{v:.0f}%" for v in row.cpu_busy.values())
        lines.append(f"{row.target:<10} {_f(row.rps, ',.0f'):>8} {_f(row.cps, ',.0f'):>7} {_f(row.resumed_share, '.1%'):>7} "
                     f"{_f(row.cpu_us_per_request, '.1f', 'us'):>8} {_f(row.cpu_us_per_connection, '.0f', 'us'):>9} "
                     f"{_f(ratio, '.2f', 'x'):>8} {row.errors:>6}  {busy}")
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per proxy (10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per proxy (3)")
    p.add_argument("--clients", type=int, default=32, help="mixload -c: concurrent clients (32)")
    p.add_argument("--h2", type=int, default=1, help="browser (h2, 10 requests) connections in every --h2 + --h1 (1)")
    p.add_argument("--h1", type=int, default=1, help="HTTP/1.1 (1 request) connections in every --h2 + --h1 (1)")
    p.add_argument("--groups", default="X25519", help="key exchange groups the clients offer (X25519; 'default': Go's, with ML-KEM hybrids)")
    p.add_argument("--proxies", default=",".join(PROXIES), help="the proxies to measure, in this order (%(default)s)")
    peers_bench.add_run_arguments(p)
    args = p.parse_args(argv)
    args.proxies = peers_bench.distinct_names(p, "--proxies", args.proxies, PROXIES)
    if args.duration < 1 or args.warmup < 0 or args.clients < 1 or args.h2 < 0 or args.h1 < 0 or args.h2 + args.h1 < 1:
        p.error("need --duration >= 1, --warmup >= 0, --clients >= 1 and --h2 + --h1 >= 1")
    peers_bench.check_cpus(p, args)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    missing = [tool for tool in (args.nginx, "curl", "taskset") if not shutil.which(tool)]
    if missing:
        print(f"FAILED missing {', '.join(missing)}: run bench/setup.sh", file=sys.stderr)
        return 1
    try:
        args.mixload_path = build_mixload()
        versions = peers_bench.builds(args)
    except (BenchFailed, peers_bench.BenchFailed, OSError, subprocess.TimeoutExpired) as e:
        print(f"FAILED {e}", file=sys.stderr)
        return 1
    busy, loadavg = peers_bench.machine_before(args, versions)
    rows, bench, status = run_in_workdir(args, "twmix-", Bench, lambda bench: bench.run_all(),
                                         (BenchFailed, peers_bench.BenchFailed, tls_bench.BenchFailed, procs.StartError))
    if rows is None or not isinstance(bench, Bench):
        return status
    loadavg["after"] = [round(v, 2) for v in os.getloadavg()]
    print()
    print(table(rows, args))
    print(f"load average before {loadavg['before']}, after {loadavg['after']}")
    print("negotiated (the check's handshake): " + "; ".join(f"{k} {v}" for k, v in bench.negotiated.items()))
    for row in rows:
        if row.raw:
            print(f"{row.target}: mixload negotiated {row.raw.get('negotiated')}")
    out = {"benchmark": "mix", "environment": environment(args.nginx) | versions, "background_busy_percent": busy,
           "loadavg": loadavg, "negotiated": bench.negotiated,
           "config": {k: getattr(args, k) for k in ("duration", "warmup", "clients", "h2", "h1", "groups",
                                                     "proxies", "proxy_cpu", "load_cpu", "access_log")},
           "results": [row.__dict__ | {"rps": row.rps, "cps": row.cps, "cpu_us_per_request": row.cpu_us_per_request,
                                       "cpu_us_per_connection": row.cpu_us_per_connection} for row in rows]}
    return write_and_exit_status(args.json, out, [f"{row.target}: {row.failure}" for row in rows if row.failure])


if __name__ == "__main__":
    sys.exit(main())
