"""
H2-path: twingress's HTTP/2 request path in one process (bench/lib/h2path.py) - the real
H2ServerProtocol on the data plane's factory, pool and settings, the client's bytes made before
the clock runs, idle upstream connections on memory transports answering as the bench backend
does - timed with the process's CPU clock, best of C{--rounds}: steady enough to compare two trees
a few µs apart.  C{--http1}: the HTTP/1.1 path (wrk's keep-alive GET, one a read).
C{--instructions}: instructions per request under valgrind instead of time.  C{--profile N}: one
cProfile'd round, its top N functions.  The bench pins itself to the proxy CPUs.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.lib import h2path
from bench.scenarios import Run
from bench.scenarios.floor_h2 import pin

NAME = "h2-path"
QUESTION = "What does twingress's HTTP/2 request path alone cost per request (no socket, TLS or reactor), steady enough to compare two trees?"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=100_000, help="requests per round (100000)")
    p.add_argument("--streams", type=int, default=10, help="requests per read, as h2load -m (10)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds; the best is the figure (3)")
    p.add_argument("--http1", action="store_true", help="the HTTP/1.1 path instead: wrk's keep-alive GET, one a read")
    p.add_argument("--instructions", action="store_true", help="instructions per request instead of time (two runs under valgrind)")
    p.add_argument("--profile", type=int, metavar="N", help="one cProfile'd round instead, its top N functions by own time")
    p.add_argument("--distinct-heads", action="store_true", help="every backend response's head new (its own ETag)")
    p.add_argument("--distinct-requests", action="store_true", help="every h2 request's fields new (a traceparent of its own)")


def check(args: argparse.Namespace) -> str:
    if args.against or args.workers != 1:
        return "--against and --workers: h2-path runs in this process, beside no one"
    if args.http1:
        args.streams = 1
    if args.http1 and args.distinct_requests:
        return "--distinct-requests is for the h2 path (the HTTP/1.1 parse keeps nothing by the request's fields)"
    if args.requests < args.streams or args.streams < 1 or args.rounds < 1:
        return "--requests at least --streams, --streams and --rounds at least 1"
    return ""


def run(run: Run) -> list[dict[str, Any]]:
    a = run.args
    pin(run)
    row: dict[str, Any] = {"build": h2path.build_name(), "kind": h2path.kind_name(a.http1, a.distinct_heads, a.distinct_requests),
                           "streams": a.streams}
    if a.instructions:
        row |= h2path.count_instructions(a.requests, a.streams, a.http1, a.distinct_heads, a.distinct_requests)
    elif a.profile:
        row |= h2path.profiled(a.requests, a.streams, a.http1, a.profile)
    else:
        row |= h2path.timed(a.requests, a.streams, a.http1, a.distinct_heads, a.distinct_requests, a.rounds)
    run.say(line(row))
    return [row]


def line(row: dict[str, Any]) -> str:
    said = f"{row['build']}, {row['kind']}"
    if "instructions" in row:
        return (f"{said}: {row['instructions']:,} instructions per request (valgrind: {row['valgrind_totals'][0]:,} serving "
                f"{row['served'][0]}, {row['valgrind_totals'][1]:,} serving {row['served'][1]}; {row['streams']} a read)")
    if "profile" in row:
        return "\n".join([f"{said}: {row['profiled_us']:.1f} us per request under cProfile", *row["profile"]])
    return (f"{said}: {row['best_us']:.2f} us per request (best of {len(row['rounds_us'])}: "
            f"{', '.join(f'{f:.2f}' for f in row['rounds_us'])}; {row['requests']} requests, {row['streams']} a read)")


def lines(document: dict[str, Any]) -> list[str]:
    return [text for row in document["figures"] for text in line(row).splitlines()]
