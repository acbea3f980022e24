"""
Two contenders' CPU per request, timed in turn in short slices, and their ratio with a confidence
interval: twingress against a peer (issue 32's target 4), or ``--workers 2`` against ``--workers 1``
(its target 5).

Why: the timed rows of ``live_instructions.py`` and ``workers_cost.py`` start each proxy afresh per
round and run the rounds a minute apart, and this guest's speed drifts by a fifth from one minute to
the next: six rounds gave twingress over Traefik (h2) medians of 0.81 to 1.09 in different sessions,
with one tree.  Here both contenders start once and stay up, pinned to the same CPU(s); the load
goes to one of them for ``--seconds``, then to the other, and the pair's ratio is taken from two
slices a few seconds apart, so most of the drift falls on both alike.  Each pair alternates its
order (AB, then BA), so a drift within a pair does not always favour the same side.  Many pairs give
the ratio's median a confidence interval without assuming how the ratios are distributed (the
binomial order statistics of the median), and a sign test says how often the first contender was
below the second.

Each slice is one h2load run to one contender (``-D --seconds``, fresh connections: their TLS
handshakes are in the slice, as in the timed rows of the other benches); its CPU is user + system
of every process of it (a primary and its workers too), from /proc before and after, over the
requests answered 2xx.  The contender not under load sleeps in its event loop on the same CPU.

  .venv/bin/python bench/interleaved.py --contenders twingress,traefik --kind h2 --pairs 40   # ~6 min
  .venv/bin/python bench/interleaved.py --contenders twingress,traefik --kind https/1.1
  .venv/bin/python bench/interleaved.py --contenders workers --workers 2                  # HTTP/1.1 keep-alive, as target 5
  .venv/bin/python bench/interleaved.py --contenders twingress,twingress                 # the method's own check: 1 within the interval
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import comb
from pathlib import Path
from typing import Optional, Union

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpuload  # noqa: E402
import h2_bench  # noqa: E402
import live_instructions  # noqa: E402
import peers_bench  # noqa: E402
import procs  # noqa: E402
import workers_cost  # noqa: E402
from harness import run_in_workdir  # noqa: E402
from report import environment, interpreter, write_and_exit_status  # noqa: E402

WORKERS = "workers"


class BenchFailed(RuntimeError):
    """A slice could not be measured; the message says why."""


@dataclass
class Contender:
    """One side of the comparison: its processes, and how to load it for a number of seconds."""

    name: str
    pids: Callable[[], list[int]]  # every process whose CPU counts (read at each slice: a worker may be replaced)
    load: Callable[[int], tuple[int, int]]  # seconds -> (requests answered 2xx, the others)
    slices: list[float] = field(default_factory=list)  # CPU µs per request (user + system), slice by slice
    system: list[float] = field(default_factory=list)  # of which system (the kernel's work for it), slice by slice


def slice_cpu(contender: Contender, seconds: int) -> tuple[float, float]:
    """One slice: the load to C{contender} alone, its user and system CPU (µs) per request answered."""
    pids = contender.pids()
    before = [cpuload.user_system_seconds(pid) for pid in pids]
    done, failed = contender.load(seconds)
    after = [cpuload.user_system_seconds(pid) for pid in pids]
    if failed or not done:
        raise BenchFailed(f"{contender.name}: {failed} failed, {done} answered")
    user = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    system = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    return 1e6 * user / done, 1e6 * system / done


def run_pairs(first: Contender, second: Contender, pairs: int, seconds: int) -> list[float]:
    """C{pairs} pairs of slices, the order reversed every other pair: first's CPU over second's, pair by pair."""
    ratios = []
    for number in range(pairs):
        order = (first, second) if number % 2 == 0 else (second, first)
        for contender in order:
            user, system = slice_cpu(contender, seconds)
            contender.slices.append(user + system)
            contender.system.append(system)
        ratios.append(first.slices[-1] / second.slices[-1])
        print(f"==> pair {number + 1}: {first.name} {first.slices[-1]:.1f} us, {second.name} {second.slices[-1]:.1f} us, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    return ratios


def median_interval(values: Sequence[float], confidence: float = 0.95) -> Optional[tuple[float, float]]:
    """
    A distribution-free confidence interval of the median: the k-th smallest and k-th largest value,
    k the largest with P(X < k) <= (1 - confidence) / 2 for X ~ Binomial(n, 1/2) (the chance that fewer
    than k values fall below the true median).  None when there are too few values for C{confidence}.
    """
    n, tail = len(values), (1 - confidence) / 2
    cumulative, k = 0.0, 0
    while k < n and cumulative + comb(n, k) / 2**n <= tail:
        cumulative += comb(n, k) / 2**n
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def sign_test(ratios: Sequence[float]) -> tuple[int, int, float]:
    """(pairs below 1, pairs not equal to 1, the two-sided p of as lopsided a split were each side equally likely)."""
    below = sum(1 for r in ratios if r < 1)
    n = sum(1 for r in ratios if r != 1)
    tail = sum(comb(n, j) for j in range(min(below, n - below) + 1)) / 2**n if n else 1.0
    return below, n, min(1.0, 2 * tail)


def summary(first: Contender, second: Contender, ratios: Sequence[float], confidence: float) -> list[str]:
    lines = [f"{c.name}: CPU us per request, median {statistics.median(c.slices):.1f} of {len(c.slices)} slices "
             f"({min(c.slices):.1f} to {max(c.slices):.1f}); system us, median {statistics.median(c.system):.1f}" for c in (first, second)]
    interval = median_interval(ratios, confidence)
    below, n, p = sign_test(ratios)
    within = f"{confidence:.0%} interval {interval[0]:.3f} to {interval[1]:.3f}" if interval else f"too few pairs for a {confidence:.0%} interval"
    lines.append(f"{first.name} / {second.name}, pair by pair: median {statistics.median(ratios):.3f} ({within}); "
                 f"below 1 in {below} of {n} pairs (sign test p = {p:.2g})")
    return lines


Bench = Union[live_instructions.Bench, workers_cost.Bench]


def peer_contenders(bench: live_instructions.Bench, names: Sequence[str]) -> list[Contender]:
    """twingress and the peers as live_instructions.py times them (access log off, the same backend)."""
    args = bench.args
    bench.start_backend()
    contenders = []
    for number, name in enumerate(names, 1):
        port = procs.free_port()
        argv, env = bench.argv(name, port)
        proc = bench.spawn(f"{name}-{number}-interleaved", argv, port, args.proxy_cpu, env=env)
        bench.served(args.kind, proc, port)

        def load(seconds: int, port: int = port) -> tuple[int, int]:
            return bench.h2load(args.kind, port, "-D", str(seconds), "-c", str(args.connections))

        label = f"{name} (a second process)" if number == 2 and name == names[0] else name  # twingress,twingress: the method's own check
        contenders.append(Contender(label, lambda proc=proc: [proc.pid], load))
    return contenders


def worker_contenders(bench: workers_cost.Bench) -> list[Contender]:
    """twingress with C{--workers 1} and with C{--workers N}, as workers_cost.py times them (HTTP/1.1 keep-alive)."""
    args = bench.args
    bench.start_backend()
    contenders = []
    for workers in (1, args.workers):
        row = workers_cost.Row(workers_cost.TWINGRESS, workers, 1)
        proc, port = bench.start(row, f"twingress-w{workers}-interleaved")

        def load(seconds: int, row: workers_cost.Row = row, port: int = port) -> tuple[int, int]:
            return bench.load(row, [port], "-D", str(seconds))

        contenders.append(Contender(f"--workers {workers}", lambda proc=proc: workers_cost.group_pids(proc.pid), load))
    return contenders[::-1]  # N workers first: the ratio is N over 1


def run(bench: Bench) -> tuple[list[Contender], list[float]]:
    args = bench.args
    if isinstance(bench, workers_cost.Bench):
        contenders = worker_contenders(bench)
    else:
        contenders = peer_contenders(bench, args.proxies)
    for contender in contenders:  # warm: caches, pools, the first slice's outliers
        contender.load(args.seconds)
    first, second = contenders
    return contenders, run_pairs(first, second, args.pairs, args.seconds)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contenders", default="twingress,traefik",
                   help=f"twingress,<{'|'.join(live_instructions.PROXIES)}> (the ratio is twingress's over it; twingress,twingress: "
                        f"two processes of one build, the method's own check, whose interval should hold 1), "
                        f"or {WORKERS}: twingress --workers N over --workers 1 (twingress,traefik)")
    p.add_argument("--kind", default=live_instructions.H2, choices=live_instructions.KINDS, help="with a peer: h2 or https/1.1 over TLS (h2)")
    p.add_argument("--pairs", type=int, default=40, help="pairs of slices (40)")
    p.add_argument("--seconds", type=int, default=3, help="a slice's load (3)")
    p.add_argument("--connections", type=int, default=0, help="h2load -c (0: 32 with a peer, as the timed rows; 64 with workers, target 5's)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m over h2 (10)")
    p.add_argument("--confidence", type=float, default=0.95, help="of the median's interval (0.95)")
    p.add_argument("--workers", type=int, default=2, help=f"with {WORKERS}: the layout compared with --workers 1 (2)")
    p.add_argument("--proxy-cpu-list", default="0", help=f"with {WORKERS}: taskset's CPUs for twingress and its workers (0)")
    p.add_argument("--access-log", default="off", help=f"with {WORKERS}: twingress's --access-log (off, as target 5 was measured)")
    p.add_argument("--traefik", type=Path, help="Traefik binary (default: where bench/peers.sh builds it)")
    p.add_argument("--caddy", type=Path, help="Caddy binary (default: where bench/peers.sh builds it)")
    h2_bench.add_run_arguments(p)
    p.set_defaults(start_timeout=60.0)
    args = p.parse_args(argv)
    args.mode = WORKERS if args.contenders == WORKERS else "peer"
    args.proxies = [] if args.mode == WORKERS else args.contenders.split(",")
    if args.mode != WORKERS and (len(args.proxies) != 2 or args.proxies[0] != "twingress" or args.proxies[1] not in live_instructions.PROXIES):
        p.error(f"--contenders: twingress,<{'|'.join(live_instructions.PROXIES)}> or {WORKERS}")
    if args.proxies[1:] == [live_instructions.FLOOR] and args.kind != live_instructions.H2:
        p.error("the floor speaks h2 only")
    if args.pairs < 1 or args.seconds < 1 or args.workers < 2:
        p.error("--pairs and --seconds at least 1, --workers at least 2")
    args.connections = args.connections or (64 if args.mode == WORKERS else 32)
    args.per_worker = False  # workers_cost.Bench: --connections in all, not a worker
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    missing = [tool for tool in (args.nginx, "h2load", "taskset") if not shutil.which(tool)]
    if missing:
        print(f"FAILED missing {', '.join(missing)}: run bench/setup.sh", file=sys.stderr)
        return 1
    cpus = [args.load_cpu, *(int(c) for c in args.proxy_cpu_list.split(",") if c.isdigit())] if args.mode == WORKERS else [args.load_cpu, args.proxy_cpu]
    busy = cpuload.background_busy(cpus)
    if max(busy.values()) >= 10:
        print(f"note: the machine is busy before the run ({busy}); the pairs share whatever else runs", flush=True)
    print(f"twingress runs on {interpreter()}", flush=True)
    make = workers_cost.Bench if args.mode == WORKERS else live_instructions.Bench
    failures = (BenchFailed, live_instructions.BenchFailed, workers_cost.BenchFailed, peers_bench.BenchFailed,
                live_instructions.tls_bench.BenchFailed, procs.StartError)
    result, _, status = run_in_workdir(args, "twpairs-", make, run, failures)
    if result is None:
        return status
    contenders, ratios = result
    lines = summary(contenders[0], contenders[1], ratios, args.confidence)
    print("\n" + "\n".join(lines))
    out = {"benchmark": "interleaved", "environment": environment(args.nginx), "config": {k: getattr(args, k) for k in (
        "contenders", "kind", "pairs", "seconds", "connections", "streams", "workers", "proxy_cpu", "proxy_cpu_list", "load_cpu", "access_log")},
        "results": {"slices": {c.name: c.slices for c in contenders}, "system": {c.name: c.system for c in contenders},
                    "ratios": ratios, "summary": lines}}
    return write_and_exit_status(args.json, out, [])


if __name__ == "__main__":
    sys.exit(main())
