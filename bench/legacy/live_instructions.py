"""
Instructions per request of a whole live proxy process: TLS, the event loop, the sockets and
every thread, counted by valgrind (callgrind) over a window of h2load requests, h2 or HTTPS/1.1
(``--kinds``), for twingress, the floor of an h2 proxy on its libraries (h2_proxy_floor.py: h2
only) and the Go peers (Traefik, Caddy).

Why: the timed rows of issue 32's target 4 move by a third between runs of one tree on this
machine, and ``h2_path.py --instructions`` counts twingress's request path alone, without TLS, the
reactor or the sockets.  This bench counts the same thing for every proxy, the same way, from
outside: each runs under ``valgrind --tool=callgrind --instr-atstart=no``, serves a warm-up, and is
counted (``callgrind_control -i on`` ... ``-i off``) while h2load sends ``--requests`` requests over
``--connections`` TLS connections, ``--streams`` at a time (HTTPS/1.1: h2load ``--h1``, one at a time,
keep-alive).  Only requests answered 2xx count as served.  The count is what each process ran in
user space for those requests; the kernel's work (its syscalls) is not in it, and instructions are
not time (IPC differs between CPython's interpreter loop and Go's compiled code).  So ``--cpu
SECONDS`` also runs each proxy without valgrind under a timed h2load (pinned as peers_bench.py
pins them) and reports its user and system CPU per request beside the count.

The backend is the benches' nginx; every proxy is configured as in peers_bench.py (twingress
with its access log off, as the peers have none), the floor as library_share.py runs it.

With ``--rounds N --no-count`` only the timed runs: N rounds of them, the proxies' order reversed every
other round (as peers_bench.py does), each proxy's median, and twingress's CPU over each other
proxy's round by round (the rows of one round ran within a minute of each other, so their ratio
keeps less of this guest's drift than a ratio of medians does); this puts the floor beside the
peers in CPU time, where peers_bench.py has no floor row.

With ``--cache-sim`` the count also simulates the L1 caches (callgrind ``--cache-sim=yes``) and
reports the instruction and data misses per request: what makes a count of instructions and a
time differ between two proxies (a larger body of code misses the instruction cache more).

  .venv/bin/python -m bench instructions [--proxies twingress,floor,traefik,caddy]
      [--kinds h2,https/1.1] [--requests 5000] [--cpu 8]      # ~1.5 min a proxy under valgrind; +~15 s a proxy with --cpu
  .venv/bin/python -m bench instructions --no-count --cpu 8 --rounds 4   # the timed runs alone, medians
  .venv/bin/python -m bench instructions --proxies twingress,floor --cache-sim   # with L1 misses per request
  .venv/bin/python -m bench instructions --proxies twingress,floor --keep-profiles DIR   # and each count's callgrind file
      callgrind_annotate --inclusive=yes DIR/h2-twingress-1.callgrind   # where the instructions went, by function
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cryptography.hazmat.primitives.asymmetric import ec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import h2_bench  # noqa: E402
import peers_bench  # noqa: E402
import procs  # noqa: E402
import targets  # noqa: E402
import tls_bench  # noqa: E402
from cpuload import user_system_seconds  # noqa: E402
from harness import Harness, run_in_workdir, twingress_env  # noqa: E402
from report import write_and_exit_status  # noqa: E402

FLOOR = "floor"
PROXIES = ("twingress", FLOOR, peers_bench.TRAEFIK, peers_bench.CADDY)
_SUCCEEDED_RE = re.compile(r"requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed")
_STATUSES_RE = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")
H2, HTTPS = "h2", "https/1.1"
KINDS = (H2, HTTPS)
_COLLECTED_RE = re.compile(r"Collected : (\d+)((?: \d+)*)")
# callgrind's events with --cache-sim=yes, in the order its "Collected" line gives them
_CACHE_EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


class BenchFailed(RuntimeError):
    """A proxy could not be measured; the message says why."""


@dataclass
class Row:
    proxy: str
    kind: str = H2  # h2 over TLS, or HTTP/1.1 over TLS (keep-alive, one request at a time per connection)
    requests: int = 0
    instructions: Optional[int] = None  # per request, user space, every thread of the process
    tries: int = 0  # the valgrind runs it took (L{Bench.count_with_tries})
    cache_misses: Optional[dict[str, int]] = None  # per request, with --cache-sim: callgrind's simulated L1 misses (I1mr, D1mr, D1mw)
    cpu_requests: int = 0
    user_us: Optional[float] = None  # per request, without valgrind (--cpu)
    system_us: Optional[float] = None
    round: int = 1  # which of --rounds (L{paired_ratios} compares proxies within a round)
    failure: str = ""


def served_and_failed(h2load_stdout: str) -> Optional[tuple[int, int]]:
    """h2load's report as (requests answered 2xx, all the others), or None if it has no counts: a 404 is not a served request."""
    counts, statuses = _SUCCEEDED_RE.search(h2load_stdout), _STATUSES_RE.search(h2load_stdout)
    if counts is None or statuses is None:
        return None
    not_2xx = sum(int(statuses.group(n)) for n in (2, 3, 4))
    return int(counts.group(2)) - not_2xx, int(counts.group(3)) + not_2xx


class Bench(Harness):
    """The backend, the certificate, and each proxy started its way."""

    def __init__(self, args: argparse.Namespace, stack: ExitStack, workdir: Path) -> None:
        super().__init__(args, stack, workdir)
        self.cert = tls_bench.make_cert(ec.generate_private_key(ec.SECP256R1()), [targets.HOST, tls_bench.WRK_SNI])
        (workdir / "bench.crt").write_bytes(self.cert.cert_pem)
        (workdir / "bench.key").write_bytes(self.cert.key_pem)
        self.peers = peers_bench.peer_paths(args)  # the Go peers among --proxies (none: nothing built or asked)
        self.backend_port = procs.free_port()

    def start_backend(self) -> None:
        """The benches' nginx backend on the load CPU, which every proxy forwards to (python -m bench pairs has its own, bench/lib/site.py)."""
        self.nginx("backend", targets.backend_conf(self.workdir, self.backend_port), self.backend_port, self.args.load_cpu)

    def run_all(self) -> list[Row]:
        self.start_backend()
        rows = []
        for round_index in range(self.args.rounds):
            proxies = self.args.proxies if round_index % 2 == 0 else self.args.proxies[::-1]
            if self.args.rounds > 1:
                print(f"==> round {round_index + 1} of {self.args.rounds}: {', '.join(proxies)}", flush=True)
            rows += self.run_round(proxies, round_index + 1)
        return rows

    def run_round(self, proxies: list[str], round_number: int) -> list[Row]:
        rows = []
        for kind, proxy in ((kind, proxy) for kind in self.args.kinds for proxy in proxies):
            if kind == HTTPS and proxy == FLOOR:
                continue  # h2_proxy_floor.py speaks h2 only
            row = Row(proxy, kind, round=round_number)
            try:
                if self.args.count:
                    self.count_with_tries(row)
                if self.args.cpu:
                    self.time(row)
            except (BenchFailed, procs.StartError, tls_bench.BenchFailed, OSError, subprocess.TimeoutExpired) as e:
                row.failure = str(e)
            print(f"==> {describe(row)}", flush=True)
            rows.append(row)
        return rows

    def argv(self, proxy: str, port: int) -> tuple[list[str], dict[str, str]]:
        """How C{proxy} is run to serve TLS (h2 and HTTP/1.1 by ALPN) on C{port}, and its environment."""
        if proxy == "twingress":
            manifests = self.workdir / "manifests"
            tls_bench.write_manifests(manifests, self.backend_port, [
                tls_bench.secret(tls_bench.SECRET, self.cert),
                tls_bench.tls_ingress("bench-tls", [targets.HOST, tls_bench.WRK_SNI], tls_bench.SECRET)], False)
            command = tls_bench.TWINGRESS_TLS_CMD.replace("--admin tcp:{admin_port}:interface=127.0.0.1", "--admin ''")
            argv = targets.twingress_argv(command, Path(sys.prefix) / "bin", manifests, port, 0)
            return argv + ["--access-log", "off"], twingress_env()
        if proxy == FLOOR:
            floor = Path(__file__).resolve().parent / "h2_proxy_floor.py"
            return [sys.executable, str(floor), str(port), str(self.backend_port),
                    str(self.workdir / "bench.crt"), str(self.workdir / "bench.key")], twingress_env()
        make = peers_bench.traefik_argv if proxy == peers_bench.TRAEFIK else peers_bench.caddy_argv
        return make(self.peers[proxy], self.workdir, port, self.backend_port, True), peers_bench.go_env(self.workdir)

    def h2load(self, kind: str, port: int, *load: str) -> tuple[int, int]:
        """h2load on the load CPU to C{port}, over h2 or (C{--h1}) HTTPS/1.1: (requests answered 2xx, failed)."""
        protocol = ["-m", str(self.args.streams)] if kind == H2 else ["--h1", "-m", "1"]
        argv = ["taskset", "-c", str(self.args.load_cpu), "h2load", "-H", f":authority: {targets.HOST}",
                *protocol, *load, f"https://{tls_bench.WRK_SNI}:{port}/"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        served = served_and_failed(done.stdout)
        if done.returncode != 0 or served is None:
            raise BenchFailed(f"h2load failed ({done.returncode}): {done.stdout[-400:]}{done.stderr[-400:]}")
        return served

    def served(self, kind: str, proc: procs.Proc, port: int) -> None:
        """Until twenty requests are answered 2xx: the table is live, the backend reached."""
        deadline = time.monotonic() + self.args.start_timeout
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise BenchFailed(f"{proc.name} exited:\n{proc.tail()}")
            try:
                if self.h2load(kind, port, "-n", "20", "-c", "1") == (20, 0):
                    return
            except BenchFailed:
                pass
            time.sleep(1)
        raise BenchFailed(f"{proc.name} did not serve {kind} within {self.args.start_timeout:.0f} s:\n{proc.tail()}")

    def count_with_tries(self, row: Row) -> None:
        """L{count}, again after a failure up to C{--tries} times: valgrind has stopped a Go binary mid-run
        (an assertion of its own), and a later run of it counted."""
        for attempt in range(1, self.args.tries + 1):
            try:
                self.count(row)
                row.tries = attempt
                return
            except BenchFailed as e:
                if attempt == self.args.tries:
                    raise
                print(f"==> {row.kind} {row.proxy}: count {attempt} failed, again: {str(e).splitlines()[0]}", flush=True)

    def count(self, row: Row) -> None:
        """The instructions of C{row.proxy} per request, under callgrind."""
        port = procs.free_port()
        argv, env = self.argv(row.proxy, port)
        if row.proxy in peers_bench.PEERS:
            # Go preempts goroutines with signals (SIGURG), which callgrind's signal bookkeeping asserts on
            # (threads.c, vgCallgrind_post_signal) within a run or two; cooperative preemption alone changes
            # nothing for one OS thread running Go code (GOMAXPROCS=1).  The timed run keeps the default.
            env = env | {"GODEBUG": "asyncpreemptoff=1"}
        out = self.workdir / f"{row.proxy}.callgrind"
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        if self.args.cache_sim:
            valgrind.append("--cache-sim=yes")
        proc = self.spawn(f"{row.proxy}-callgrind", valgrind + argv, port, self.args.proxy_cpu, env=env)
        try:
            self.served(row.kind, proc, port)
            self.h2load(row.kind, port, "-n", str(self.args.warmup), "-c", str(self.args.connections))
            subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True, timeout=60)
            done, failed = self.h2load(row.kind, port, "-n", str(self.args.requests), "-c", str(self.args.connections))
            subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True, timeout=60)
        finally:
            procs.stop(proc, grace=120)  # valgrind writes its counts on the way out
        collected = _COLLECTED_RE.search(proc.log.read_text(errors="replace"))
        if failed or not done or collected is None:
            raise BenchFailed(f"{failed} failed, {done} done, counted: {collected is not None}\n{proc.tail()}")
        row.requests, row.instructions = done, round(int(collected.group(1)) / done)
        if self.args.keep_profiles is not None:  # callgrind_annotate reads it: the live process's functions
            self.args.keep_profiles.mkdir(parents=True, exist_ok=True)
            shutil.copy(out, self.args.keep_profiles / f"{row.kind.replace('/', '')}-{row.proxy}-{row.round}.callgrind")
        if self.args.cache_sim:
            counts = [int(collected.group(1)), *map(int, collected.group(2).split())]
            if len(counts) != len(_CACHE_EVENTS):
                raise BenchFailed(f"callgrind collected {len(counts)} events, not the cache simulation's {len(_CACHE_EVENTS)}")
            events = dict(zip(_CACHE_EVENTS, counts, strict=True))
            row.cache_misses = {name: round(events[name] / done) for name in ("I1mr", "D1mr", "D1mw")}

    def time(self, row: Row) -> None:
        """The user and system CPU of C{row.proxy} per request, without valgrind, under a timed load."""
        port = procs.free_port()
        argv, env = self.argv(row.proxy, port)
        proc = self.spawn(f"{row.proxy}-timed", argv, port, self.args.proxy_cpu, env=env)
        try:
            self.served(row.kind, proc, port)
            self.h2load(row.kind, port, "-D", "2", "-c", str(self.args.cpu_connections))
            user, system = user_system_seconds(proc.pid)
            done, failed = self.h2load(row.kind, port, "-D", str(self.args.cpu), "-c", str(self.args.cpu_connections))
            user_after, system_after = user_system_seconds(proc.pid)
        finally:
            procs.stop(proc)
        if failed or not done:
            raise BenchFailed(f"timed load: {failed} failed, {done} done")
        row.cpu_requests = done
        row.user_us, row.system_us = round(1e6 * (user_after - user) / done, 1), round(1e6 * (system_after - system) / done, 1)


def describe(row: Row) -> str:
    if row.failure:
        return f"{row.kind} {row.proxy}: FAILED {row.failure}"
    parts = []
    if row.instructions is not None:
        parts.append(f"{row.instructions:,} instructions per request ({row.requests} counted, run {row.tries})")
    if row.cache_misses:
        parts.append("simulated L1 misses per request " + ", ".join(f"{name} {count:,}" for name, count in row.cache_misses.items()))
    if row.user_us is not None:
        parts.append(f"without valgrind {row.user_us} us user + {row.system_us} us system per request ({row.cpu_requests} requests)")
    return f"{row.kind} {row.proxy}: {'; '.join(parts)}"


def timed_totals(rows: list[Row]) -> dict[tuple[str, str], dict[int, float]]:
    """User + system µs per request of every timed row, by (kind, proxy) and then by round."""
    totals: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        if row.user_us is not None and row.system_us is not None:
            totals.setdefault((row.kind, row.proxy), {})[row.round] = row.user_us + row.system_us
    return totals


def medians(rows: list[Row]) -> list[str]:
    """Each kind's and proxy's timed rounds (user + system µs per request) and their median."""
    return [f"{kind} {proxy}: user + system us per request by round {', '.join(f'{t:.1f}' for t in by_round.values())}; "
            f"median {statistics.median(by_round.values()):.1f}"
            for (kind, proxy), by_round in timed_totals(rows).items()]


def paired_ratios(rows: list[Row]) -> list[str]:
    """
    twingress's CPU per request over each other proxy's, round by round, and their median.

    Why: this guest's speed drifts by a fifth from one minute to the next, and a round runs its
    proxies back to back, so the ratio within a round cancels most of the drift that the ratio of
    two medians (taken over different minutes) keeps.
    """
    totals = timed_totals(rows)
    lines = []
    for (kind, proxy), by_round in totals.items():
        if proxy == "twingress":
            continue
        ours = totals.get((kind, "twingress"), {})
        ratios = [ours[n] / by_round[n] for n in by_round if n in ours and by_round[n] > 0]
        if ratios:
            lines.append(f"{kind} twingress / {proxy}, round by round: {', '.join(f'{r:.2f}' for r in ratios)}; "
                         f"median {statistics.median(ratios):.2f}")
    return lines


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--proxies", type=lambda s: s.split(","), default=["twingress", FLOOR, peers_bench.TRAEFIK],
                   help=f"comma-separated, in this order, of {', '.join(PROXIES)} (twingress,floor,traefik)")
    p.add_argument("--kinds", type=lambda s: s.split(","), default=[H2],
                   help=f"comma-separated, in this order, of {', '.join(KINDS)} (h2); the floor is h2's only")
    p.add_argument("--requests", type=int, default=5000, help="requests counted under valgrind (5000)")
    p.add_argument("--warmup", type=int, default=2000, help="requests before the count (2000)")
    p.add_argument("--connections", type=int, default=4, help="h2load -c under valgrind (4)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m over h2 (10); HTTPS/1.1 sends one at a time")
    p.add_argument("--tries", type=int, default=3, help="valgrind runs a proxy may take to be counted (3)")
    p.add_argument("--cpu", type=int, default=0, metavar="SECONDS", help="also time each proxy without valgrind this long (0: no)")
    p.add_argument("--cpu-connections", type=int, default=32, help="h2load -c of the timed load (32, as peers_bench.py)")
    p.add_argument("--cache-sim", action="store_true",
                   help="count with callgrind's cache simulation too: L1 instruction and data misses per request")
    p.add_argument("--keep-profiles", type=Path, metavar="DIR",
                   help="keep each count's callgrind file in DIR (<kind>-<proxy>-<round>.callgrind), for callgrind_annotate")
    p.add_argument("--no-count", dest="count", action="store_false", help="no valgrind count: the timed runs alone (needs --cpu)")
    p.add_argument("--rounds", type=int, default=1, help="run every row this many times, the order reversed every other round (1)")
    p.add_argument("--traefik", type=Path, help="Traefik binary (default: where bench/peers.sh builds it)")
    p.add_argument("--caddy", type=Path, help="Caddy binary (default: where bench/peers.sh builds it)")
    h2_bench.add_run_arguments(p)
    p.set_defaults(start_timeout=180.0)  # CPython's start under valgrind takes a minute
    args = p.parse_args(argv)
    unknown = [proxy for proxy in args.proxies if proxy not in PROXIES] + [kind for kind in args.kinds if kind not in KINDS]
    if unknown:
        p.error(f"unknown {unknown}: proxies from {', '.join(PROXIES)}, kinds from {', '.join(KINDS)}")
    if (not args.count and not args.cpu) or args.rounds < 1:
        p.error("--no-count needs --cpu SECONDS, and --rounds at least 1")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    tools = (args.nginx, "valgrind", "callgrind_control", "h2load", "taskset") if args.count else (args.nginx, "h2load", "taskset")
    missing = [tool for tool in tools if not shutil.which(tool)]
    if missing:
        print(f"FAILED missing {', '.join(missing)}: run bench/setup.sh", file=sys.stderr)
        return 1
    rows, _, status = run_in_workdir(args, "twlive-", Bench, lambda bench: bench.run_all(), (BenchFailed, procs.StartError))
    if rows is None:
        return status
    print()
    for row in rows:
        print(describe(row))
    if args.rounds > 1:
        print("\n".join(medians(rows) + paired_ratios(rows)))
    out = {"benchmark": "live_instructions", "config": {k: getattr(args, k) for k in (
        "kinds", "requests", "warmup", "connections", "streams", "cpu", "cpu_connections", "proxy_cpu", "load_cpu", "count", "rounds", "cache_sim")},
        "results": [row.__dict__ for row in rows]}
    return write_and_exit_status(args.json, out, [f"{row.kind} {row.proxy}: {row.failure}" for row in rows if row.failure])


if __name__ == "__main__":
    sys.exit(main())
