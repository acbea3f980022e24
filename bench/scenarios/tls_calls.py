"""
TLS-calls: what the four OpenSSL calls of an HTTPS keep-alive request cost (BIO_write of the
request's record, SSL_read, SSL_write of the response, BIO_read of its record), by the way they
are called, on a server-side TLS 1.3 session on memory BIOs with twingress's own context
(bench/lib/tlscalls.py): pyOpenSSL's methods (Twisted's TLS transport), cryptography's binding
into buffers allocated once (L{ingress.speedups.tlsdirect}), and the stdlib's ssl for reference.
The client's records are made before the clock runs.  The bench pins itself to the proxy CPUs.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.lib import tlscalls
from bench.scenarios import Run
from bench.scenarios.floor_h2 import pin

NAME = "tls-calls"
QUESTION = "What do the four OpenSSL calls of an HTTPS keep-alive request cost, by the way they are called?"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=50_000, help="requests per round (50000)")
    p.add_argument("--rounds", type=int, default=3, help="every way timed this many times, in turn; the best is the figure (3)")


def check(args: argparse.Namespace) -> str:
    if args.against or args.workers != 1:
        return "--against and --workers: tls-calls runs in this process, beside no one"
    return "--requests and --rounds at least 1" if min(args.requests, args.rounds) < 1 else ""


def run(run: Run) -> list[dict[str, Any]]:
    pin(run)
    run.config["openssl"] = tlscalls.versions()
    rows = [{"way": way, "rounds_us": figures, "best_us": min(figures)} for way, figures in tlscalls.measure(run.args.requests, run.args.rounds).items()]
    for row in rows:
        run.say(line(row))
    return rows


def line(row: dict[str, Any]) -> str:
    return (f"{row['way']:<10} {row['best_us']:.2f} us per request for BIO_write + SSL_read + SSL_write + BIO_read "
            f"(rounds {', '.join(f'{f:.2f}' for f in row['rounds_us'])})")


def lines(document: dict[str, Any]) -> list[str]:
    return [f"{document['config'].get('openssl', '')}", *(line(row) for row in document["figures"])]
