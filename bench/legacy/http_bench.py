#!/usr/bin/env python3
"""
HTTP reverse-proxy benchmark: twingress as a ratio to nginx, both measured in the same run.

One nginx backend answers C{200 "hello world\\n"}.  In turn, and never at the same
time, wrk drives: the backend directly, an nginx reverse proxy configured like an
ingress, and twingress (C{twistd -n ingress --manifests DIR}).  Each proxy under
test is pinned to one CPU, the backend and wrk to the other.  See bench/README.md.

Run with the project venv::

    .venv/bin/python -m bench latency [--duration 10] [--json out.json] [--skip-twingress]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import shutil
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpuload  # noqa: E402
import procs  # noqa: E402
import targets  # noqa: E402
import wrk  # noqa: E402
from harness import Harness, install_signal_handlers, run_in_workdir, twingress_env  # noqa: E402
from report import DIRECT, IDLE_LIMIT, NGINX, TWINGRESS, TargetResult, finish  # noqa: E402


class BenchFailed(RuntimeError):
    """The harness itself cannot go on (missing tool, backend down)."""


# --- command line and environment ---------------------------------------------------------

def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line; every knob has a default that makes a sensible 2-core run."""
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per target (10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per target (3)")
    p.add_argument("--connections", type=int, default=32, help="wrk -c (32)")
    p.add_argument("--threads", type=int, default=1, help="wrk -t (1)")
    p.add_argument("--proxy-cpu", type=int, default=0, help="CPU for the proxy under test (0); with --workers N, CPUs from it on")
    p.add_argument("--workers", type=int, default=1,
                   help="nginx worker_processes N against twingress --workers N, on the same N CPUs (1)")
    p.add_argument("--load-cpu", type=int, default=1, help="CPU for the backend and wrk (1)")
    p.add_argument("--proxy-cpu-list", metavar="LIST",
                   help="taskset's CPU list for the proxies instead (e.g. 0: --workers 2 on one CPU, "
                        "so that what a worker process costs is measured apart from two CPUs' contention)")
    p.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx",
                   help="nginx binary (%(default)s)")
    p.add_argument("--twingress-cmd", default=targets.DEFAULT_TWINGRESS_CMD,
                   help="twingress command template; {venv_bin}, {manifests}, {port} (and "
                        "{backend_port}) are filled in, then it is split like a shell would "
                        "(default: %(default)s)")
    p.add_argument("--annotation", action="append", default=[], metavar="KEY=VALUE",
                   help="an annotation on the benchmark's Ingress, to measure a route policy (repeatable)")
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="a header field on every request wrk sends, to every target (repeatable; "
                        "basic auth's Authorization, say)")
    p.add_argument("--manifest", action="append", default=[], type=Path, metavar="FILE",
                   help="a YAML file of more objects for twingress's manifests directory (an auth "
                        "Secret, say); {backend_port} in it and in --annotation values is the backend's port")
    p.add_argument("--gateway", action="store_true",
                   help="route the benchmark's host by a Gateway API HTTPRoute instead of an Ingress")
    p.add_argument("--canary-annotation", action="append", default=None, metavar="KEY=VALUE",
                   help="add a canary Ingress (same host, path and backend) with this annotation (repeatable)")
    p.add_argument("--body-size", type=int, default=0, metavar="BYTES",
                   help="the backend answers a text/plain body of this size (default: 'hello world\\n')")
    p.add_argument("--gzip", action="store_true",
                   help="compress: twingress with an ingress-nginx ConfigMap of use-gzip true, nginx-proxy with the "
                        "gzip directives ingress-nginx sets; every request says Accept-Encoding: gzip")
    p.add_argument("--skip-twingress", action="store_true",
                   help="measure only direct and nginx-proxy (to check the harness)")
    p.add_argument("--start-timeout", type=float, default=20.0,
                   help="seconds to wait for a process to listen and to proxy (20)")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                   help="before starting, wait up to this long for both CPUs to be under "
                        f"{IDLE_LIMIT:.0f}%% busy (0: just measure and warn)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    p.add_argument("--keep-logs", action="store_true",
                   help="copy the process logs next to --json (or into the cwd) at the end")
    args = p.parse_args(argv)
    if args.duration < 1 or args.warmup < 0 or args.connections < args.threads:
        p.error("need --duration >= 1, --warmup >= 0 and --connections >= --threads")
    return args


def check_environment(args: argparse.Namespace) -> None:
    """The tools are installed and both CPUs are ours to use."""
    missing = [t for t in (args.nginx, "wrk", "taskset") if not shutil.which(t)]
    if missing:
        raise BenchFailed(f"missing {', '.join(missing)}: run bench/setup.sh")
    allowed = os.sched_getaffinity(0)
    wanted = {args.proxy_cpu, args.load_cpu}
    if len(wanted) != 2 or not wanted <= allowed:
        raise BenchFailed(f"need two distinct CPUs from {sorted(allowed)} for --proxy-cpu "
                          f"and --load-cpu, got {args.proxy_cpu} and {args.load_cpu}")


# --- one target ---------------------------------------------------------------------------

def fetch(port: int, headers: Sequence[str] = ()) -> tuple[int, bytes]:
    """One plain GET / with the benchmark's Host header (and C{headers}); (status, body)."""
    conn = http.client.HTTPConnection(procs.LOOPBACK, port, timeout=2)
    fields = dict(header.split(":", 1) for header in headers)
    try:
        conn.request("GET", "/", headers={"Host": targets.HOST} | {k.strip(): v.strip() for k, v in fields.items()})
        response = conn.getresponse()
        body = response.read()
        if response.getheader("Content-Encoding") == "gzip":  # --gzip: the body must still be the backend's
            body = gzip.decompress(body)
        return response.status, body
    finally:
        conn.close()


def wait_until_proxied(proc: procs.Proc, port: int, timeout: float, headers: Sequence[str] = ()) -> None:
    """Poll until GET / answers 200 with the backend's body (routes may load after listening)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise procs.StartError(f"{proc.name} exited with code {proc.popen.returncode}; "
                                   f"its output:\n{proc.tail()}")
        try:
            status, body = fetch(port, headers)
        except (OSError, http.client.HTTPException) as e:
            last = f"{type(e).__name__}: {e}"
        else:
            if status == 200 and body == targets.BODY:
                return
            last = f"HTTP {status} {body[:200]!r}"
        time.sleep(0.1)
    raise procs.StartError(f"{proc.name} on 127.0.0.1:{port} did not return 200 {targets.BODY!r} "
                           f"for Host {targets.HOST} within {timeout:.0f} s (last: {last}); "
                           f"its output:\n{proc.tail()}")


def run_wrk(args: argparse.Namespace, port: int, seconds: int) -> wrk.WrkResult:
    """wrk against 127.0.0.1:port on the load CPU."""
    result, _ = wrk.run(f"http://{procs.LOOPBACK}:{port}/", targets.HOST, seconds,
                        args.connections, args.threads, args.load_cpu, args.header)
    return result


def measure(args: argparse.Namespace, name: str, proc: procs.Proc, port: int) -> TargetResult:
    """Check that the target answers correctly, warm it up, then take the measured run."""
    print(f"==> {name}: checking, warming up {args.warmup} s, measuring {args.duration} s",
          flush=True)
    wait_until_proxied(proc, port, args.start_timeout, args.header)
    out = TargetResult(name)
    if args.warmup:
        out.warmup_errors = run_wrk(args, port, args.warmup).errors
    before, used_before = cpuload.cpu_times(), cpuload.group_cpu_seconds(proc.pid)
    own_before = cpuload.process_cpu_seconds(proc.pid)
    out.result = run_wrk(args, port, args.duration)
    cpus = [args.proxy_cpu, args.load_cpu]
    out.cpu_busy = cpuload.busy_percent(before, cpuload.cpu_times(), cpus)
    out.target_cpu_seconds = round(cpuload.group_cpu_seconds(proc.pid) - used_before, 2)
    out.main_process_cpu_seconds = round(cpuload.process_cpu_seconds(proc.pid) - own_before, 2)
    if proc.popen.poll() is not None:
        out.failure = f"{proc.name} exited during the run; its output:\n{proc.tail()}"
    return out


# --- the run ------------------------------------------------------------------------------

class Bench(Harness):
    """The HTTP comparison: direct backend, nginx proxy, twingress."""

    def __init__(self, args: argparse.Namespace, stack: ExitStack, workdir: Path) -> None:
        super().__init__(args, stack, workdir)
        self.background: dict[str, float] = {}

    @property
    def proxy_cpus(self) -> str:
        """taskset's list for the proxy under test: N CPUs from --proxy-cpu (they may include --load-cpu)."""
        if self.args.proxy_cpu_list:
            return str(self.args.proxy_cpu_list)
        count = os.cpu_count() or 1
        return ",".join(str((self.args.proxy_cpu + i) % count) for i in range(self.args.workers))

    def twingress(self, port: int, backend_port: int) -> procs.Proc:
        manifests = self.workdir / "manifests"
        annotations = dict(item.replace("{backend_port}", str(backend_port)).split("=", 1) for item in self.args.annotation)
        canary = dict(item.split("=", 1) for item in self.args.canary_annotation) if self.args.canary_annotation else None
        targets.write_manifests(manifests, backend_port, annotations, canary)
        if self.args.gateway:
            targets.gateway_manifests(manifests, port)
        if self.args.gzip:
            (manifests / "gzip-config.yaml").write_text(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bench-gzip, namespace: default}\n"
                "data: {use-gzip: 'true', gzip-types: text/plain}\n"
            )
        for number, extra in enumerate(self.args.manifest):
            text = extra.read_text().replace("{backend_port}", str(backend_port))
            (manifests / f"extra-{number}.yaml").write_text(text)
        argv = targets.twingress_argv(self.args.twingress_cmd, Path(sys.prefix) / "bin",
                                      manifests, port, backend_port)
        env = twingress_env()
        if self.args.workers > 1:
            argv += ["--workers", str(self.args.workers)]
        if self.args.gzip:
            argv += ["--nginx-configmap", "default/bench-gzip"]
        return self.spawn(TWINGRESS, argv, port, self.proxy_cpus, env=env)

    def proxy_run(self, name: str, backend_port: int) -> TargetResult:
        """Start one proxy on the proxy CPU, measure it, stop it (so runs never overlap)."""
        port = procs.free_port()
        try:
            if name == NGINX:
                conf = targets.proxy_conf(self.workdir, port, backend_port, self.args.workers, targets.GZIP_NGINX if self.args.gzip else "")
                proc = self.nginx(NGINX, conf, port, self.proxy_cpus)
            else:
                proc = self.twingress(port, backend_port)
            try:
                return measure(self.args, name, proc, port)
            finally:
                procs.stop(proc)
        except (procs.StartError, wrk.WrkError) as e:
            return TargetResult(name, failure=str(e))

    def run(self) -> list[TargetResult]:
        """Backend up for the whole run; then direct, nginx-proxy and twingress in turn."""
        cpus = [self.args.proxy_cpu, self.args.load_cpu]
        self.background = cpuload.wait_for_idle(cpus, IDLE_LIMIT, self.args.wait_idle)
        backend_port = procs.free_port()
        backend = self.nginx("backend", targets.backend_conf(self.workdir, backend_port),
                             backend_port, self.args.load_cpu)
        results = [measure(self.args, DIRECT, backend, backend_port)]
        results.append(self.proxy_run(NGINX, backend_port))
        if not self.args.skip_twingress:
            results.append(self.proxy_run(TWINGRESS, backend_port))
        if backend.popen.poll() is not None:
            raise BenchFailed(f"the backend exited during the run:\n{backend.tail()}")
        return results

def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.body_size:
        targets.set_body_size(args.body_size)
    if args.gzip:
        args.header.append("Accept-Encoding: gzip")
    install_signal_handlers()
    try:
        check_environment(args)
    except BenchFailed as e:
        print(f"FAILED {e}", file=sys.stderr)
        return 1
    results, bench, status = run_in_workdir(args, "twbench-", Bench, lambda bench: bench.run(), (BenchFailed, procs.StartError, wrk.WrkError))
    if results is None or bench is None:
        return status
    return finish(results, args, bench.background)  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
