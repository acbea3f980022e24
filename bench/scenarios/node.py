"""
Node: how much one node serves, by layout - twingress with --workers 1, 2, ... N (and each of
C{--against} with as many workers or Go threads), each alone under the same load: requests per
second answered 2xx, and CPU per request of its whole process group (a primary and its workers).

With C{--workers 1} this is the per-core row beside the peers (the rate each serves on one CPU);
the CPU ratio of two contenders is better taken by C{pairs}, which cancels this guest's drift.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.lib import cpu, load, peers, procs, site
from bench.scenarios import Run

NAME = "node"
QUESTION = "How many requests per second does a node serve with --workers 1..N, and at what CPU per request, beside nginx and the Go peers?"
AGAINST = ("nginx", *peers.PEERS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kinds", type=lambda s: s.split(","), default=[load.HTTP], help=f"comma-separated, of {', '.join(load.KINDS)} ({load.HTTP})")
    p.add_argument("--seconds", type=int, default=10, help="measured seconds per row (10)")
    p.add_argument("--warmup", type=int, default=2, help="seconds of load before each measured one (2)")
    p.add_argument("--connections", type=int, default=64, help="h2load -c (64)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m over h2 and gRPC (10)")


def check(args: argparse.Namespace) -> str:
    unknown = [k for k in args.kinds if k not in load.KINDS] + [a for a in args.against if a not in AGAINST]
    if unknown:
        return f"unknown {', '.join(unknown)}: kinds from {', '.join(load.KINDS)}, --against from {', '.join(AGAINST)}"
    return "--seconds at least 1" if args.seconds < 1 else ""


def start(run: Run, name: str, backends: site.Backends, workers: int) -> site.Listening:
    label = f"{name}-w{workers}"
    if name == "twingress":
        return site.twingress(run.children, label, site.Checkout(site.REPO), backends, run.proxy_cpus, workers)
    if name == "nginx":
        return site.nginx(run.children, label, backends, run.proxy_cpus, workers)
    return peers.start(run.children, name, backends, run.proxy_cpus, workers)


def measure(run: Run, listening: site.Listening, kind: str) -> dict[str, Any]:
    args = run.args
    port = listening.http_port if kind == load.HTTP else listening.https_port
    deadline = time.monotonic() + args.start_timeout
    while load.h2load(kind, port, run.children.workdir, run.load_cpus, 1, 1, "-n", "20").ok != 20:
        if time.monotonic() > deadline or listening.proc.popen.poll() is not None:
            raise procs.BenchFailed(f"{listening.name} did not serve {kind}:\n{listening.proc.tail()}")
        time.sleep(0.5)
    if args.warmup:
        load.h2load(kind, port, run.children.workdir, run.load_cpus, args.connections, args.streams, "-D", str(args.warmup))
    user0, system0 = cpu.group_user_system(listening.proc.pid)
    served = load.h2load(kind, port, run.children.workdir, run.load_cpus, args.connections, args.streams, "-D", str(args.seconds))
    user1, system1 = cpu.group_user_system(listening.proc.pid)
    if served.failed or not served.ok:
        raise procs.BenchFailed(f"{listening.name}: {served.failed} failed, {served.ok} answered")
    return {"rps": round(served.rps), "requests": served.ok,
            "cpu_us": round(1e6 * (user1 - user0 + system1 - system0) / served.ok, 2),
            "system_us": round(1e6 * (system1 - system0) / served.ok, 2)}


def run(run: Run) -> list[dict[str, Any]]:
    backends = site.start_backends(run.children, run.load_cpus)
    figures = []
    for name in ("twingress", *run.args.against):
        for workers in range(1, run.args.workers + 1):
            try:
                listening = start(run, name, backends, workers)
            except procs.BenchFailed as e:
                run.failures.append(f"{name} --workers {workers}: {e}")
                continue
            try:
                for kind in run.args.kinds:
                    try:
                        row = {"kind": kind, "contender": name, "workers": workers, **measure(run, listening, kind)}
                    except procs.BenchFailed as e:
                        run.failures.append(f"{kind} {name} --workers {workers}: {e}")
                        continue
                    figures.append(row)
                    run.say(line(row))
            finally:
                procs.stop(listening.proc)
    return figures


def line(row: dict[str, Any]) -> str:
    return f"{row['kind']:<9} {row['contender']:<10} workers {row['workers']:>2}: {row['rps']:>8,} req/s, {row['cpu_us']:.1f} us CPU per request ({row['system_us']:.1f} system)"


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
