#!/usr/bin/env python3
"""
What pyOpenSSL and h2 cost per request inside twingress, against inside the TLS floor.

Issue 32's targets 1 and 2 take the floors (splice_floor.py --tls, h2_floor.py) as what
the libraries cost, and charge the rest to twingress's own code.  This bench measures the
libraries in place instead: every public method of C{OpenSSL.SSL.Connection} and
C{h2.connection.H2Connection} is timed inside the running process (bench/libtimes), in
twingress and in the splice floor alike, under the load of h2_bench.py's rows:

- twingress: HTTP/1.1 and HTTPS/1.1 keep-alive (wrk -c32), h2 over TLS and gRPC unary
  (h2load -c32 -m10), one process with an HTTP and an HTTPS listener;
- the floors: splice_floor.py --batched, then with --tls (the same TLS transport class,
  ingress.speedups.tlsdirect), under the same wrk load; h2_proxy_floor.py (an h2-to-HTTP/1.1
  proxy that converts and does nothing else) under the h2 row's load; with C{--floor-churn N}, the TLS
  floor again doing Python work between its TLS calls (N objects of a working set larger
  than the caches, per request): whether the calls' cost depends on what runs between them.

For each row: the process group's CPU per request, and the microseconds and calls per
request inside each library (less the timing's own span per call); and the cyclic garbage
collector's collections, time and objects found per request, with its longest pause.
C{--scale N} gives twingress N more Ingresses, each with a Service and an EndpointSlice of
three endpoints (no traffic): a table and model of a large cluster for the collector to scan.  The proxy on
C{--proxy-cpu}, the backends and the load on C{--load-cpu}; rows one at a time.  The
timing wrappers add a Python call per library call to every row (not counted in the
libraries' share): compare CPU per request with h2_bench.py's, not with this bench's.

    .venv/bin/python -m bench floor-library [--duration 8] [--json PATH]     # ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import cpuload  # noqa: E402
import h2_bench  # noqa: E402
import procs  # noqa: E402
import targets  # noqa: E402
import tls_bench  # noqa: E402
import wrk  # noqa: E402
from harness import Harness, install_signal_handlers, run_in_workdir, twingress_env  # noqa: E402
from report import REPO, environment, write_and_exit_status  # noqa: E402

LIBTIMES = Path(__file__).resolve().parents[1] / "libtimes"
TWINGRESS_CMD = (
    "{venv_bin}/twistd --pidfile= -n ingress --manifests {manifests} --http tcp:{http_port}:interface=127.0.0.1"
    " --https tcp:{port}:interface=127.0.0.1 --admin tcp:{admin_port}:interface=127.0.0.1"
)
LIBRARIES = ("ssl", "h2")


@dataclass
class Row:
    target: str
    kind: str
    requests: int = 0
    cpu_us: Optional[float] = None
    library_us: dict[str, float] = field(default_factory=dict)
    library_calls: dict[str, float] = field(default_factory=dict)
    methods_us: dict[str, float] = field(default_factory=dict)  # the dearest methods: us per request
    collections_per_1k: float = 0.0  # the cyclic collector's collections per 1,000 requests, all generations
    collector_us: float = 0.0  # its time per request
    cyclic_objects: float = 0.0  # unreachable objects it found per request: reference cycles of the request path
    longest_pause_ms: float = 0.0  # its longest collection during the row, and of which generation
    longest_generation: str = ""
    failure: str = ""


class Timed:
    """A child started with the library timers, and its snapshots of their totals (SIGUSR2)."""

    def __init__(self, proc: procs.Proc, path: Path) -> None:
        self.proc, self.path = proc, path

    def snapshot(self) -> dict[str, Any]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        os.kill(self.proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            now = self.path.read_text().splitlines() if self.path.exists() else []
            if len(now) > len(lines):
                return json.loads(now[-1])  # type: ignore[no-any-return]
            time.sleep(0.01)
        raise tls_bench.BenchFailed(f"{self.proc.name} wrote no library times (is bench/libtimes first on its path?)")


def timed_env(path: Path) -> dict[str, str]:
    """twingress's environment (harness.twingress_env) with bench/libtimes first on the path: its sitecustomize installs the timers."""
    env = twingress_env()
    return env | {"PYTHONPATH": os.pathsep.join([str(LIBTIMES), env["PYTHONPATH"]]), "TWINGRESS_LIBRARY_TIMES": str(path)}


def library_share(before: dict[str, Any], after: dict[str, Any], requests: int, row: Row) -> None:
    """Per request: each method's and each library's calls, and microseconds less the timing's span per call."""
    calls = {name: after["methods"][name][0] - before["methods"][name][0] for name in after["methods"]}
    spent = {name: after["methods"][name][1] - before["methods"][name][1] - calls[name] * after["span_ns"] for name in calls}
    for lib in LIBRARIES:
        names = [name for name in calls if name.startswith(f"{lib}.")]
        row.library_calls[lib] = round(sum(calls[name] for name in names) / requests, 2)
        row.library_us[lib] = round(sum(spent[name] for name in names) / 1000 / requests, 1)
    row.methods_us = {name: round(ns / 1000 / requests, 1) for name, ns in sorted(spent.items(), key=lambda item: -item[1])[:6] if ns > 0}
    gen = {name: [a - b for a, b in zip(after["gc"][name], before["gc"][name], strict=True)] for name in after["gc"]}
    row.collections_per_1k = round(1000 * sum(cell[0] for cell in gen.values()) / requests, 2)
    row.collector_us = round(sum(cell[1] for cell in gen.values()) / 1000 / requests, 1)
    row.cyclic_objects = round(sum(cell[3] for cell in gen.values()) / requests, 2)
    longest = max(after["gc"], key=lambda name: after["gc"][name][2])  # the after snapshot's longest: since the before one
    row.longest_pause_ms, row.longest_generation = round(after["gc"][longest][2] / 1e6, 1), longest


def scale_objects(count: int) -> list[dict[str, Any]]:
    """C{count} Ingresses (host scale-N.bench.test), each with its Service and an EndpointSlice of three ready endpoints."""
    items: list[dict[str, Any]] = []
    for n in range(count):
        name, meta = f"scale-{n}", {"namespace": targets.NAMESPACE}
        items += [
            {"apiVersion": "v1", "kind": "Service", "metadata": meta | {"name": name}, "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": meta | {"name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}}, "addressType": "IPv4",
             "endpoints": [{"addresses": [f"10.{n >> 8 & 255}.{n & 255}.{i}"], "conditions": {"ready": True}} for i in (1, 2, 3)],
             "ports": [{"name": "http", "port": 8080}]},
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta | {"name": name},
             "spec": {"ingressClassName": "twingress", "rules": [{"host": f"{name}.bench.test", "http": {"paths": [
                 {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}},
        ]
    return items


class Bench(Harness):
    """twingress's rows, then the floor's, each process started with the library timers."""

    def start(self, name: str, argv: list[str], port: int) -> Timed:
        path = self.workdir / f"{name}.times"
        return Timed(self.spawn(name, argv, port, self.args.proxy_cpu, env=timed_env(path)), path)

    def measured(self, timed: Timed, row: Row, load: Callable[[int], tuple[int, int]]) -> Row:
        """A warm-up, then C{load(seconds)} (requests done, failed) between two snapshots of CPU and library times."""
        print(f"==> {row.kind} {row.target}: warm-up {self.args.warmup} s, measuring {self.args.duration} s", flush=True)
        load(self.args.warmup)
        before, used = timed.snapshot(), cpuload.group_cpu_seconds(timed.proc.pid)
        done, failed = load(self.args.duration)
        used, after = cpuload.group_cpu_seconds(timed.proc.pid) - used, timed.snapshot()
        if failed or not done:
            row.failure = f"{failed} failed, {done} done"
            return row
        row.requests, row.cpu_us = done, round(1e6 * used / done, 1)
        library_share(before, after, done, row)
        return row

    def wrk_row(self, timed: Timed, target: str, kind: str, url: str) -> Row:
        def load(seconds: int) -> tuple[int, int]:
            result, _ = wrk.run(url, targets.HOST, seconds, self.args.connections, 1, self.args.load_cpu)
            return result.requests, result.errors

        return self.measured(timed, Row(target, kind), load)

    def h2load_row(self, timed: Timed, target: str, kind: str, url: str, authority: str, grpc: bool) -> Row:
        def load(seconds: int) -> tuple[int, int]:
            done, failed, _, _, _ = h2_bench.h2load(url, authority, seconds, 0, self.args, grpc, self.workdir)
            return done, failed

        return self.measured(timed, Row(target, kind), load)

    def twingress_rows(self, cert: tls_bench.Cert, backend_port: int, grpc_port: int) -> list[Row]:
        manifests = self.workdir / "manifests"
        h2_bench.twingress_manifests(manifests, backend_port, grpc_port, cert)
        objects = json.loads((manifests / "all.json").read_text())
        for item in objects["items"]:
            if item["kind"] == "Ingress":  # HTTP proxied, not redirected: the HTTP/1.1 row is the same route without TLS
                item["metadata"].setdefault("annotations", {})["nginx.ingress.kubernetes.io/ssl-redirect"] = "false"
        objects["items"] += scale_objects(self.args.scale)
        (manifests / "all.json").write_text(json.dumps(objects))
        port, http_port, admin_port = procs.free_port(), procs.free_port(), procs.free_port()
        command = TWINGRESS_CMD.replace("{admin_port}", str(admin_port)).replace("{http_port}", str(http_port))
        argv = targets.twingress_argv(command, Path(sys.prefix) / "bin", manifests, port, 0) + ["--access-log", self.args.access_log]
        timed = self.start("twingress", argv, port)
        tls_bench.wait_for_table(timed.proc, admin_port, 3, self.args.start_timeout)
        tls_bench.wait_until_served(timed.proc, port, {targets.HOST: cert.sha256}, self.args.start_timeout)
        try:
            https = f"https://{tls_bench.WRK_SNI}:{port}"
            return [
                self.wrk_row(timed, "twingress", "http/1.1", f"http://127.0.0.1:{http_port}/"),
                self.wrk_row(timed, "twingress", "https/1.1", https + "/"),
                self.h2load_row(timed, "twingress", "h2", https + "/", targets.HOST, grpc=False),
                self.h2load_row(timed, "twingress", "grpc", https + h2_bench.GRPC_PATH, h2_bench.GRPC_HOST, grpc=True),
            ]
        finally:
            procs.stop(timed.proc)

    def floor_rows(self, backend_port: int) -> list[Row]:
        tls = ["--tls", str(self.workdir / "bench.crt"), str(self.workdir / "bench.key")]
        runs = [("http/1.1", []), ("https/1.1", tls)]
        if self.args.floor_churn:
            runs.append((f"https+{self.args.floor_churn}", [*tls, "--churn", str(self.args.floor_churn)]))
        rows = []
        for kind, options in runs:
            port = procs.free_port()
            argv = [sys.executable, str(REPO / "bench" / "legacy" / "splice_floor.py"), str(port), str(backend_port), "--batched", *options]
            timed = self.start(f"floor-{kind.replace('/', '')}", argv, port)
            try:
                scheme = "https" if options else "http"
                rows.append(self.wrk_row(timed, "splice floor", kind, f"{scheme}://{tls_bench.WRK_SNI}:{port}/"))
            finally:
                procs.stop(timed.proc)
        return rows + [self.h2_floor_row(backend_port, tls[1:])]

    def h2_floor_row(self, backend_port: int, cert_and_key: list[str]) -> Row:
        """h2_proxy_floor.py under twingress's h2 row's load: what any h2-to-HTTP/1.1 proxy on these libraries pays."""
        port = procs.free_port()
        argv = [sys.executable, str(REPO / "bench" / "legacy" / "h2_proxy_floor.py"), str(port), str(backend_port), *cert_and_key]
        timed = self.start("floor-h2", argv, port)
        try:
            return self.h2load_row(timed, "h2 floor", "h2", f"https://{tls_bench.WRK_SNI}:{port}/", targets.HOST, grpc=False)
        finally:
            procs.stop(timed.proc)

    def run_all(self) -> list[Row]:
        cert = tls_bench.make_cert(tls_bench.make_key("ecdsa"), [targets.HOST, tls_bench.WRK_SNI, h2_bench.GRPC_HOST])
        (self.workdir / "bench.crt").write_bytes(cert.cert_pem)
        (self.workdir / "bench.key").write_bytes(cert.key_pem)
        backend_port, grpc_port = procs.free_port(), procs.free_port()
        self.nginx("backend", targets.backend_conf(self.workdir, backend_port), backend_port, self.args.load_cpu)
        self.spawn("grpcecho", [str(h2_bench.build_grpcecho()), "-listen", f"127.0.0.1:{grpc_port}"], grpc_port, self.args.load_cpu)
        rows = self.twingress_rows(cert, backend_port, grpc_port) if "twingress" in self.args.targets else []
        return rows + (self.floor_rows(backend_port) if "floor" in self.args.targets else [])


def table(rows: list[Row]) -> str:
    lines = [f"{'target':<14}{'kind':<11}{'CPU/req':>9}{'ssl us':>8}{'calls':>7}{'h2 us':>8}{'calls':>7}  rest",
             "-" * 72]
    for r in rows:
        if r.failure:
            lines.append(f"{r.target:<14}{r.kind:<11}  FAILED {r.failure}")
            continue
        assert r.cpu_us is not None
        rest = r.cpu_us - sum(r.library_us.values())
        lines.append(f"{r.target:<14}{r.kind:<11}{r.cpu_us:>8.1f} {r.library_us['ssl']:>7.1f}{r.library_calls['ssl']:>7.2f}"
                     f"{r.library_us['h2']:>8.1f}{r.library_calls['h2']:>7.2f}  {rest:.1f}")
        if r.methods_us:
            lines.append("    " + ", ".join(f"{name} {us}" for name, us in r.methods_us.items()))
        lines.append(f"    collector: {r.collections_per_1k} collections per 1k requests, {r.collector_us} us and {r.cyclic_objects}"
                     f" cyclic objects per request, longest {r.longest_pause_ms} ms ({r.longest_generation})")
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    p.add_argument("--duration", type=int, default=8, help="measured seconds per row (8)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per row (3)")
    p.add_argument("--connections", type=int, default=32, help="wrk -c and h2load -c (32)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m (10)")
    p.add_argument("--floor-churn", type=int, default=0, metavar="N",
                   help="also the TLS floor visiting N objects of a 10 MB working set per request (splice_floor.py --churn)")
    p.add_argument("--scale", type=int, default=0, metavar="N",
                   help="N more Ingresses for twingress, each with a Service and an EndpointSlice (no traffic to them)")
    p.add_argument("--targets", default="twingress,floor", help="which rows: twingress, floor or both (twingress,floor)")
    p.add_argument("--access-log", default="off", metavar="WHERE",
                   help="twingress's --access-log: off (the default), as the floors, which log nothing, or - or a file")
    h2_bench.add_run_arguments(p)
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    rows, _, status = run_in_workdir(args, "twlib-", Bench, lambda bench: bench.run_all(),
                                     (h2_bench.BenchFailed, tls_bench.BenchFailed, procs.StartError, wrk.WrkError))
    if rows is None:
        return status
    print()
    print(table(rows))
    out = {"benchmark": "library_share", "environment": environment(args.nginx),
           "config": {k: getattr(args, k) for k in ("duration", "warmup", "connections", "streams", "floor_churn", "scale", "targets", "proxy_cpu", "load_cpu")},
           "results": [row.__dict__ for row in rows]}
    return write_and_exit_status(args.json, out, [f"{row.kind} {row.target}: {row.failure}" for row in rows if row.failure])


if __name__ == "__main__":
    sys.exit(main())
