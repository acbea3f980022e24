"""
What every side-by-side benchmark here shares: its children (started pinned,
stopped through the caller's ExitStack) and its logs, and signals that unwind
like Ctrl-C so no child is left behind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional, TypeVar

import procs
import targets
from report import REPO


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP unwind like Ctrl-C does, so every child is stopped."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)


def twingress_env() -> dict[str, str]:
    """twingress's environment: this tree first on the path (with its compiled modules, if built), output unbuffered."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(os.environ) | {"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}


class Harness:
    """Owns the temp dir and the children (through the caller's ExitStack)."""

    def __init__(self, args: argparse.Namespace, stack: ExitStack, workdir: Path) -> None:
        self.args = args
        self.stack = stack
        self.workdir = workdir

    def spawn(self, name: str, argv: list[str], port: int, cpu: int | str, env: Optional[dict[str, str]] = None) -> procs.Proc:
        """Start a child pinned to C{cpu}, register its cleanup, wait for it to listen."""
        proc = procs.start(name, argv, self.workdir, cpu, env=env, cwd=REPO)
        self.stack.callback(procs.stop, proc)
        procs.wait_for_port(proc, port, self.args.start_timeout)
        return proc

    def nginx(self, name: str, conf: str, port: int, cpu: int | str) -> procs.Proc:
        argv = [self.args.nginx, *targets.write_nginx_conf(self.workdir, name, conf)]
        return self.spawn(name, argv, port, cpu)

    def keep_logs(self, into: Path) -> None:
        """Copy the children's logs, the nginx configs and the manifests out of the temp dir."""
        into.mkdir(parents=True, exist_ok=True)
        for path in [*self.workdir.glob("*.log"), *self.workdir.glob("*.conf")]:
            shutil.copy(path, into / path.name)
        if (self.workdir / "manifests").is_dir():
            shutil.copytree(self.workdir / "manifests", into / "manifests", dirs_exist_ok=True)


Result = TypeVar("Result")


def run_in_workdir(args: argparse.Namespace, prefix: str, make: Callable[[argparse.Namespace, ExitStack, Path], Harness],
                   run: Callable[[Any], Result], failures: tuple[type[BaseException], ...]) -> tuple[Optional[Result], Optional[Harness], int]:
    """
    Run a bench in a temporary directory whose children are all stopped on the way out (and its
    logs kept with --keep-logs): (its result, the bench, 0), or (None, None, exit status) after
    printing why it stopped.
    """
    try:
        with ExitStack() as stack:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
            bench = make(args, stack, workdir)
            try:
                return run(bench), bench, 0
            finally:
                if args.keep_logs:
                    bench.keep_logs((args.json.parent if args.json else Path.cwd()) / "bench-logs")
    except KeyboardInterrupt:
        print("\ninterrupted: all benchmark processes stopped", file=sys.stderr)
        return None, None, 130
    except failures as e:
        print(f"FAILED {e}", file=sys.stderr)
        return None, None, 1
