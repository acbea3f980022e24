"""
Mix: a realistic load - browser-like clients over h2 and one-request HTTP/1.1 clients, every
connection a new TLS 1.3 handshake, every other one resuming a session - and the CPU per request
and per connection of twingress and each of C{--against} (nginx, with session resumption on here;
Traefik, Caddy), in turn on the proxy CPUs.  The load is bench/mixload (Go): C{--clients} workers
opening connection after connection in a fixed pattern (C{--h2} browsers: 1 GET then 9 at once;
C{--h1} clients: one GET with Connection: close), so that every proxy gets the same mix.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from typing import Any

from bench.lib import cpu, peers, procs, site
from bench.lib.load import HOST, SNI
from bench.scenarios import Run
from bench.scenarios.tls import BODY, der, served

NAME = "mix"
QUESTION = "What does a realistic mix (browsers over h2, one-request HTTP/1.1 clients, TLS 1.3 handshakes, half resumed) cost per request, beside the peers?"
AGAINST = ("nginx", *peers.PEERS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=int, default=10, help="measured seconds per proxy (10)")
    p.add_argument("--warmup", type=int, default=3, help="seconds of load before each measured one (3)")
    p.add_argument("--clients", type=int, default=32, help="mixload -c: concurrent clients (32)")
    p.add_argument("--h2", type=int, default=1, help="browser (h2, 10 requests) connections in every --h2 + --h1 (1)")
    p.add_argument("--h1", type=int, default=1, help="HTTP/1.1 (1 request) connections in every --h2 + --h1 (1)")
    p.add_argument("--groups", default="X25519", help="key exchange groups the clients offer (X25519; 'default': Go's, with ML-KEM hybrids)")


def check(args: argparse.Namespace) -> str:
    unknown = [a for a in args.against if a not in AGAINST]
    if unknown:
        return f"unknown {', '.join(unknown)}: --against from {', '.join(AGAINST)}"
    if args.seconds < 1 or args.warmup < 0 or args.clients < 1 or args.h2 < 0 or args.h1 < 0 or args.h2 + args.h1 < 1:
        return "--seconds and --clients at least 1, --warmup at least 0, --h2 + --h1 at least 1"
    return ""


def mixload(run: Run, port: int, seconds: int, backends: site.Backends) -> dict[str, Any]:
    """One bench/mixload run on the load CPUs: its JSON, or L{BenchFailed} with its error samples."""
    a = run.args
    argv = procs.pinned(run.load_cpus, [str(site.go_tool("mixload")), "-addr", f"127.0.0.1:{port}", "-sni", HOST, "-host", HOST,
                                        "-ca", str(backends.cert), "-c", str(a.clients), "-duration", f"{seconds}s", "-h2", str(a.h2),
                                        "-h1", str(a.h1), "-groups", a.groups, "-body", BODY.decode()])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
        out: dict[str, Any] = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        raise procs.BenchFailed(f"mixload: {e}") from e
    if done.returncode != 0:
        raise procs.BenchFailed(f"mixload exited {done.returncode}: {done.stderr.strip()[-400:]}; samples {out.get('error_samples')}")
    if not out["handshakes"]["resumed"]:
        raise procs.BenchFailed("mixload: no connection was resumed")
    return out


def start(run: Run, name: str, backends: site.Backends) -> site.Listening:
    if name == "twingress":
        return site.twingress(run.children, name, site.Checkout(site.REPO), backends, run.proxy_cpus, run.args.workers)
    if name == "nginx":
        return site.nginx(run.children, name, backends, run.proxy_cpus, run.args.workers, resumption=True)
    return peers.start(run.children, name, backends, run.proxy_cpus, run.args.workers)


def row(run: Run, name: str, backends: site.Backends, sha: str) -> dict[str, Any]:
    """C{name} started, checked (the certificate and body), warmed, measured, stopped."""
    listening = start(run, name, backends)
    try:
        served(run, listening.proc, listening.https_port, {SNI: sha}, HOST)
        if run.args.warmup:
            mixload(run, listening.https_port, run.args.warmup, backends)
        before = cpu.group_user_system(listening.proc.pid)
        out = mixload(run, listening.https_port, run.args.seconds, backends)
        used = sum(cpu.group_user_system(listening.proc.pid)) - sum(before)
        if listening.proc.popen.poll() is not None:
            raise procs.BenchFailed(f"{name} exited during the run:\n{listening.proc.tail()}")
    finally:
        procs.stop(listening.proc)
    seconds = out["seconds"] or 1
    return {"target": name, "rps": round(out["requests"] / seconds), "cps": round(out["connections"] / seconds),
            "resumed_share": out["resumed_share"], "errors": out["errors"],
            "cpu_us_per_request": round(1e6 * used / max(out["requests"], 1), 1),
            "cpu_us_per_connection": round(1e6 * used / max(out["connections"], 1), 1), "mixload": out}


def run(run: Run) -> list[dict[str, Any]]:
    backends = site.start_backends(run.children, run.load_cpus)
    sha = hashlib.sha256(der(backends)).hexdigest()
    rows = []
    for name in ("twingress", *run.args.against):
        try:
            rows.append(row(run, name, backends, sha))
        except procs.BenchFailed as e:
            run.failed(f"{name}", e)
            continue
        run.say(line(rows[-1]))
    reference = next((r for r in rows if r["target"] == "nginx"), None)
    for r in rows:
        if reference and reference["cpu_us_per_request"]:
            r["ratio_to_nginx"] = round(r["cpu_us_per_request"] / reference["cpu_us_per_request"], 3)
    return rows


def line(row: dict[str, Any]) -> str:
    ratio = f" ({row['ratio_to_nginx']:.2f}x nginx's)" if "ratio_to_nginx" in row else ""
    return (f"{row['target']:<10} {row['rps']:>7,} req/s, {row['cps']:>6,} connections/s, {row['resumed_share']:.0%} resumed: "
            f"{row['cpu_us_per_request']:.1f} us CPU per request{ratio}, {row['cpu_us_per_connection']:.0f} per connection")


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
