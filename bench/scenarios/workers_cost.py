"""
What a second worker costs per request, counted (issue 32, target 5): twingress ``--workers 1``
against ``--workers N`` on the same CPUs, HTTP/1.1 keep-alive, each row's CPU per request split
into what can be counted on this guest without hardware counters.

Why: a timed ratio of ``--workers 2`` over ``--workers 1`` says that a second worker costs CPU per
request, not where it goes, and on this guest it moves by a fifth between runs of one tree.  Counts do not drift, so this bench counts, for each
row, over the whole process tree (the primary and its workers):

- user-space instructions per request, under callgrind (``--trace-children=yes``, every process
  counted over the same window of requests), and the primary's share of them (twingress only: an
  idle nginx process sleeps in a syscall, where ``callgrind_control`` cannot reach it without
  ptrace, and times out);
- syscalls per request, ``epoll_wait`` calls (reactor wake-ups) per request, and context switches
  per request, from the kernel's own counters (``perf stat`` with the syscall tracepoints and the
  context-switches software event: no hardware counters needed);
- user and system CPU per request, timed without valgrind (``/proc``), as the latency scenario measures it.

If the instructions per request are level and the syscalls and switches grow, what a second worker
costs is the kernel's and the caches', not twingress's code: each worker sees half the connections,
so each wake-up carries fewer requests.

The backend is the benches' nginx on the load CPU, with h2load (``--h1``, keep-alive, one request at a
time per connection) beside it; twingress runs on the proxy CPUs (by default ``0``: every process
on one CPU).  nginx (``worker_processes`` 1 and N,
its master beside them) runs the same way as the reference: what N processes sharing the same CPUs
cost a proxy whose own code adds nothing per worker.  And ``twingress-apart`` runs N separate
twingress processes of one worker each on the same CPUs, the load split between their ports: N
CPython processes taking turns on the CPUs without the worker pool (no primary, no channel, no shared
listening socket).  If it costs what ``--workers N`` costs, the pool adds nothing of its own.  Rows
alternate over ``--rounds``, the order reversed every other round; each N row is compared with the
same round's one-worker row.

C{--workers N} is the layout compared with one (2 unless more is given); the proxies on the
proxy CPUs of C{--cpus} (the default: every process on CPU 0); C{--against nginx,twingress-apart}.
C{--no-count}: the timed and kernel-counted rows alone (a twingress row under valgrind takes minutes).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from bench.lib import cpu, load, procs, site
from bench.lib.procs import BenchFailed
from bench.scenarios import Run

NAME = "workers-cost"
QUESTION = "Where does a second worker's extra CPU per request go (syscalls, context switches, instructions)?"
TOOLS = ("nginx", "perf")

_TOTALS_RE = re.compile(r"^totals: (\d+)", re.MULTILINE)  # the file's "summary:" is 0 when counting starts off
# perf stat's kernel-side counters: no hardware counter is exposed in this guest
PERF_EVENTS = ("raw_syscalls:sys_enter", "syscalls:sys_enter_epoll_wait", "context-switches")


TWINGRESS, NGINX = "twingress", "nginx"
# N twingress processes of one worker each, side by side on the same CPUs, the load split between their
# ports: what N CPython processes taking turns on the CPUs cost without the worker pool (no primary, no
# channel, no shared listening socket), compared with --workers 1 of the same round
APART = "twingress-apart"
PROXIES = (TWINGRESS, NGINX, APART)


@dataclass
class Row:
    proxy: str
    workers: int
    round: int
    instructions: Optional[int] = None  # per request, user space, the primary and every worker
    primary_instructions: Optional[int] = None  # per request, the primary's share of them
    counted_requests: int = 0
    requests: int = 0  # of the timed run
    user_us: Optional[float] = None  # per request, the process tree, without valgrind
    system_us: Optional[float] = None
    primary_us: Optional[float] = None  # per request, the primary's own user + system
    worker_shares: list[float] = field(default_factory=list)  # each worker's share of the workers' CPU (SO_REUSEPORT's balance)
    kernel: dict[str, float] = field(default_factory=dict)  # per request, each of PERF_EVENTS
    failure: str = ""


def group_pids(pgid: int) -> list[int]:
    """The live processes of one process group: the primary (its leader) first, then its workers."""
    return sorted(cpu.group_pids(pgid), key=lambda pid: (pid != pgid, pid))


class Bench:
    """The backend for the whole run; the proxies started per row, with their workers."""

    def __init__(self, run: Run) -> None:
        self.run, self.args = run, run.args
        self.backends = site.start_backends(run.children, run.load_cpus)

    def run_all(self) -> list[Row]:
        rows = []
        order = [(proxy, workers) for proxy in (TWINGRESS, *self.args.against) for workers in (1, self.args.workers)
                 if not (proxy == APART and workers == 1)]  # one process apart is twingress --workers 1
        for round_number in range(1, self.args.rounds + 1):
            for proxy, workers in order if round_number % 2 else order[::-1]:
                row = Row(proxy, workers, round_number)
                try:
                    if self.args.count and proxy == TWINGRESS:
                        self.count(row)
                    self.time(row)
                except (BenchFailed, OSError, subprocess.SubprocessError) as e:
                    row.failure = str(e)
                    self.run.failures.append(f"{proxy} --workers {workers} round {round_number}: {e}")
                self.run.say(f"==> {describe(row)}")
                rows.append(row)
        return rows

    def start(self, row: Row, name: str, wrapper: Sequence[str] = ()) -> tuple[procs.Proc, int]:
        """The row's proxy with its workers, serving: every process is up before the row is measured."""
        if row.proxy == NGINX:
            listening = site.nginx(self.run.children, name, self.backends, self.run.proxy_cpus, row.workers)
        else:
            listening = site.twingress(self.run.children, name, site.Checkout(site.REPO), self.backends, self.run.proxy_cpus,
                                       row.workers, ["--access-log", self.args.access_log], wrapper=wrapper)
        proc, port = listening.proc, listening.http_port
        processes = row.workers + (row.workers > 1 or row.proxy == NGINX)
        deadline = time.monotonic() + self.args.start_timeout
        while len(group_pids(proc.pid)) < processes or not self.serves(port):
            if proc.popen.poll() is not None or time.monotonic() > deadline:
                raise BenchFailed(f"{name} did not serve with {row.workers} workers:\n{proc.tail()}")
            time.sleep(1)
        return proc, port

    def start_all(self, row: Row, name: str) -> list[tuple[procs.Proc, int]]:
        """The row's processes: one proxy, or (apart) N twingress of one worker each."""
        if row.proxy != APART:
            return [self.start(row, name)]
        single = Row(TWINGRESS, 1, row.round)
        return [self.start(single, f"{name}-{n}") for n in range(row.workers)]

    def connections(self, row: Row) -> int:
        """The row's h2load connections: C{--connections}, or that many a worker (C{--per-worker})."""
        return int(self.args.connections) * (row.workers if self.args.per_worker else 1)

    def load(self, row: Row, ports: list[int], *amount: str) -> tuple[int, int]:
        """h2load to every port at once, the row's connections split between them: (answered 2xx, the others)."""
        connections = self.connections(row) // len(ports)
        with ThreadPoolExecutor(len(ports)) as pool:
            results = list(pool.map(lambda port: self.h2load(port, connections, *amount), ports))
        return sum(done for done, _ in results), sum(failed for _, failed in results)

    def serves(self, port: int) -> bool:
        try:
            return self.h2load(port, 4, "-n", "40") == (40, 0)
        except BenchFailed:
            return False

    def h2load(self, port: int, connections: int, *amount: str) -> tuple[int, int]:
        """HTTP/1.1 keep-alive load from the load CPUs: (requests answered 2xx, the others)."""
        got = load.h2load(load.HTTP, port, self.run.children.workdir, self.run.load_cpus, connections, 1, *amount)
        return got.ok, got.failed

    def count(self, row: Row) -> None:
        """Instructions per request of the primary and every worker, under callgrind, over one window."""
        out = self.run.children.workdir / f"{row.proxy}-w{row.workers}-r{row.round}"
        out.mkdir()
        valgrind = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--instr-atstart=no",
                    f"--callgrind-out-file={out}/callgrind.%p", f"--log-file={out}/valgrind.%p"]
        proc, port = self.start(row, f"count-{row.proxy}-w{row.workers}-r{row.round}", valgrind)
        try:
            self.h2load(port, self.connections(row), "-n", str(self.args.warmup))
            pids = [str(pid) for pid in group_pids(proc.pid)]
            subprocess.run(["callgrind_control", "-i", "on", *pids], check=True, capture_output=True, timeout=120)
            done, failed = self.h2load(port, self.connections(row), "-n", str(self.args.count_requests))
            # each process's counts written now, not on its way out: the primary kills a worker that is slow to
            # stop, and a worker under valgrind is
            subprocess.run(["callgrind_control", "--dump=counted", *pids], check=True, capture_output=True, timeout=300)
            by_pid = {int(pid): _totals(out / f"callgrind.{pid}.1") for pid in pids}
            if self.args.keep_profiles is not None:
                self.args.keep_profiles.mkdir(parents=True, exist_ok=True)
                for pid in pids:
                    role = "primary" if int(pid) == proc.pid else f"worker-{pid}"
                    shutil.copy(out / f"callgrind.{pid}.1", self.args.keep_profiles / f"{out.name}-{role}.callgrind")
        finally:
            procs.stop(proc)
        if failed or not done:
            raise BenchFailed(f"{failed} failed, {done} done")
        row.counted_requests = done
        row.instructions = round(sum(by_pid.values()) / done)
        row.primary_instructions = round(by_pid[proc.pid] / done) if len(by_pid) > 1 else None

    def time(self, row: Row) -> None:
        """CPU, syscalls, wake-ups and switches per request, without valgrind, over a timed load."""
        started = self.start_all(row, f"timed-{row.proxy}-w{row.workers}-r{row.round}")
        ports = [port for _, port in started]
        try:
            self.load(row, ports, "-D", "2")
            pids = [pid for proc, _ in started for pid in group_pids(proc.pid)]
            perf = subprocess.Popen(["perf", "stat", "-x", ",", "-e", ",".join(PERF_EVENTS), "-p", ",".join(map(str, pids))],
                                    stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)  # perf attached before the load
            ticks = [cpu.user_system_seconds(pid) for pid in pids]
            done, failed = self.load(row, ports, "-D", str(self.args.seconds))
            after = [cpu.user_system_seconds(pid) for pid in pids]
            perf.send_signal(signal.SIGINT)
            _, perf_out = perf.communicate(timeout=30)
        finally:
            for proc, _ in started:
                procs.stop(proc)
        if failed or not done:
            raise BenchFailed(f"timed load: {failed} failed, {done} done")
        row.requests = done
        row.user_us = round(1e6 * sum(a[0] - b[0] for a, b in zip(after, ticks, strict=True)) / done, 1)
        row.system_us = round(1e6 * sum(a[1] - b[1] for a, b in zip(after, ticks, strict=True)) / done, 1)
        if len(pids) > 1:  # pids[0] is the primary (nginx's master), the group's leader; apart, none is
            primary = 0 if row.proxy == APART else 1
            if primary:
                row.primary_us = round(1e6 * (sum(after[0]) - sum(ticks[0])) / done, 2)
            used = [sum(a) - sum(b) for a, b in zip(after[primary:], ticks[primary:], strict=True)]
            row.worker_shares = [round(share / sum(used), 3) for share in used] if sum(used) else []
        row.kernel = {event: round(count / done, 3) for event, count in _perf_counts(perf_out).items()}
        if set(row.kernel) != set(PERF_EVENTS):
            raise BenchFailed(f"perf stat counted {sorted(row.kernel)}, not {PERF_EVENTS}: {perf_out[-400:]}")


def _totals(path: Path) -> int:
    """The instructions a callgrind dump counted (its totals line), once callgrind has written it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = _TOTALS_RE.search(path.read_text(errors="replace")) if path.exists() else None
        if found is not None:
            return int(found.group(1))
        time.sleep(0.5)
    raise BenchFailed(f"{path.name}: callgrind did not write this process's counts")


def _perf_counts(text: str) -> dict[str, int]:
    """perf stat -x, lines: value,unit,event,... (a "<not counted>" value is left out)."""
    counts = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2] in PERF_EVENTS and parts[0].isdigit():
            counts[parts[2]] = int(parts[0])
    return counts


def describe(row: Row) -> str:
    if row.failure:
        return f"{row.proxy} --workers {row.workers} round {row.round}: FAILED {row.failure}"
    parts = []
    if row.instructions is not None:
        primary = f" (the primary {row.primary_instructions:,})" if row.primary_instructions is not None else ""
        parts.append(f"{row.instructions:,} instructions per request{primary}")
    primary = f"the primary {row.primary_us}; " if row.primary_us is not None else ""
    shares = f" ({primary}the workers' shares {row.worker_shares})" if row.worker_shares else ""
    parts.append(f"{row.user_us} us user + {row.system_us} us system per request{shares}")
    parts.append(", ".join(f"{event} {count}" for event, count in row.kernel.items()) + " per request")
    return f"{row.proxy} --workers {row.workers} round {row.round}: {'; '.join(parts)}"


def summary(rows: list[Row]) -> list[str]:
    """Each proxy's and layout's medians, N workers' over one's, and the ratios round by round."""
    lines = []
    for proxy in dict.fromkeys(row.proxy for row in rows):
        values: dict[int, dict[str, float]] = {}
        for workers in sorted({row.workers for row in rows if row.proxy == proxy}):
            good = [row for row in rows if row.proxy == proxy and row.workers == workers and not row.failure]
            if good:
                values[workers] = medians(good)
                lines.append(f"{proxy} --workers {workers} medians per request: "
                             + ", ".join(f"{name} {value:,.3f}" for name, value in values[workers].items()))
        if len(values) == 2:
            first, second = (values[w] for w in sorted(values))
            lines.append(f"{proxy} ratio of the medians: " + ", ".join(f"{name} {second[name] / first[name]:.3f}" for name in first if first[name]))
        baseline = TWINGRESS if proxy == APART else proxy  # apart: N processes over the same round's --workers 1
        paired = paired_cpu_ratios([row for row in rows if row.proxy == proxy or (row.proxy == baseline and row.workers == 1)])
        if paired:
            lines.append(f"{proxy} CPU per request, --workers N over --workers 1 round by round: {', '.join(f'{r:.3f}' for r in paired)}; "
                         f"median {statistics.median(paired):.3f}")
    return lines


def medians(rows: list[Row]) -> dict[str, float]:
    """The median of each figure over C{rows} (one proxy and layout, every round)."""
    values = {"cpu us": statistics.median((row.user_us or 0) + (row.system_us or 0) for row in rows),
              "user us": statistics.median(row.user_us or 0 for row in rows),
              "system us": statistics.median(row.system_us or 0 for row in rows)}
    counted = [row.instructions for row in rows if row.instructions is not None]
    if counted:
        values["instructions"] = statistics.median(counted)
    for event in PERF_EVENTS:
        values[event] = statistics.median(row.kernel.get(event, 0) for row in rows)
    return values


def paired_cpu_ratios(rows: list[Row]) -> list[float]:
    """
    Each round's CPU per request with N workers over its own with one (rows of one proxy).

    Why: the two rows of a round ran back to back, so their ratio keeps less of this guest's drift
    (a fifth from one minute to the next) than a ratio of medians taken over the whole run does.
    """
    cpu: dict[tuple[int, int], float] = {(row.round, row.workers): (row.user_us or 0) + (row.system_us or 0)
                                         for row in rows if not row.failure and row.user_us is not None}
    return [cpu[(n, w)] / cpu[(n, 1)] for (n, w) in sorted(cpu) if w > 1 and cpu.get((n, 1))]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=4, help="rounds of both layouts, alternated 1 N N 1 (4)")
    p.add_argument("--seconds", type=int, default=8, help="the timed load's length (8)")
    p.add_argument("--connections", type=int, default=64, help="h2load -c, HTTP/1.1 keep-alive (64)")
    p.add_argument("--per-worker", action="store_true", help="--connections for each worker (N workers get N times as many)")
    p.add_argument("--count-requests", type=int, default=20000, help="requests counted under valgrind (20000)")
    p.add_argument("--warmup", type=int, default=4000, help="requests before the count (4000)")
    p.add_argument("--no-count", dest="count", action="store_false", help="no valgrind count: the timed and kernel rows alone")
    p.add_argument("--keep-profiles", type=Path, metavar="DIR", help="keep each count's callgrind files in DIR")
    p.add_argument("--access-log", default="off", help="twingress's --access-log (off; -: stdout, as shipped)")


def check(args: argparse.Namespace) -> str:
    unknown = [a for a in args.against if a not in (NGINX, APART)]
    if unknown:
        return f"unknown {', '.join(unknown)}: --against from {NGINX}, {APART}"
    if args.rounds < 1 or args.seconds < 1 or args.connections < 1 or args.count_requests < 1:
        return "--rounds, --seconds, --connections and --count-requests at least 1"
    missing = [tool for tool in ("valgrind", "callgrind_control") if args.count and not shutil.which(tool)]
    if missing:
        return f"missing {', '.join(missing)} for the count: run bench/setup.sh, or --no-count"
    args.workers = max(args.workers, 2)  # the layout compared with one
    if args.count:
        args.start_timeout = max(args.start_timeout, 240.0)  # CPython's start under valgrind, a worker at a time
    return ""


def run(run: Run) -> list[dict[str, Any]]:
    rows = Bench(run).run_all()
    return [asdict(row) for row in rows if not row.failure]


def lines(document: dict[str, Any]) -> list[str]:
    rows = [Row(**{k: v for k, v in figure.items()}) for figure in document["figures"]]
    return [describe(row) for row in rows] + summary(rows)
