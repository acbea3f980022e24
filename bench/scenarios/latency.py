"""
Latency: what twingress adds to an HTTP/1.1 keep-alive request.  wrk drives, in turn and never at
once, the backend directly, nginx configured as an ingress, and twingress (each proxy on the proxy
CPUs, the backend and wrk on the load CPUs): req/s as a ratio to nginx's, the p50 and p99 added
over going direct, and CPU per request of the proxy's process group (and of its primary alone).

C{--annotation KEY=VALUE} (with C{--manifest FILE} and C{--header}) measures what a route's policy
costs: bench/guards/basic-auth.yaml is basic auth's Secret.  twingress logs its access lines (to
its log) as a deployment does, unless C{--access-log off}.
"""

from __future__ import annotations

import argparse
import http.client
import time
from pathlib import Path
from typing import Any, Optional

from bench.lib import cpu, procs, site, wrk
from bench.lib.load import HOST
from bench.scenarios import Run

NAME = "latency"
QUESTION = "What does twingress add to an HTTP/1.1 request (req/s as a ratio to nginx, p50/p99 added over going direct)?"
AGAINST = ("nginx",)
TOOLS = ("wrk", "nginx")
DIRECT, NGINX, TWINGRESS = "direct", "nginx", "twingress"
BODY = b"hello world\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=int, default=10, help="measured seconds per target (10)")
    p.add_argument("--warmup", type=int, default=3, help="seconds of load before each measured one (3)")
    p.add_argument("--connections", type=int, default=32, help="wrk -c (32)")
    p.add_argument("--annotation", action="append", default=[], metavar="KEY=VALUE",
                   help="an annotation on the route's Ingress, to measure a route policy (repeatable)")
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="a header field on every request, to every target (repeatable: basic auth's Authorization, say)")
    p.add_argument("--manifest", action="append", default=[], type=Path, metavar="FILE",
                   help="a YAML file of more objects for twingress (an auth Secret, say); {backend_port} in it is the backend's port")
    p.add_argument("--access-log", choices=("on", "off"), default="on", help="twingress's access log, to its log file (on)")


def check(args: argparse.Namespace) -> str:
    """What is wrong with the options, or ''."""
    if any(a not in AGAINST for a in args.against):
        return f"--against: only {', '.join(AGAINST)} (nginx always runs: the ratio is to it)"
    if args.seconds < 1 or args.warmup < 0 or args.connections < 1:
        return "--seconds and --connections at least 1, --warmup at least 0"
    if any("=" not in a for a in args.annotation) or any(":" not in h for h in args.header):
        return "--annotation KEY=VALUE, --header 'NAME: VALUE'"
    unprefixed = [a.split("=", 1)[0] for a in args.annotation if "/" not in a.split("=", 1)[0]]
    if unprefixed:  # twingress reads only prefixed keys: an unprefixed one would measure an unguarded route
        return f"--annotation: {', '.join(unprefixed)} has no prefix (twingress.io/ or nginx.ingress.kubernetes.io/), so no route would read it"
    missing = [str(path) for path in args.manifest if not path.is_file()]
    return f"--manifest: no such file {', '.join(missing)}" if missing else ""


def fetch(port: int, headers: list[str]) -> tuple[int, bytes]:
    """One GET / with the route's Host (and C{headers}): (status, body)."""
    conn = http.client.HTTPConnection(procs.LOOPBACK, port, timeout=2)
    fields = {name.strip(): value.strip() for name, value in (h.split(":", 1) for h in headers)}
    try:
        conn.request("GET", "/", headers={"Host": HOST} | fields)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def proxied(run: Run, proc: procs.Proc, port: int) -> None:
    """Until GET / answers 200 with the backend's body (routes load after the port listens), or L{BenchFailed}."""
    deadline, last = time.monotonic() + run.args.start_timeout, "no answer"
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise procs.BenchFailed(f"{proc.name} exited with code {proc.popen.returncode}:\n{proc.tail()}")
        try:
            status, body = fetch(port, run.args.header)
        except (OSError, http.client.HTTPException) as e:
            last = f"{type(e).__name__}: {e}"
        else:
            if status == 200 and body == BODY:
                return
            last = f"HTTP {status} {body[:200]!r}"
        time.sleep(0.1)
    raise procs.BenchFailed(f"{proc.name} did not answer 200 {BODY!r} within {run.args.start_timeout:.0f} s (last: {last}):\n{proc.tail()}")


def measure(run: Run, name: str, proc: procs.Proc, port: int) -> dict[str, Any]:
    """Checked, warmed, measured: one row (wrk's figures, the CPU of the process group and of its first process)."""
    args = run.args
    proxied(run, proc, port)
    url = f"http://{procs.LOOPBACK}:{port}/"
    warm_errors = wrk.run(url, HOST, args.warmup, args.connections, run.load_cpus, args.header).errors if args.warmup else 0
    group0, own0 = cpu.group_user_system(proc.pid), cpu.user_system_seconds(proc.pid)
    result = wrk.run(url, HOST, args.seconds, args.connections, run.load_cpus, args.header)
    group1, own1 = cpu.group_user_system(proc.pid), cpu.user_system_seconds(proc.pid)
    if result.errors or warm_errors:
        raise procs.BenchFailed(f"{name}: {result.non_2xx} non-2xx/3xx, socket errors {result.socket_errors}, {warm_errors} in the warm-up")
    requests = result.requests or 1
    return {"target": name, "rps": round(result.rps), "p50_ms": result.percentiles_ms["50"], "p99_ms": result.percentiles_ms["99"],
            "cpu_us": round(1e6 * (sum(group1) - sum(group0)) / requests, 2),
            "main_process_cpu_us": round(1e6 * (sum(own1) - sum(own0)) / requests, 2), "wrk": result.to_json()}


def start_proxy(run: Run, name: str, backends: site.Backends) -> site.Listening:
    args = run.args
    if name == NGINX:
        return site.nginx(run.children, NGINX, backends, run.proxy_cpus, args.workers)
    annotations = dict(item.split("=", 1) for item in args.annotation)
    extra = {f"extra-{n}.yaml": path.read_text().replace("{backend_port}", str(backends.http_port)) for n, path in enumerate(args.manifest)}
    log = ["--access-log", "-"] if args.access_log == "on" else []
    return site.twingress(run.children, TWINGRESS, site.Checkout(site.REPO), backends, run.proxy_cpus, args.workers,
                          log, annotations, extra)


def run(run: Run) -> list[dict[str, Any]]:
    backends = site.start_backends(run.children, run.load_cpus)
    rows = []
    assert backends.proc is not None
    for name in (DIRECT, NGINX, TWINGRESS):
        try:
            if name == DIRECT:
                rows.append(measure(run, name, backends.proc, backends.http_port))
                continue
            listening = start_proxy(run, name, backends)
            try:
                rows.append(measure(run, name, listening.proc, listening.http_port))
            finally:
                procs.stop(listening.proc)
        except procs.BenchFailed as e:
            run.failed(f"{name}", e)
            continue
        run.say(line(rows[-1], rows))
    return derive(rows)


def derive(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's ratio of req/s to nginx's and its p50/p99 added over going direct."""
    by = {row["target"]: row for row in rows}
    for row in rows:
        if NGINX in by:
            row["ratio_to_nginx"] = round(row["rps"] / by[NGINX]["rps"], 3) if by[NGINX]["rps"] else None
        if DIRECT in by and row["target"] != DIRECT:
            row["added_p50_ms"] = round(row["p50_ms"] - by[DIRECT]["p50_ms"], 3)
            row["added_p99_ms"] = round(row["p99_ms"] - by[DIRECT]["p99_ms"], 3)
    return rows


def line(row: dict[str, Any], rows: Optional[list[dict[str, Any]]] = None) -> str:
    ratio = f" {row['ratio_to_nginx']:.2f}x nginx" if row.get("ratio_to_nginx") is not None else ""
    added = f", +{row['added_p50_ms']:.2f}/+{row['added_p99_ms']:.2f} ms p50/p99 over direct" if "added_p50_ms" in row else ""
    return (f"{row['target']:<10} {row['rps']:>8,} req/s{ratio}, p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms{added}, "
            f"{row['cpu_us']:.1f} us CPU per request ({row['main_process_cpu_us']:.1f} in its first process)")


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
