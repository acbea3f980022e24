"""
First-answer: README's first-run promise, measured - the time from C{make run} in a fresh clone of
this repository (no venv; pip's and h2stack.py's caches removed first, unless C{--keep-caches}) to
the first answer through the quickstart, the background compile's duration, and the second start's
first answer on the compiled build.  Each example is stopped as a terminal's Ctrl-C does (SIGINT to
its process group).  The listeners move off the defaults (18080, 18443, 20254).

  python -m bench first-answer CLONE [MAKE_VARIABLE=VALUE ...]    # CAN_COMPILE= for a machine without a compiler

CLONE is removed and cloned again: give a path nothing else uses.  Removing the caches makes every
other checkout's next make venv and make compiled slower: run it where nothing else needs them.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

from bench.lib import procs, site
from bench.scenarios import Run

NAME = "first-answer"
QUESTION = "How long from make run in a fresh clone to the first answer, the background compile, and the second start?"
TOOLS = ("git", "make")
LISTENERS = {"HTTP": "tcp:18080:interface=127.0.0.1", "HTTPS": "tcp:18443:interface=127.0.0.1", "ADMIN": "tcp:20254:interface=127.0.0.1"}
CACHES = (Path.home() / ".cache" / "pip", site.CACHE.parent / "h2stack")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("clone", nargs="?", type=Path, help="where to clone (removed first)")
    p.add_argument("make_variables", nargs="*", metavar="MAKE_VARIABLE=VALUE", help="for make run (CAN_COMPILE=: no compile)")
    p.add_argument("--keep-caches", action="store_true", help="leave pip's and h2stack.py's caches: not a first run's time, but harmless to others")
    p.add_argument("--answer-timeout", type=float, default=1800.0, help="seconds make run has to answer (1800)")


def check(args: argparse.Namespace) -> str:
    if args.clone is None:
        return "usage: python -m bench first-answer CLONE [make variables, e.g. CAN_COMPILE=]"
    if args.against or args.workers != 1:
        return "--against and --workers: first-answer runs the quickstart, beside no one"
    bad = [v for v in args.make_variables if "=" not in v]
    return f"not a make variable: {', '.join(bad)} (NAME=VALUE)" if bad else ""


def answered() -> bool:
    """The quickstart's echo route answers 200 through the moved HTTP listener."""
    conn = http.client.HTTPConnection("127.0.0.1", 18080, timeout=2)
    try:
        conn.request("GET", "/hello", headers={"Host": "echo.example.com"})
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def make_run(run: Run, clone: Path, log: str) -> tuple[subprocess.Popen[bytes], float]:
    """C{make run} in the clone, in a session of its own: (its process, seconds to the first answer), or L{BenchFailed}."""
    env = dict(os.environ) | LISTENERS
    with open(clone / log, "wb") as out:
        child = subprocess.Popen(["make", "run", *run.args.make_variables], cwd=clone, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    run.children.stack.callback(stop, child)
    started = time.monotonic()
    while not answered():
        if child.poll() is not None:
            raise procs.BenchFailed(f"make run ended ({child.returncode}) before answering:\n{(clone / log).read_text(errors='replace')[-2000:]}")
        if time.monotonic() - started > run.args.answer_timeout:
            raise procs.BenchFailed(f"make run did not answer within {run.args.answer_timeout:.0f} s")
        time.sleep(0.2)
    return child, round(time.monotonic() - started, 1)


def stop(child: subprocess.Popen[bytes]) -> None:
    """As a terminal's Ctrl-C: SIGINT to the process group, then what is left killed."""
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGINT)
            child.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def compile_seconds(clone: Path, since: float) -> Optional[float]:
    """Seconds from the first start until the background compile (.venv/compile.pid) ended; None when none ran."""
    pid_file = clone / ".venv" / "compile.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text().split()[0])
    while Path(f"/proc/{pid}").exists():
        time.sleep(2)
    return round(time.monotonic() - since, 1)


def run(run: Run) -> list[dict[str, Any]]:
    clone: Path = run.args.clone.resolve()
    shutil.rmtree(clone, ignore_errors=True)
    if not run.args.keep_caches:
        for cache in CACHES:
            shutil.rmtree(cache, ignore_errors=True)
    done = subprocess.run(["git", "clone", "-q", str(site.REPO), str(clone)], capture_output=True, text=True)
    if done.returncode != 0:
        raise procs.BenchFailed(f"git clone: {done.stderr.strip()}")
    row: dict[str, Any] = {"clone": str(clone), "make_variables": run.args.make_variables, "caches_removed": not run.args.keep_caches,
                           "loadavg_before": os.getloadavg()[0]}
    began = time.monotonic()
    first, row["first_answer_s"] = make_run(run, clone, "run1.out")
    run.say(f"first answer after {row['first_answer_s']} s")
    stop(first)
    row["compile_s"] = compile_seconds(clone, began)
    if row["compile_s"] is not None:
        run.say(f"background compile ended after {row['compile_s']} s")
        second, row["second_answer_s"] = make_run(run, clone, "run2.out")
        row["compiled_modules"] = len(list((clone / "ingress").rglob("*.so")))
        stop(second)
    row["loadavg_after"] = os.getloadavg()[0]
    return [row]


def lines(document: dict[str, Any]) -> list[str]:
    out = []
    for row in document["figures"]:
        caches = "caches removed" if row["caches_removed"] else "caches kept (not a first run's time)"
        out.append(f"make run {' '.join(row['make_variables'])} in a fresh clone ({caches}): first answer after {row['first_answer_s']} s")
        if row.get("compile_s") is not None:
            out.append(f"background compile ended {row['compile_s']} s after the start; the second start answered after "
                       f"{row['second_answer_s']} s ({row['compiled_modules']} compiled modules)")
        else:
            out.append("no background compile (CAN_COMPILE= or no compiler)")
    return out
