"""
Floor-library: what pyOpenSSL and h2 cost per request inside twingress, against inside the floors.
Every public method of C{OpenSSL.SSL.Connection} and C{h2.connection.H2Connection} is timed inside
the running process (bench/libtimes), in twingress and in the floors alike, under the same loads:

- twingress: HTTP/1.1 and HTTPS/1.1 keep-alive (wrk), h2 over TLS and gRPC unary (h2load -m);
- the floors: bench/lib/splicefloor.py (bytes spliced, nothing parsed; --batched, as twingress
  writes) in clear and with TLS (twingress's TLS transport), under the same wrk loads; with
  C{--floor-churn N}, the TLS floor again visiting N objects of a 10 MB working set per request;
  bench/lib/h2proxyfloor.py (an h2-to-HTTP/1.1 conversion and nothing else) under the h2 load.

Each row: the process group's CPU per request, the microseconds (less the timing's own span) and
calls per request inside each library, its dearest methods, and the cyclic collector's collections,
time, cyclic objects per request and longest pause.  C{--scale N}: N more Ingresses (a Service and
an EndpointSlice of three endpoints each, no traffic) for the collector to scan.  The timing adds a
Python call per library call: compare CPU per request with C{node}'s, not this scenario's.  In the
compiled build h2 is a Cython type whose methods cannot be wrapped: its column says "not timed".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from bench.lib import cpu, load, procs, site, wrk
from bench.lib.load import HOST, SNI
from bench.scenarios import Run
from bench.scenarios.tls import der, served

NAME = "floor-library"
QUESTION = "What do pyOpenSSL and h2 cost per request inside twingress, against inside the TLS floor and the splice floor?"
TOOLS = ("wrk", "nginx")
LIBTIMES = site.REPO / "bench" / "libtimes"
LIBRARIES = ("ssl", "h2")
TARGETS = ("twingress", "floor")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=int, default=8, help="measured seconds per row (8)")
    p.add_argument("--warmup", type=int, default=3, help="seconds of load before each measured one (3)")
    p.add_argument("--connections", type=int, default=32, help="wrk -c and h2load -c (32)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m (10)")
    p.add_argument("--floor-churn", type=int, default=0, metavar="N", help="also the TLS floor visiting N objects of a 10 MB working set per request")
    p.add_argument("--scale", type=int, default=0, metavar="N", help="N more Ingresses for twingress, each with a Service and an EndpointSlice")
    p.add_argument("--targets", type=lambda s: s.split(","), default=list(TARGETS), help="which rows: twingress, floor or both (twingress,floor)")


def check(args: argparse.Namespace) -> str:
    if args.against:
        return "--against: floor-library compares twingress with the floors, no peer"
    if [t for t in args.targets if t not in TARGETS] or not args.targets:
        return f"--targets: of {', '.join(TARGETS)}"
    if args.seconds < 1 or args.warmup < 0 or args.connections < 1 or args.streams < 1 or args.floor_churn < 0 or args.scale < 0:
        return "--seconds, --connections and --streams at least 1; --warmup, --floor-churn and --scale at least 0"
    return ""


class Timed:
    """A child started with the library timers, and its snapshots of their totals (SIGUSR2 appends one)."""

    def __init__(self, proc: procs.Proc, path: Path) -> None:
        self.proc, self.path = proc, path

    def snapshot(self) -> dict[str, Any]:
        count = len(self.path.read_text().splitlines()) if self.path.exists() else 0
        os.kill(self.proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            now = self.path.read_text().splitlines() if self.path.exists() else []
            if len(now) > count:
                got: dict[str, Any] = json.loads(now[-1])
                return got
            time.sleep(0.01)
        raise procs.BenchFailed(f"{self.proc.name} wrote no library times (is bench/libtimes first on its path?):\n{self.proc.tail()}")


def share(before: dict[str, Any], after: dict[str, Any], requests: int) -> dict[str, Any]:
    """Per request: each library's calls and µs less the timing's span per call (None where not timed), the dearest methods, the collector."""
    calls = {name: after["methods"][name][0] - before["methods"][name][0] for name in after["methods"]}
    spent = {name: after["methods"][name][1] - before["methods"][name][1] - calls[name] * after["span_ns"] for name in calls}
    untimed = after.get("untimed", {})
    out: dict[str, Any] = {"library_us": {}, "library_calls": {}, "untimed": untimed}
    for lib in LIBRARIES:
        names = [name for name in calls if name.startswith(f"{lib}.")]
        timed = lib not in untimed
        out["library_calls"][lib] = round(sum(calls[n] for n in names) / requests, 2) if timed else None
        out["library_us"][lib] = round(sum(spent[n] for n in names) / 1000 / requests, 1) if timed else None
    out["methods_us"] = {name: round(ns / 1000 / requests, 1) for name, ns in sorted(spent.items(), key=lambda item: -item[1])[:6] if ns > 0}
    gen = {name: [a - b for a, b in zip(after["gc"][name], before["gc"][name], strict=True)] for name in after["gc"]}
    longest = max(after["gc"], key=lambda name: after["gc"][name][2])  # the after snapshot's longest: since the before one
    return out | {"collections_per_1k": round(1000 * sum(c[0] for c in gen.values()) / requests, 2),
                  "collector_us": round(sum(c[1] for c in gen.values()) / 1000 / requests, 1),
                  "cyclic_objects": round(sum(c[3] for c in gen.values()) / requests, 2),
                  "longest_pause_ms": round(after["gc"][longest][2] / 1e6, 1), "longest_generation": longest}


def measured(run: Run, timed: Timed, target: str, kind: str, loaded: Callable[[int], tuple[int, int]]) -> dict[str, Any]:
    """A warm-up, then C{loaded(seconds)} (requests answered, failed) between two snapshots of CPU and library times."""
    run.say(f"==> {kind} {target}: warm-up {run.args.warmup} s, measuring {run.args.seconds} s")
    if run.args.warmup:
        loaded(run.args.warmup)
    before, cpu0 = timed.snapshot(), cpu.group_user_system(timed.proc.pid)
    done, failed = loaded(run.args.seconds)
    used, after = sum(cpu.group_user_system(timed.proc.pid)) - sum(cpu0), timed.snapshot()
    if failed or not done:
        raise procs.BenchFailed(f"{failed} failed, {done} answered")
    return {"target": target, "kind": kind, "requests": done, "cpu_us": round(1e6 * used / done, 1)} | share(before, after, done)


def by_wrk(run: Run, url: str) -> Callable[[int], tuple[int, int]]:
    def loaded(seconds: int) -> tuple[int, int]:
        result = wrk.run(url, HOST, seconds, run.args.connections, run.load_cpus)
        return result.requests, result.errors
    return loaded


def by_h2load(run: Run, kind: str, port: int) -> Callable[[int], tuple[int, int]]:
    def loaded(seconds: int) -> tuple[int, int]:
        got = load.h2load(kind, port, run.children.workdir, run.load_cpus, run.args.connections, run.args.streams, "-D", str(seconds))
        return got.ok, got.failed
    return loaded


def scale_objects(count: int) -> list[dict[str, Any]]:
    """C{count} Ingresses (host scale-N.bench.test), each with its Service and an EndpointSlice of three ready endpoints."""
    items: list[dict[str, Any]] = []
    for n in range(count):
        name, meta = f"scale-{n}", {"namespace": "default"}
        items += [
            {"apiVersion": "v1", "kind": "Service", "metadata": meta | {"name": name}, "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": meta | {"name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}}, "addressType": "IPv4",
             "endpoints": [{"addresses": [f"10.{n >> 8 & 255}.{n & 255}.{i}"], "conditions": {"ready": True}} for i in (1, 2, 3)],
             "ports": [{"name": "http", "port": 8080}]},
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta | {"name": name},
             "spec": {"ingressClassName": "twingress", "rules": [{"host": f"{name}.bench.test", "http": {"paths": [
                 {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}}]
    return items


def twingress_rows(run: Run, backends: site.Backends) -> list[dict[str, Any]]:
    path = run.children.workdir / "twingress.times"
    more = {"scale.json": json.dumps({"apiVersion": "v1", "kind": "List", "items": scale_objects(run.args.scale)})} if run.args.scale else None
    listening = site.twingress(run.children, "twingress", site.Checkout(site.REPO), backends, run.proxy_cpus, 1,
                               ["--admin", ""], more_manifests=more, pythonpath=[str(LIBTIMES)],
                               environment={"TWINGRESS_LIBRARY_TIMES": str(path)})
    timed = Timed(listening.proc, path)
    try:
        served(run, listening.proc, listening.https_port, {SNI: hashlib.sha256(der(backends)).hexdigest()}, HOST)
        https = f"https://{SNI}:{listening.https_port}/"
        loads = {"http/1.1": by_wrk(run, f"http://127.0.0.1:{listening.http_port}/"), "https/1.1": by_wrk(run, https),
                 "h2": by_h2load(run, load.H2, listening.https_port), "grpc": by_h2load(run, load.GRPC, listening.https_port)}
        return [row for kind, loaded in loads.items() if (row := each(run, timed, "twingress", kind, loaded))]
    finally:
        procs.stop(listening.proc)


def floor(run: Run, name: str, module: str, *argv: str) -> tuple[Timed, int]:
    """bench/lib/MODULE on a port of its own, with the library timers, on the proxy CPUs."""
    port, path = procs.free_port(), run.children.workdir / f"{name}.times"
    env = dict(os.environ) | {"PYTHONPATH": os.pathsep.join([str(LIBTIMES), str(site.REPO)]), "TWINGRESS_LIBRARY_TIMES": str(path),
                              "PYTHONUNBUFFERED": "1"}
    proc = run.children.spawn(name, [sys.executable, "-m", module, str(port), *argv], port, run.proxy_cpus, env=env, cwd=site.REPO)
    return Timed(proc, path), port


def floor_rows(run: Run, backends: site.Backends) -> list[dict[str, Any]]:
    tls = ["--tls", str(backends.cert), str(backends.key)]
    runs: list[tuple[str, list[str]]] = [("http/1.1", []), ("https/1.1", tls)]
    if run.args.floor_churn:
        runs.append((f"https+{run.args.floor_churn}", [*tls, "--churn", str(run.args.floor_churn)]))
    rows = []
    for kind, options in runs:
        timed, port = floor(run, f"floor-{kind.replace('/', '')}", "bench.lib.splicefloor", str(backends.http_port), "--batched", *options)
        try:
            url = f"{'https' if options else 'http'}://{SNI}:{port}/"
            rows.append(each(run, timed, "splice floor", kind, by_wrk(run, url)))
        finally:
            procs.stop(timed.proc)
    timed, port = floor(run, "floor-h2", "bench.lib.h2proxyfloor", str(backends.http_port), str(backends.cert), str(backends.key))
    try:
        rows.append(each(run, timed, "h2 floor", "h2", by_h2load(run, load.H2, port)))
    finally:
        procs.stop(timed.proc)
    return [row for row in rows if row]


def each(run: Run, timed: Timed, target: str, kind: str, loaded: Callable[[int], tuple[int, int]]) -> dict[str, Any]:
    """L{measured}'s row, or {} with its failure in the results: the other rows are still measured."""
    try:
        return measured(run, timed, target, kind, loaded)
    except procs.BenchFailed as e:
        run.failed(f"{kind} {target}", e)
        return {}


def run(run: Run) -> list[dict[str, Any]]:
    backends = site.start_backends(run.children, run.load_cpus)
    rows: list[dict[str, Any]] = []
    for target, rows_of in (("twingress", twingress_rows), ("floor", floor_rows)):
        if target not in run.args.targets:
            continue
        try:
            rows += rows_of(run, backends)
        except procs.BenchFailed as e:
            run.failed(f"{target}", e)
    for row in rows:
        run.say(line(row))
    return rows


def _us(value: Optional[float], calls: Optional[float]) -> str:
    return "not timed" if value is None else f"{value:.1f} us in {calls:.2f} calls"


def line(row: dict[str, Any]) -> str:
    rest = row["cpu_us"] - sum(v for v in row["library_us"].values() if v is not None)
    dearest = ", ".join(f"{name} {us}" for name, us in row["methods_us"].items())
    return (f"{row['target']:<13} {row['kind']:<10} {row['cpu_us']:.1f} us CPU per request: ssl {_us(row['library_us']['ssl'], row['library_calls']['ssl'])}, "
            f"h2 {_us(row['library_us']['h2'], row['library_calls']['h2'])}, the rest {rest:.1f}; dearest {dearest or '-'}; "
            f"collector {row['collections_per_1k']} collections per 1k requests, {row['collector_us']} us and {row['cyclic_objects']} cyclic objects "
            f"per request, longest {row['longest_pause_ms']} ms ({row['longest_generation']})")


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
