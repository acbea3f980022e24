"""
Pairs: this tree's twingress against another contender, CPU per request by interleaved paired
slices (L{bench.lib.pairs}), over HTTP/1.1 in clear, HTTPS/1.1, h2 and gRPC.

The other contender is another checkout's build (C{--baseline PATH}: a git worktree with its own
.venv, compiled or not; the ratio is this tree's CPU over the baseline's: below 1, this tree is
cheaper), or each of C{--against} in turn (nginx, traefik, caddy; twingress: a second process of
this tree, the method's own check, whose interval should hold 1; workers1: this tree with --workers 1,
so that with C{--workers N} the ratio is what N workers cost per request over one, on the same CPUs).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.lib import load, peers, site
from bench.lib.pairs import Contender, describe, figure, run_pairs
from bench.lib.procs import BenchFailed
from bench.scenarios import Run

NAME = "pairs"
QUESTION = "Does this tree cost more or less CPU per request than a baseline checkout or a peer, over HTTP/1.1, HTTPS, h2 and gRPC?"
AGAINST = ("twingress", "workers1", "nginx", *peers.PEERS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", type=Path, metavar="PATH", help="another twingress checkout with its own .venv: the ratio is this tree's over it")
    p.add_argument("--kinds", type=lambda s: s.split(","), default=[load.H2],
                   help=f"comma-separated, of {', '.join(load.KINDS)} ({load.H2}); all: every one")
    p.add_argument("--pairs", type=int, default=40, help="pairs of slices per kind (40: about 4 minutes a kind)")
    p.add_argument("--seconds", type=int, default=3, help="a slice's load (3)")
    p.add_argument("--connections", type=int, default=32, help="h2load -c (32)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m over h2 and gRPC (10); HTTP/1.1 sends one at a time")
    p.add_argument("--confidence", type=float, default=0.95, help="of the median's interval (0.95)")


def check(args: argparse.Namespace) -> str:
    """What is wrong with the options, or ''."""
    if args.kinds == ["all"]:
        args.kinds = list(load.KINDS)
    unknown = [k for k in args.kinds if k not in load.KINDS] + [a for a in args.against if a not in AGAINST]
    if unknown:
        return f"unknown {', '.join(unknown)}: kinds from {', '.join(load.KINDS)}, --against from {', '.join(AGAINST)}"
    if args.pairs < 1 or args.seconds < 1:
        return "--pairs and --seconds at least 1"
    if args.baseline is None and not args.against:
        return "pairs: --baseline PATH or --against NAME[,NAME]"
    return ""


def contender(run: Run, listening: site.Listening, kind: str) -> Contender:
    args = run.args
    port = listening.http_port if kind == load.HTTP else listening.https_port

    def loaded(seconds: int) -> load.Served:
        return load.h2load(kind, port, run.children.workdir, run.load_cpus, args.connections, args.streams, "-D", str(seconds))

    return Contender(listening.name, listening.proc.pid, loaded)


def served(run: Run, listening: site.Listening, kind: str) -> None:
    """Until twenty requests of C{kind} are answered 2xx: routes live, backend reached (or L{BenchFailed})."""
    import time
    port = listening.http_port if kind == load.HTTP else listening.https_port
    deadline = time.monotonic() + run.args.start_timeout
    last = ""
    while time.monotonic() < deadline:
        if listening.proc.popen.poll() is not None:
            raise BenchFailed(f"{listening.name} exited:\n{listening.proc.tail()}")
        try:
            got = load.h2load(kind, port, run.children.workdir, run.load_cpus, 1, 1, "-n", "20")
            if got.ok == 20:
                return
            last = f"{got.ok} of 20 answered 2xx"
        except BenchFailed as e:
            last = str(e)
        time.sleep(0.5)
    raise BenchFailed(f"{listening.name} did not serve {kind} within {run.args.start_timeout:.0f} s ({last}):\n{listening.proc.tail()}")


def start_second(run: Run, name: str, backends: site.Backends) -> site.Listening:
    if name == "baseline":
        return site.twingress(run.children, "baseline", site.Checkout(run.args.baseline.resolve()), backends, run.proxy_cpus, run.args.workers)
    if name == "twingress":
        return site.twingress(run.children, "twingress-2", site.Checkout(site.REPO), backends, run.proxy_cpus, run.args.workers)
    if name == "workers1":
        return site.twingress(run.children, "workers1", site.Checkout(site.REPO), backends, run.proxy_cpus, 1)
    if name == "nginx":
        return site.nginx(run.children, "nginx", backends, run.proxy_cpus, run.args.workers)
    return peers.start(run.children, name, backends, run.proxy_cpus, run.args.workers)


def run(run: Run) -> list[dict[str, Any]]:
    args = run.args
    seconds = ["baseline"] if args.baseline is not None else list(args.against)
    if args.baseline is not None:
        baseline = site.Checkout(args.baseline.resolve())
        baseline.check()
        run.config["baseline"] = baseline.describe()
    run.config["this_tree"] = site.Checkout(site.REPO).describe()
    backends = site.start_backends(run.children, run.load_cpus)
    ours = site.twingress(run.children, "twingress", site.Checkout(site.REPO), backends, run.proxy_cpus, args.workers)
    figures = []
    for name in seconds:
        other = start_second(run, name, backends)
        for kind in args.kinds:
            try:
                for side in (ours, other):
                    served(run, side, kind)
                first, second = contender(run, ours, kind), contender(run, other, kind)
                for side in (first, second):  # warm: caches, pools, the first slice's outliers
                    side.load(args.seconds)
                ratios = run_pairs(first, second, args.pairs, args.seconds, run.say)
            except BenchFailed as e:
                run.failures.append(f"{kind} twingress / {name}: {e}")
                run.say(f"FAILED {kind} twingress / {name}: {str(e).splitlines()[0]}")
                continue
            figures.append(figure(kind, first, second, ratios, args.confidence))
            run.say(describe(figures[-1]))
        from bench.lib.procs import stop
        stop(other.proc)
    return figures


def lines(document: dict[str, Any]) -> list[str]:
    return [describe(f) for f in document["figures"]]
