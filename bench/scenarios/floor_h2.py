"""
Floor-h2: the floor of any HTTP/2 server built on the C{h2} library - the server side's own CPU per
request (C{receive_data}, C{send_headers}, C{send_data}, C{data_to_send}), configured as
twingress's, serving C{--streams} GETs in flight on one connection with no socket, TLS, routing or
upstream (bench/lib/h2floor.py).  The bench pins itself to the proxy CPUs; the best of C{--rounds}.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from bench.lib import cpu, h2floor
from bench.scenarios import Run

NAME = "floor-h2"
QUESTION = "What is the floor of any HTTP/2 server on the h2 library: its own CPU per request?"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=200_000, help="requests per round (200000)")
    p.add_argument("--streams", type=int, default=10, help="requests in flight on the connection, as h2load -m (10)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after a warm-up one; the best is the figure (3)")


def check(args: argparse.Namespace) -> str:
    if args.against or args.workers != 1:
        return "--against and --workers: floor-h2 runs in this process, beside no one"
    return "--requests, --streams and --rounds at least 1" if min(args.requests, args.streams, args.rounds) < 1 else ""


def pin(run: Run) -> None:
    """This process on the proxy CPUs: an in-process bench measures what runs where a proxy would."""
    if run.proxy_cpus:
        os.sched_setaffinity(0, cpu.cpu_list(run.proxy_cpus))


def run(run: Run) -> list[dict[str, Any]]:
    import h2
    args = run.args
    pin(run)
    h2floor.measure(min(args.requests, 20_000), args.streams)  # warm-up
    rounds = [round(h2floor.measure(args.requests, args.streams)["server_cpu_us_per_request"], 3) for _ in range(args.rounds)]
    row = {"h2": h2.__version__, "python": sys.version.split()[0], "streams": args.streams, "requests_per_round": args.requests,
           "rounds_us": rounds, "best_us": min(rounds)}
    run.say(line(row))
    return [row]


def line(row: dict[str, Any]) -> str:
    return (f"h2 {row['h2']}: {row['best_us']:.1f} us of CPU per request in the h2 library alone "
            f"(rounds: {', '.join(f'{r:.1f}' for r in row['rounds_us'])}; {row['streams']} streams in flight)")


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
