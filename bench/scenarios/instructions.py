"""
Instructions: instructions per request of a whole live proxy process - TLS, the event loop, the
sockets, every thread - counted by valgrind (callgrind, C{--instr-atstart=no}) over a window of
C{--requests} h2load requests, h2 or HTTPS/1.1 (C{--kinds}), for twingress and each of
C{--against}: the floor of an h2 proxy on twingress's libraries (bench/lib/h2proxyfloor.py, h2
only), Traefik, Caddy.  Only requests answered 2xx count.  The count is what each process ran in
user space (not the kernel's work), and instructions are not time: C{--cpu SECONDS} also runs
each proxy without valgrind under a timed h2load for its user and system CPU per request, and
C{--cache-sim} adds callgrind's simulated L1 misses per request.  C{--keep-profiles DIR} keeps
each count's callgrind file (C{callgrind_annotate --inclusive=yes DIR/h2-twingress.callgrind}).
A proxy's start under valgrind takes a minute: --start-timeout is at least 180 here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.lib import cpu, load, peers, procs, site
from bench.scenarios import Run

NAME = "instructions"
QUESTION = "How many instructions per request does each live proxy run (callgrind), h2 and HTTPS/1.1?"
TOOLS = ("nginx", "valgrind", "callgrind_control")
FLOOR = "floor"
AGAINST = (FLOOR, *peers.PEERS)
KINDS = (load.H2, load.HTTPS)
_COLLECTED_RE = re.compile(r"Collected : (\d+)((?: \d+)*)")
_CACHE_EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")  # callgrind's --cache-sim=yes events, in order


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kinds", type=lambda s: s.split(","), default=[load.H2], help=f"comma-separated, of {', '.join(KINDS)} ({load.H2}); the floor is h2's only")
    p.add_argument("--requests", type=int, default=5000, help="requests counted under valgrind (5000)")
    p.add_argument("--warmup", type=int, default=2000, help="requests before the count (2000)")
    p.add_argument("--connections", type=int, default=4, help="h2load -c under valgrind (4)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m over h2 (10); HTTPS/1.1 sends one at a time")
    p.add_argument("--tries", type=int, default=3, help="valgrind runs a proxy may take to be counted (3: valgrind has stopped a Go binary mid-run)")
    p.add_argument("--cpu", type=int, default=0, metavar="SECONDS", help="also time each proxy without valgrind this long (0: no)")
    p.add_argument("--cpu-connections", type=int, default=32, help="h2load -c of the timed load (32)")
    p.add_argument("--cache-sim", action="store_true", help="with callgrind's cache simulation: L1 instruction and data misses per request")
    p.add_argument("--keep-profiles", type=Path, metavar="DIR", help="keep each count's callgrind file in DIR (KIND-PROXY.callgrind)")


def check(args: argparse.Namespace) -> str:
    unknown = [a for a in args.against if a not in AGAINST] + [k for k in args.kinds if k not in KINDS]
    if unknown:
        return f"unknown {', '.join(unknown)}: --against from {', '.join(AGAINST)}, --kinds from {', '.join(KINDS)}"
    if args.requests < 1 or args.warmup < 0 or args.connections < 1 or args.streams < 1 or args.tries < 1 or args.cpu < 0:
        return "--requests, --connections, --streams and --tries at least 1; --warmup and --cpu at least 0"
    args.start_timeout = max(args.start_timeout, 180.0)
    return ""


def start(run: Run, proxy: str, backends: site.Backends, wrapper: list[str], label: str) -> site.Listening:
    """C{proxy} serving TLS (h2 and HTTP/1.1 by ALPN) under C{wrapper} (valgrind's, or nothing), on the proxy CPUs."""
    if proxy == "twingress":
        return site.twingress(run.children, label, site.Checkout(site.REPO), backends, run.proxy_cpus, run.args.workers, wrapper=wrapper)
    if proxy == FLOOR:
        port = procs.free_port()
        argv = [*wrapper, sys.executable, "-m", "bench.lib.h2proxyfloor", str(port), str(backends.http_port), str(backends.cert), str(backends.key)]
        env = {"PYTHONPATH": str(site.REPO), "PYTHONUNBUFFERED": "1"}
        proc = run.children.spawn(label, argv, port, run.proxy_cpus, env=dict(os.environ) | env, cwd=site.REPO)
        return site.Listening(label, proc, port, port)
    # Go preempts goroutines with signals (SIGURG), which callgrind's signal bookkeeping asserts on; one OS thread
    # running Go code loses nothing by cooperative preemption alone.  The timed run keeps the default.
    return peers.start(run.children, proxy, backends, run.proxy_cpus, run.args.workers, wrapper,
                       {"GODEBUG": "asyncpreemptoff=1"} if wrapper else None)


def h2load(run: Run, kind: str, port: int, connections: int, *amount: str) -> load.Served:
    return load.h2load(kind, port, run.children.workdir, run.load_cpus, connections, run.args.streams, *amount)


def served(run: Run, listening: site.Listening, kind: str) -> None:
    """Until twenty requests are answered 2xx: the table is live, the backend reached."""
    deadline = time.monotonic() + run.args.start_timeout
    while time.monotonic() < deadline:
        if listening.proc.popen.poll() is not None:
            raise procs.BenchFailed(f"{listening.name} exited:\n{listening.proc.tail()}")
        try:
            if h2load(run, kind, listening.https_port, 1, "-n", "20").ok == 20:
                return
        except procs.BenchFailed:
            pass
        time.sleep(1)
    raise procs.BenchFailed(f"{listening.name} did not serve {kind} within {run.args.start_timeout:.0f} s:\n{listening.proc.tail()}")


def count(run: Run, proxy: str, kind: str, backends: site.Backends) -> dict[str, Any]:
    """The instructions of C{proxy} per request, under callgrind."""
    a = run.args
    out = run.children.workdir / f"{kind.replace('/', '')}-{proxy}.callgrind"
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", *(["--cache-sim=yes"] if a.cache_sim else [])]
    listening = start(run, proxy, backends, wrapper, f"{proxy}-callgrind")
    try:
        served(run, listening, kind)
        if a.warmup:
            h2load(run, kind, listening.https_port, a.connections, "-n", str(a.warmup))
        subprocess.run(["callgrind_control", "-i", "on", str(listening.proc.pid)], check=True, capture_output=True, timeout=60)
        got = h2load(run, kind, listening.https_port, a.connections, "-n", str(a.requests))
        subprocess.run(["callgrind_control", "-i", "off", str(listening.proc.pid)], check=True, capture_output=True, timeout=60)
    except subprocess.SubprocessError as e:
        raise procs.BenchFailed(f"callgrind_control: {e}") from e
    finally:
        procs.stop(listening.proc, grace=120)  # valgrind writes its counts on the way out
    collected = _COLLECTED_RE.search(listening.proc.log.read_text(errors="replace"))
    if got.failed or not got.ok or collected is None:
        raise procs.BenchFailed(f"{got.failed} failed, {got.ok} answered, counted: {collected is not None}\n{listening.proc.tail()}")
    row: dict[str, Any] = {"requests": got.ok, "instructions": round(int(collected.group(1)) / got.ok)}
    if a.keep_profiles is not None:
        a.keep_profiles.mkdir(parents=True, exist_ok=True)
        shutil.copy(out, a.keep_profiles / out.name)
    if a.cache_sim:
        events = dict(zip(_CACHE_EVENTS, [int(collected.group(1)), *map(int, collected.group(2).split())], strict=False))
        row["cache_misses"] = {name: round(events.get(name, 0) / got.ok) for name in ("I1mr", "D1mr", "D1mw")}
    return row


def timed(run: Run, proxy: str, kind: str, backends: site.Backends) -> dict[str, Any]:
    """The user and system CPU of C{proxy}'s process group per request, without valgrind, under a timed load."""
    listening = start(run, proxy, backends, [], f"{proxy}-timed")
    try:
        served(run, listening, kind)
        h2load(run, kind, listening.https_port, run.args.cpu_connections, "-D", "2")
        user0, system0 = cpu.group_user_system(listening.proc.pid)
        got = h2load(run, kind, listening.https_port, run.args.cpu_connections, "-D", str(run.args.cpu))
        user1, system1 = cpu.group_user_system(listening.proc.pid)
    finally:
        procs.stop(listening.proc)
    if got.failed or not got.ok:
        raise procs.BenchFailed(f"timed load: {got.failed} failed, {got.ok} answered")
    return {"cpu_requests": got.ok, "user_us": round(1e6 * (user1 - user0) / got.ok, 1), "system_us": round(1e6 * (system1 - system0) / got.ok, 1)}


def counted(run: Run, proxy: str, kind: str, backends: site.Backends) -> dict[str, Any]:
    """L{count}, again after a failure up to C{--tries} times."""
    for attempt in range(1, run.args.tries + 1):
        try:
            return count(run, proxy, kind, backends) | {"tries": attempt}
        except procs.BenchFailed as e:
            if attempt == run.args.tries:
                raise
            run.say(f"==> {kind} {proxy}: count {attempt} failed, again: {str(e).splitlines()[0]}")
    raise AssertionError("unreachable")


def run(run: Run) -> list[dict[str, Any]]:
    backends = site.start_backends(run.children, run.load_cpus)
    rows = []
    for kind in run.args.kinds:
        for proxy in ("twingress", *run.args.against):
            if kind == load.HTTPS and proxy == FLOOR:
                continue  # the h2 floor speaks h2 only
            try:
                row = {"kind": kind, "proxy": proxy, **counted(run, proxy, kind, backends)}
                if run.args.cpu:
                    row |= timed(run, proxy, kind, backends)
            except procs.BenchFailed as e:
                run.failed(f"{kind} {proxy}", e)
                continue
            rows.append(row)
            run.say(line(row))
    return rows


def line(row: dict[str, Any]) -> str:
    parts = [f"{row['instructions']:,} instructions per request ({row['requests']} counted, run {row['tries']})"]
    if row.get("cache_misses"):
        parts.append("simulated L1 misses per request " + ", ".join(f"{name} {n:,}" for name, n in row["cache_misses"].items()))
    if "user_us" in row:
        parts.append(f"without valgrind {row['user_us']} us user + {row['system_us']} us system per request ({row['cpu_requests']} requests)")
    return f"{row['kind']:<9} {row['proxy']:<9} {'; '.join(parts)}"


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
