"""The benchmark's results: one L{TargetResult} per target, the table, the JSON, the verdict."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import targets
import wrk

REPO = Path(__file__).resolve().parents[2]
DIRECT, NGINX, TWINGRESS = "direct", "nginx-proxy", "twingress"
IDLE_LIMIT = 10.0  # percent busy before we start, or in the direct run on the proxy CPU


@dataclass
class TargetResult:
    """The measured run against one target, or why there is none."""

    name: str
    result: Optional[wrk.WrkResult] = None
    warmup_errors: int = 0
    cpu_busy: dict[str, float] = field(default_factory=dict)
    target_cpu_seconds: Optional[float] = None
    # the started process's own share (twingress --workers N: the primary; nginx: its master)
    main_process_cpu_seconds: Optional[float] = None
    failure: Optional[str] = None

    @property
    def ok(self) -> bool:
        return (self.failure is None and self.result is not None
                and self.result.errors == 0 and self.warmup_errors == 0)


def find(results: list[TargetResult], name: str) -> Optional[wrk.WrkResult]:
    return next((r.result for r in results if r.name == name and r.result), None)


def derived(results: list[TargetResult], r: TargetResult) -> dict[str, Optional[float]]:
    """Ratio of req/s to nginx-proxy, latency added over the direct run (ms), CPU us per request."""
    ref, direct = find(results, NGINX), find(results, DIRECT)
    res = r.result
    if res is None:
        return dict.fromkeys(
            ("ratio_to_nginx", "added_p50_ms", "added_p99_ms", "cpu_us_per_request", "main_process_cpu_us_per_request"))
    vs_direct = direct is not None and r.name != DIRECT
    return {
        "ratio_to_nginx": round(res.rps / ref.rps, 3) if ref and ref.rps else None,
        "added_p50_ms": round(res.p("50") - direct.p("50"), 3) if vs_direct else None,
        "added_p99_ms": round(res.p("99") - direct.p("99"), 3) if vs_direct else None,
        "cpu_us_per_request": round(1e6 * r.target_cpu_seconds / res.requests, 2)
        if r.target_cpu_seconds is not None and res.requests else None,
        "main_process_cpu_us_per_request": round(1e6 * r.main_process_cpu_seconds / res.requests, 2)
        if r.main_process_cpu_seconds is not None and res.requests else None,
    }


def _busy(busy: dict[str, float]) -> str:
    return ", ".join(f"{cpu} {pct:.0f}%" for cpu, pct in busy.items())


def _fmt(value: Optional[float], spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table(results: list[TargetResult], args: argparse.Namespace) -> str:
    """The human-readable table, one row per target."""
    head = (f"{'target':<12} {'req/s':>10} {'p50':>9} {'p99':>9} {'errors':>7} "
            f"{'vs nginx':>9} {'+p99 vs direct':>15} {'CPU/req':>9} {'main/req':>9}  "
            f"cpu{args.proxy_cpu}/cpu{args.load_cpu} busy")
    lines = [head, "-" * len(head)]
    for r in results:
        if r.result is None:
            lines.append(f"{r.name:<12} {'FAILED':>10}")
            continue
        d = derived(results, r)
        busy = "/".join(_fmt(v, ".0f", "%") for v in r.cpu_busy.values())
        errors = r.result.errors + r.warmup_errors
        lines.append(
            f"{r.name:<12} {r.result.rps:>10,.0f} {r.result.p('50'):>7.2f}ms "
            f"{r.result.p('99'):>7.2f}ms {errors:>7} {_fmt(d['ratio_to_nginx'], '.2f', 'x'):>9} "
            f"{_fmt(d['added_p99_ms'], '+.2f', 'ms'):>15} "
            f"{_fmt(d['cpu_us_per_request'], '.1f', 'us'):>9} {_fmt(d['main_process_cpu_us_per_request'], '.1f', 'us'):>9}  {busy}")
    return "\n".join(lines)


def problems(results: list[TargetResult]) -> list[str]:
    """Every reason this run must not be trusted, as one line each (plus logs)."""
    out = []
    for r in results:
        if r.failure:
            out.append(f"{r.name}: {r.failure}")
        elif r.result and r.result.errors:
            out.append(f"{r.name}: {r.result.non_2xx} non-2xx/3xx responses, "
                       f"socket errors {r.result.socket_errors}")
        if r.warmup_errors:
            out.append(f"{r.name}: {r.warmup_errors} errors during warm-up")
    return out


def notes(results: list[TargetResult], args: argparse.Namespace,
          background: dict[str, float]) -> list[str]:
    """Warnings that do not fail the run but change how to read it."""
    out = []
    if background and max(background.values()) >= IDLE_LIMIT:
        out.append(f"the machine was busy before the run ({_busy(background)}): other work "
                   f"shares these CPUs, every number is suspect (try --wait-idle 600)")
    for r in results:
        if r.name == DIRECT and r.cpu_busy.get(f"cpu{args.proxy_cpu}", 0.0) >= IDLE_LIMIT:
            out.append(f"the proxy CPU was {r.cpu_busy[f'cpu{args.proxy_cpu}']:.0f}% busy during "
                       f"the direct run, when nothing of ours runs there: other work interferes")
        proxy_busy = r.cpu_busy.get(f"cpu{args.proxy_cpu}", 0.0)
        load_busy = r.cpu_busy.get(f"cpu{args.load_cpu}", 0.0)
        if r.name != DIRECT and r.result and load_busy >= 95.0 and proxy_busy < 90.0:
            out.append(f"{r.name}: the load CPU (wrk + backend) was {load_busy:.0f}% busy and the "
                       f"proxy CPU only {proxy_busy:.0f}%: this number is bounded by the load "
                       f"side, not by the proxy")
    return out


def interpreter() -> str:
    """
    The Python that runs the bench and twingress (the same venv): its version, executable and how
    libpython is linked.  Why: the same code costs about a fifth more instructions per request on a
    shared, unoptimised libpython (pyenv's default build) than on Debian's python3.11, the image's,
    which links libpython into the executable and builds it with PGO and LTO (bench/README.md,
    twenty-fourth session); a figure says which it is.
    """
    shared = any("libpython" in line for line in Path("/proc/self/maps").read_text().splitlines())
    linked = "libpython shared" if shared else "libpython in the executable"
    return f"CPython {platform.python_version()} {os.path.realpath(sys.executable)} ({linked})"


def environment(nginx_bin: str) -> dict[str, str]:
    """Versions and the commit, so a JSON file says what it measured."""
    nginx = subprocess.run([nginx_bin, "-v"], capture_output=True, text=True).stderr.strip()
    commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    return {"nginx": nginx.removeprefix("nginx version: "), "wrk": wrk.version(),
            "python": interpreter(), "kernel": platform.release(),
            "commit": commit or "?"}


def to_json(results: list[TargetResult], args: argparse.Namespace,
            background: dict[str, float]) -> dict[str, Any]:
    config = {k: getattr(args, k) for k in
              ("duration", "warmup", "connections", "threads", "proxy_cpu", "load_cpu",
               "skip_twingress", "twingress_cmd", "workers", "proxy_cpu_list")}
    rows = [{"target": r.name, "ok": r.ok, "failure": r.failure,
             "warmup_errors": r.warmup_errors, "cpu_busy_percent": r.cpu_busy,
             "target_cpu_seconds": r.target_cpu_seconds, "main_process_cpu_seconds": r.main_process_cpu_seconds,
             **derived(results, r), "wrk": r.result.to_json() if r.result else None}
            for r in results]
    return {"benchmark": "http", "time": datetime.datetime.now().astimezone().isoformat(),
            "ok": not problems(results), "environment": environment(args.nginx),
            "background_busy_percent": background, "notes": notes(results, args, background),
            "config": config | {"host": targets.HOST, "body": targets.BODY.decode() if len(targets.BODY) < 100 else f"{len(targets.BODY)} bytes of text"},
            "results": rows}


def finish(results: list[TargetResult], args: argparse.Namespace,
           background: dict[str, float]) -> int:
    """Print the table, notes and problems; write the JSON; 0 only when nothing went wrong."""
    print()
    print(table(results, args))
    for line in notes(results, args, background):
        print(f"note: {line}")
    if args.json:
        args.json.write_text(json.dumps(to_json(results, args, background), indent=2) + "\n")
        print(f"results written to {args.json}")
    bad = problems(results)
    for line in bad:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if bad else 0


def write_and_exit_status(json_path: Optional[Path], out: dict[str, Any], failures: list[str]) -> int:
    """The end every bench shares: the JSON written (with --json), each failure printed; 1 if any."""
    if json_path is not None:
        json_path.write_text(json.dumps(out, indent=2) + "\n")
        print(f"results written to {json_path}")
    for line in failures:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failures else 0
