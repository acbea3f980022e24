"""
python -m bench SCENARIO [--against nginx,haproxy,traefik,caddy] [--workers N] [--cpus PROXY/LOAD] [--out FILE] [scenario options]
python -m bench report FILE...
python -m bench list

Runs one scenario (see C{python -m bench list}, and bench/README.md for which answers which
question), writes its results file (bench/results/SCENARIO-TIME.json unless --out), and prints
its table; C{report} prints the tables of results files.  Exit status 1 when anything could not be
measured (the file says what), 2 for bad options; one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

from bench.lib import cpu, procs, results
from bench.scenarios import Run, scenarios

TOOLS = ("h2load", "taskset")


def default_cpus() -> str:
    """The proxy on CPU 0 and the load on CPU 1 where there are two, nothing pinned where there is one."""
    return "0/1" if (os.cpu_count() or 1) >= 2 else ""


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--against", type=lambda s: [name for name in s.split(",") if name], default=[],
                   help="the peers to compare with, comma-separated (what each scenario accepts: its --help)")
    p.add_argument("--workers", type=int, default=1, help="twingress --workers N (and as many nginx workers, Go threads) (1)")
    p.add_argument("--cpus", default=default_cpus(),
                   help="PROXY/LOAD taskset lists: the contenders on PROXY, backends and load on LOAD ('0/1' on two CPUs; '': unpinned)")
    p.add_argument("--out", type=Path, metavar="FILE", help="the results file (bench/results/SCENARIO-TIME.json)")
    p.add_argument("--start-timeout", type=float, default=60.0, help="seconds a contender has to listen and answer (60)")
    p.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy the children's logs and configs into DIR")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.strip().split("\n\n")[1].replace("\n", " "))
    sub = p.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    for name, module in scenarios().items():
        s = sub.add_parser(name, help=module.QUESTION, description=(module.__doc__ or "").strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        common(s)
        module.add_arguments(s)
    r = sub.add_parser("report", help="print the tables of results files")
    r.add_argument("files", type=Path, nargs="+", metavar="FILE")
    sub.add_parser("list", help="every scenario and the question it answers")
    return p


def split_cpus(spec: str) -> tuple[Optional[str], Optional[str]]:
    if not spec:
        return None, None
    proxy, slash, load = spec.partition("/")
    try:
        cpu.cpu_list(proxy), cpu.cpu_list(load)
    except ValueError:
        slash = ""
    if not slash or not proxy or not load:
        raise ValueError(f"--cpus {spec!r}: PROXY/LOAD, two taskset lists (0/1, 0-1/2)")
    return proxy, load


def report(files: Sequence[Path]) -> int:
    known: dict[str, Any] = scenarios()
    status = 0
    for path in files:
        try:
            document = results.read(path)
        except (OSError, ValueError) as e:
            print(f"bench report: {e}", file=sys.stderr)
            status = 1
            continue
        env = document["environment"]
        print(f"{path}: {document['scenario']} at {document['time']} on {env.get('machine')} ({env.get('cpus')} CPUs, "
              f"{env.get('cpu_model')}), commit {env.get('commit')}{' (dirty)' if env.get('dirty') else ''}")
        print(f"  {document['command']}")
        module = known.get(document["scenario"])
        lines = module.lines(document) if module is not None else [str(f) for f in document["figures"]]
        for line in lines + [f"FAILED {failure}" for failure in document["failures"]]:
            print(f"  {line}")
    return status


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_scenario(args: argparse.Namespace, argv: Sequence[str]) -> int:
    module = scenarios()[args.scenario]
    problem = module.check(args) if hasattr(module, "check") else ""
    try:
        proxy_cpus, load_cpus = split_cpus(args.cpus)
    except ValueError as e:
        problem = problem or str(e)
    if problem or args.workers < 1:
        print(f"python -m bench {args.scenario}: {problem or '--workers at least 1'}", file=sys.stderr)
        return 2
    missing = [tool for tool in (*TOOLS, *getattr(module, "TOOLS", ())) if not shutil.which(tool)]
    if missing:
        print(f"python -m bench {args.scenario}: missing {', '.join(missing)}: run bench/setup.sh", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    if proxy_cpus and load_cpus:
        busy = cpu.background_busy(cpu.cpu_list(proxy_cpus) + cpu.cpu_list(load_cpus))
        if max(busy.values()) >= 10:
            print(f"note: the machine is busy before the run ({busy}): every figure shares it", flush=True)
    try:
        with ExitStack() as stack:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"bench-{args.scenario}-")))
            run = Run(args, procs.Children(stack, workdir, args.start_timeout), proxy_cpus, load_cpus,
                      lambda line: print(line, flush=True))
            try:
                figures = module.run(run)
            except procs.BenchFailed as e:
                figures = []
                run.failures.append(str(e))
            finally:
                if args.keep_logs:
                    args.keep_logs.mkdir(parents=True, exist_ok=True)
                    for path in [*workdir.glob("*.log"), *workdir.glob("*.conf")]:
                        shutil.copy(path, args.keep_logs / path.name)
    except KeyboardInterrupt:
        print("\ninterrupted: every child stopped", file=sys.stderr)
        return 130
    config = {key: value for key, value in vars(args).items() if key not in ("scenario", "out", "keep_logs")} | run.config
    out = results.write(args.out, args.scenario, ["python", "-m", "bench", *argv], config, figures, run.failures)
    print()
    for line in module.lines(results.read(out)):
        print(line)
    print(f"results written to {out}")
    for failure in run.failures:
        print(f"FAILED {failure.splitlines()[0]}", file=sys.stderr)
    return 1 if run.failures else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.scenario == "report":
        return report(args.files)
    if args.scenario == "list":
        for name, module in scenarios().items():
            print(f"{name:<17} {module.QUESTION}")
        return 0
    return run_scenario(args, argv)


if __name__ == "__main__":
    sys.exit(main())
