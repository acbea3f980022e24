#!/usr/bin/env python3
"""
HTTP/2 benchmark: twingress's HTTP/2 and gRPC unary req/s as a ratio to nginx, in one run,
next to the HTTPS HTTP/1.1 keep-alive ratio of the same run.

Rows, measured in turn and never two at a time, each proxy pinned to the proxy CPU and
the load and backends to the other:
- h2: h2load over TLS (ALPN h2), C{-c} connections x C{-m} streams, to the HTTP bench's nginx
  backend behind nginx (C{listen ... ssl http2}, HTTP/1.1 keep-alive upstream) and twingress;
- https/1.1: wrk over TLS, keep-alive, the same two proxies (tls_bench.py's keep-alive row);
- grpc: h2load POSTing one gRPC unary message (the bytes a gRPC client sends: a
  length-prefixed message, C{content-type: application/grpc}, C{te: trailers}) over TLS to
  bench/grpcecho (Go's standard HTTP/2 server over h2c: it answers the message and
  C{grpc-status: 0}) behind nginx C{grpc_pass grpc://} and twingress C{backend-protocol: GRPC};
  and a direct row (h2c straight to grpcecho).
The same certificate (ECDSA P-256) on both proxies.  See bench/README.md.

Run with the project venv::

    .venv/bin/python bench/legacy/h2_bench.py [--duration 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import cpuload  # noqa: E402
import procs  # noqa: E402
import targets  # noqa: E402
import tls_bench  # noqa: E402
import wrk  # noqa: E402
from harness import install_signal_handlers, run_in_workdir  # noqa: E402
from report import IDLE_LIMIT, REPO, environment, write_and_exit_status  # noqa: E402

GRPC_PATH = "/bench.Echo/Unary"
GRPC_MESSAGE = b"\x00\x00\x00\x00\x0c" + b"hello world\n"  # uncompressed, 12 bytes
GRPC_HEADERS = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
GRPC_HOST = "grpc.bench.local"
GRPCECHO = REPO / "bench" / "grpcecho"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "twingress" / "bench"
_H2LOAD_RE = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored")
_H2LOAD_RPS_RE = re.compile(r"finished in [\d.]+\w+, ([\d.]+) req/s")
_H2LOAD_TIME_RE = re.compile(r"time for request:\s+\S+\s+\S+\s+(\S+)")


class BenchFailed(RuntimeError):
    """The harness cannot go on, or a target answered wrongly."""


@dataclass
class Row:
    kind: str  # h2, https/1.1, grpc
    target: str
    rps: Optional[float] = None
    requests: int = 0
    failed: int = 0
    mean_latency: str = ""
    cpu_us: Optional[float] = None
    cpu_busy: dict[str, float] = field(default_factory=dict)
    failure: Optional[str] = None


def build_grpcecho() -> Path:
    """bench/grpcecho, built once into the cache (again when its source is newer)."""
    binary = CACHE / "grpcecho"
    source = GRPCECHO / "main.go"
    if binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        return binary
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GRPCECHO, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchFailed(f"go build bench/grpcecho failed:\n{done.stderr}")
    return binary


def nginx_h2_conf(workdir: Path, port: int, backend_port: int) -> str:
    """tls_bench's nginx (the HTTP bench's proxy with TLS, workdir's bench.crt), with HTTP/2 on."""
    conf = tls_bench.nginx_tls_conf(workdir, port, backend_port, workdir / "bench.crt", workdir / "bench.key")
    conf = conf.replace(f"listen 127.0.0.1:{port} ssl backlog=4096;", f"listen 127.0.0.1:{port} ssl http2 backlog=4096;")
    # An h2 client keeps connections x streams requests in flight: both proxies keep 320 idle
    # upstream connections (ingress-nginx's upstream-keepalive-connections default, twingress's too).
    return conf.replace("keepalive 64;", "keepalive 320;")


def nginx_conf(workdir: Path, port: int, backend_port: int, grpc_port: int) -> str:
    """L{nginx_h2_conf} with a gRPC server block."""
    conf = nginx_h2_conf(workdir, port, backend_port)
    grpc = f"""
    upstream grpcecho {{
        server 127.0.0.1:{grpc_port};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} ssl http2;
        server_name {GRPC_HOST};
        ssl_certificate {workdir / 'bench.crt'};
        ssl_certificate_key {workdir / 'bench.key'};
        location / {{
            grpc_pass grpc://grpcecho;
        }}
    }}
}}"""
    return conf[: conf.rstrip().rfind("}")] + grpc + "\n"


def twingress_manifests(directory: Path, backend_port: int, grpc_port: int, cert: tls_bench.Cert) -> None:
    """The HTTP bench's Ingress with TLS, and a gRPC Ingress (backend-protocol GRPC) on its own host."""
    grpc_service = {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": targets.NAMESPACE, "name": "grpcecho"},
                    "spec": {"ports": [{"name": "grpc", "port": 80, "targetPort": grpc_port}]}}
    grpc_slice = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"namespace": targets.NAMESPACE, "name": "grpcecho-1", "labels": {"kubernetes.io/service-name": "grpcecho"}},
                  "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
                  "ports": [{"name": "grpc", "port": grpc_port}]}
    grpc_ingress = tls_bench.tls_ingress("grpcecho", [GRPC_HOST], tls_bench.SECRET)
    grpc_ingress["metadata"]["annotations"] = {"twingress.io/backend-protocol": "GRPC"}
    grpc_ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = "grpcecho"
    main_ingress = tls_bench.tls_ingress("bench-tls", [targets.HOST, tls_bench.WRK_SNI], tls_bench.SECRET)
    tls_bench.write_manifests(directory, backend_port, [tls_bench.secret(tls_bench.SECRET, cert), main_ingress,
                                                        grpc_service, grpc_slice, grpc_ingress], False)


def h2load(url: str, authority: str, seconds: int, warmup: int, args: argparse.Namespace, grpc: bool, workdir: Path) -> tuple[int, int, float, str, str]:
    """One h2load run: (requests done, failed or errored, req/s, mean time per request, raw output)."""
    argv = ["taskset", "-c", str(args.load_cpu), "h2load", "-c", str(args.connections), "-m", str(args.streams),
            "-D", str(seconds), "--warm-up-time", str(warmup), "-H", f":authority: {authority}"]
    if grpc:
        payload = workdir / "grpc-message"
        payload.write_bytes(GRPC_MESSAGE)
        argv += ["-d", str(payload), *GRPC_HEADERS]
    done = subprocess.run([*argv, url], capture_output=True, text=True, timeout=seconds + warmup + 60)
    counts, rate = _H2LOAD_RE.search(done.stdout), _H2LOAD_RPS_RE.search(done.stdout)
    if done.returncode != 0 or counts is None or rate is None:
        raise BenchFailed(f"h2load failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    if url.startswith("https:") and "Application protocol: h2" not in done.stdout:
        raise BenchFailed(f"h2load did not negotiate h2 by ALPN:\n{done.stdout[-2000:]}")
    total, _, finished, succeeded, failed, errored = (int(v) for v in counts.groups())
    mean = _H2LOAD_TIME_RE.search(done.stdout)
    return succeeded, failed + errored + (finished - succeeded), float(rate.group(1)), mean.group(1) if mean else "", done.stdout


class Bench(tls_bench.Bench):
    """tls_bench's processes and keep-alive measurement, with h2load rows."""

    def measured(self, row: Row, proc: Optional[procs.Proc], url: str, authority: str, grpc: bool) -> Row:
        print(f"==> {row.kind} {row.target}: warm-up {self.args.warmup} s, measuring {self.args.duration} s", flush=True)
        before = cpuload.cpu_times()
        used = cpuload.group_cpu_seconds(proc.pid) if proc is not None else 0.0
        try:
            row.requests, row.failed, row.rps, row.mean_latency, _ = h2load(url, authority, self.args.duration, self.args.warmup, self.args, grpc, self.workdir)
        except (BenchFailed, subprocess.TimeoutExpired) as e:
            row.failure = str(e)
            return row
        row.cpu_busy = cpuload.busy_percent(before, cpuload.cpu_times(), self.cpus)
        if proc is not None and row.requests:
            # h2load's warm-up is inside the same process run: the CPU seconds cover it too.
            seconds = self.args.duration + self.args.warmup
            row.cpu_us = round(1e6 * (cpuload.group_cpu_seconds(proc.pid) - used) / (row.rps * seconds), 1)
        if row.failed:
            row.failure = f"{row.failed} requests failed"
        return row

    def keepalive_row(self, proc: procs.Proc, port: int, name: str) -> Row:
        row = Row("https/1.1", name)
        try:
            ka = self.measure_keepalive(proc, port, f"https/1.1 {name}")
        except (wrk.WrkError, tls_bench.BenchFailed) as e:
            row.failure = str(e)
            return row
        row.rps, row.requests, row.failed = ka.result.rps, ka.result.requests, ka.result.errors + ka.warmup_errors
        row.mean_latency = f"{ka.result.p('50'):.2f}ms(p50)"
        row.cpu_us = round(1e6 * ka.target_cpu_seconds / ka.result.requests, 1) if ka.result.requests else None
        row.cpu_busy = ka.cpu_busy
        return row

    def proxy_rows(self, name: str, cert: tls_bench.Cert, backend_port: int, grpc_port: int) -> list[Row]:
        port = procs.free_port()
        if name == "nginx":
            proc = self.nginx(tls_bench.NGINX_TLS, nginx_conf(self.workdir, port, backend_port, grpc_port), port, self.args.proxy_cpu)
        else:
            manifests = self.workdir / "manifests"
            twingress_manifests(manifests, backend_port, grpc_port, cert)
            admin_port = procs.free_port()
            proc = self.twingress("twingress", manifests, port, admin_port, ["--access-log", self.args.access_log])
            tls_bench.wait_for_table(proc, admin_port, 3, self.args.start_timeout)
        try:
            tls_bench.wait_until_served(proc, port, {targets.HOST: cert.sha256}, self.args.start_timeout)
            url = f"https://{tls_bench.WRK_SNI}:{port}"
            return [
                self.measured(Row("h2", name), proc, url + "/", targets.HOST, grpc=False),
                self.keepalive_row(proc, port, name),
                self.measured(Row("grpc", name), proc, url + GRPC_PATH, GRPC_HOST, grpc=True),
            ]
        finally:
            procs.stop(proc)

    def run_all(self) -> list[Row]:
        cert = tls_bench.make_cert(tls_bench.make_key("ecdsa"), [targets.HOST, tls_bench.WRK_SNI, GRPC_HOST])
        (self.workdir / "bench.crt").write_bytes(cert.cert_pem)
        (self.workdir / "bench.key").write_bytes(cert.key_pem)
        backend_port, grpc_port = procs.free_port(), procs.free_port()
        self.nginx("backend", targets.backend_conf(self.workdir, backend_port), backend_port, self.args.load_cpu)
        self.spawn("grpcecho", [str(build_grpcecho()), "-listen", f"127.0.0.1:{grpc_port}"], grpc_port, self.args.load_cpu)
        rows = [self.measured(Row("grpc", "direct"), None, f"http://127.0.0.1:{grpc_port}{GRPC_PATH}", GRPC_HOST, grpc=True)]
        for name in ("nginx", "twingress"):
            rows += self.proxy_rows(name, cert, backend_port, grpc_port)
        return rows


def table(rows: list[Row], args: argparse.Namespace) -> str:
    reference = {row.kind: row.rps for row in rows if row.target == "nginx"}
    head = f"{'kind':<10} {'target':<10} {'req/s':>10} {'vs nginx':>8} {'mean/p50':>14} {'CPU/req':>8} {'failed':>7}  cpu{args.proxy_cpu}/cpu{args.load_cpu}"
    lines = [head, "-" * len(head)]
    for row in rows:
        ratio = f"{row.rps / reference[row.kind]:.2f}x" if row.rps and reference.get(row.kind) else "-"
        rps = f"{row.rps:>10,.0f}" if row.rps else f"{'FAILED':>10}"
        cpu = f"{row.cpu_us:.1f}us" if row.cpu_us else "-"
        busy = "/".join(f"{v:.0f}%" for v in row.cpu_busy.values())
        lines.append(f"{row.kind:<10} {row.target:<10} {rps} {ratio:>8} {row.mean_latency:>14} {cpu:>8} {row.failed:>7}  {busy}")
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per row (10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per row (3)")
    p.add_argument("--connections", type=int, default=32, help="h2load -c and wrk -c (32)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m: concurrent streams per connection (10)")
    p.add_argument("--threads", type=int, default=1, help="wrk -t (1)")
    p.add_argument("--access-log", default="off", metavar="WHERE",
                   help="twingress's --access-log: off (the default), as nginx runs here (access_log off), or - or a file")
    add_run_arguments(p)
    return p.parse_args(argv)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a run (this bench's, peers_bench.py's, mix_bench.py's): CPUs, nginx, output."""
    p.add_argument("--proxy-cpu", type=int, default=0, help="CPU for the proxy under test (0)")
    p.add_argument("--load-cpu", type=int, default=1, help="CPU for the backends and the load (1)")
    p.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    p.add_argument("--start-timeout", type=float, default=20.0, help="seconds to listen and answer rightly (20)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    p.add_argument("--keep-logs", action="store_true", help="copy the process logs and configs next to --json (or the cwd)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    missing = [tool for tool in (args.nginx, "wrk", "h2load", "taskset") if not shutil.which(tool)]
    if missing:
        print(f"FAILED missing {', '.join(missing)}: run bench/setup.sh", file=sys.stderr)
        return 1
    busy = cpuload.background_busy([args.proxy_cpu, args.load_cpu])
    if max(busy.values()) >= IDLE_LIMIT:
        print(f"note: the machine is busy before the run ({busy}); numbers are suspect", flush=True)
    rows, _, status = run_in_workdir(args, "twh2-", Bench, lambda bench: bench.run_all(), (BenchFailed, tls_bench.BenchFailed, procs.StartError))
    if rows is None:
        return status
    print()
    print(table(rows, args))
    out = {"benchmark": "h2", "environment": environment(args.nginx), "background_busy_percent": busy,
           "config": {k: getattr(args, k) for k in ("duration", "warmup", "connections", "streams", "proxy_cpu", "load_cpu")},
           "results": [row.__dict__ for row in rows]}
    return write_and_exit_status(args.json, out, [f"{row.kind} {row.target}: {row.failure}" for row in rows if row.failure])


if __name__ == "__main__":
    sys.exit(main())
