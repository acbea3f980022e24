"""
Watch floor: what watching alone costs a cluster being filled.  Twice, each in a fresh control
plane: C{--routes} headless Services, EndpointSlices and Ingresses created by C{--threads} threads
(as convergence's scale steps create them), once beside a process that runs twingress's informers
and builds nothing (bench/lib/informers.py), once with nothing else running.  The ratio of the two
creation rates is the floor of convergence's creation ratio (C{--baseline}): what twingress cannot
beat with its informers as they are; the watcher's CPU seconds say what the watching took.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from typing import Any

from bench.lib import cluster, cpu, procs
from bench.lib.cluster import SCALE_NS, Api
from bench.lib.results import REPO
from bench.scenarios import Run

NAME = "watch-floor"
QUESTION = "What does watching alone cost a cluster being filled (the floor of the creation ratio)?"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--routes", type=int, default=50000, help="routes created (x3 objects) in each run (50000)")
    p.add_argument("--threads", type=int, default=12, help="creating threads (12, as convergence)")


def check(args: argparse.Namespace) -> str:
    if args.against:
        return "--against: the cluster scenarios measure twingress alone"
    if args.routes < 1 or args.threads < 1:
        return "--routes and --threads at least 1"
    return cluster.missing()


def rate(run: Run, watched: bool) -> dict[str, Any]:
    """Objects/s creating the routes in a fresh control plane, and the watcher's CPU seconds (watched only)."""
    name = "watched" if watched else "alone"
    with ExitStack() as stack:
        children = procs.Children(stack, run.children.workdir, run.args.start_timeout)
        kube = cluster.start_control_plane(children, f"kube-{name}")
        api = Api(kube.kubeconfig)
        api.create(cluster.namespace(SCALE_NS))
        watcher = None
        if watched:
            watcher = procs.start("informers", [sys.executable, "-m", "bench.lib.informers", str(kube.kubeconfig)], run.children.workdir,
                                  run.proxy_cpus, cwd=REPO)
            stack.callback(procs.stop, watcher)
            deadline = time.monotonic() + run.args.start_timeout
            while "watching" not in watcher.log.read_text(errors="replace"):
                if watcher.popen.poll() is not None or time.monotonic() > deadline:
                    raise procs.BenchFailed(f"the informers did not start:\n{watcher.tail()}")
                time.sleep(0.1)
            time.sleep(3.0)  # listed and watching every kind
        seconds, _ = cluster.fill(api, 0, run.args.routes, run.args.threads, headless=True)
        figure: dict[str, Any] = {"run": name, "objects": 3 * run.args.routes, "seconds": round(seconds, 2),
                                  "objects_per_s": round(3 * run.args.routes / seconds, 1)}
        if watcher is not None:
            figure["watcher_cpu_s"] = round(sum(cpu.user_system_seconds(watcher.pid)), 2)
        run.say(f"{name}: {figure['objects_per_s']:.0f} objects/s")
        return figure


def run(run: Run) -> list[dict[str, Any]]:
    watched = rate(run, watched=True)
    alone = rate(run, watched=False)
    return [watched, alone, {"run": "ratio", "ratio": round(watched["objects_per_s"] / alone["objects_per_s"], 3)}]


def lines(document: dict[str, Any]) -> list[str]:
    by_run = {f["run"]: f for f in document["figures"]}
    if not {"watched", "alone", "ratio"} <= by_run.keys():
        return [str(f) for f in document["figures"]]
    watched, alone = by_run["watched"], by_run["alone"]
    return [f"{alone['objects']} objects: {alone['objects_per_s']:.0f}/s alone, {watched['objects_per_s']:.0f}/s beside twingress's informers "
            f"({by_run['ratio']['ratio']:.2f}x); the watcher's CPU {watched['watcher_cpu_s']:.1f} s"]
