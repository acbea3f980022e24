#!/usr/bin/env python3
"""
Side by side with the peers (issue 32, target 4): the CPU per request of twingress, Traefik v3,
Caddy 2 and nginx over HTTP/1.1, HTTPS/1.1 keep-alive and h2 over TLS, in one run.

A user choosing an ingress proxy compares it with the proxies they would pick instead, not
only with nginx: this puts the two Go peers next to the existing rows, measured the same way.
Each proxy in turn (never two at a time) is pinned to the proxy CPU, the Go ones with
GOMAXPROCS=1, keep-alive to the same nginx backend (the HTTP bench's, on the load CPU), and the
same access logging for all: none (C{--access-log off}, how the peers ship), or each proxy's
own lines to a file (C{--access-log on}, checked to hold a line per request); the load is the other benches' (wrk for HTTP/1.1 and HTTPS/1.1, h2load for h2) with
the same flags, and the TLS proxies serve the same ECDSA P-256 certificate.  Before its
measured run every proxy must answer the backend's body, over TLS with our certificate, and
for h2 after negotiating h2 by ALPN.  The measure is CPU us per request of the proxy's process
group (cpuload.py).  Traefik and Caddy are built by bench/peers.sh.  See bench/README.md.

With C{--rounds N} the whole sequence runs N times, the proxies' order reversed every other
round (A B C, C B A, ...), and the report adds each proxy's median and, per protocol, in how
many rounds twingress was below every peer.  On a guest whose speed moves by a fifth from one
minute to the next (bench/README.md, twelfth session on), one run's rows, taken minutes apart,
compare the machine as much as the proxies; rows next to each other in a round, in both
orders, and the medians over the rounds compare the proxies.

Run with the project venv::

    bench/peers.sh
    .venv/bin/python bench/legacy/peers_bench.py [--duration 10] [--rounds 1] [--proxies twingress,traefik,caddy,nginx] [--json PATH]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import cpuload  # noqa: E402
import h2_bench  # noqa: E402
import http_bench  # noqa: E402
import procs  # noqa: E402
import targets  # noqa: E402
import tls_bench  # noqa: E402
import tls_handshakes  # noqa: E402
import wrk  # noqa: E402
from h2_bench import Row  # noqa: E402
from harness import install_signal_handlers, run_in_workdir, twingress_env  # noqa: E402
from report import IDLE_LIMIT, REPO, environment, interpreter, write_and_exit_status  # noqa: E402

NGINX, TRAEFIK, CADDY, TWINGRESS = "nginx", "traefik", "caddy", "twingress"
PROXIES = (NGINX, TRAEFIK, CADDY, TWINGRESS)
PEERS = (TRAEFIK, CADDY)
HTTP, HTTPS, H2 = "http/1.1", "https/1.1", "h2"
KINDS = (HTTP, HTTPS, H2)
PEERS_SH = REPO / "bench" / "peers.sh"
# Idle upstream connections each proxy may keep: h2_bench's nginx and twingress keep 320 (32
# connections x 10 streams in flight); the Go peers' defaults are lower (Traefik 200, Caddy 32),
# and a proxy that closes upstream connections it will need again pays for it in CPU.
UPSTREAM_IDLE = 320
ACCESS_LOG_CHOICES = ("off", "on")
NGINX_NO_ACCESS_LOG = "access_log off;"


class BenchFailed(RuntimeError):
    """The harness cannot go on (a tool or a peer binary missing), or a target answered wrongly."""


# --- the peers' configurations ----------------------------------------------------------

def traefik_argv(binary: Path, workdir: Path, port: int, backend_port: int, tls: bool,
                 access_log: Optional[Path] = None) -> list[str]:
    """Traefik with one entry point and a file-provider dynamic config: one router for every
    request to the backend (nginx's C{location /}), the bench certificate when C{tls}, its
    access log (common log format, unbuffered: its defaults) in C{access_log} if given.

    Access logs, the API, the dashboard and metrics are off unless configured; HTTP/2 is on by
    default over TLS, HTTP/3 is not.
    """
    dynamic = workdir / f"traefik-{'tls' if tls else 'http'}.json"
    router: dict[str, Any] = {"rule": "PathPrefix(`/`)", "entryPoints": ["bench"], "service": "bench"}
    config: dict[str, Any] = {"http": {
        "routers": {"bench": router},
        "services": {"bench": {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{backend_port}"}],
                                                "passHostHeader": True}}}}}
    if tls:
        router["tls"] = {}
        pair = {"certFile": str(workdir / "bench.crt"), "keyFile": str(workdir / "bench.key")}
        config["tls"] = {"certificates": [pair], "stores": {"default": {"defaultCertificate": pair}}}
    dynamic.write_text(json.dumps(config, indent=2))
    return [str(binary),
            f"--entryPoints.bench.address=127.0.0.1:{port}",
            f"--providers.file.filename={dynamic}", "--providers.file.watch=false",
            f"--serversTransport.maxIdleConnsPerHost={UPSTREAM_IDLE}",
            "--global.checkNewVersion=false", "--global.sendAnonymousUsage=false",
            "--log.level=ERROR"] + (["--accesslog=true", f"--accesslog.filePath={access_log}"] if access_log else [])


def caddy_argv(binary: Path, workdir: Path, port: int, backend_port: int, tls: bool,
               access_log: Optional[Path] = None) -> list[str]:
    """Caddy from a Caddyfile: one site on C{port} for any host, reverse_proxy to the backend,
    the bench certificate by C{tls cert key} when C{tls}, its access log (JSON lines, its default)
    in C{access_log} by a C{log} directive if given.

    The admin API, automatic HTTPS and the saved config are off; HTTP/3 (QUIC) is off so that
    h2 is the TLS protocol measured; there is no access log without a C{log} directive.
    """
    scheme = "https" if tls else "http"
    tls_line = f"tls {workdir / 'bench.crt'} {workdir / 'bench.key'}" if tls else ""
    log_lines = f"log {{\n        output file {access_log}\n    }}" if access_log else ""
    caddyfile = workdir / f"Caddyfile-{scheme}"
    caddyfile.write_text(f"""{{
    admin off
    auto_https off
    persist_config off
    servers {{
        protocols h1 h2
    }}
}}

{scheme}://:{port} {{
    bind 127.0.0.1
    {tls_line}
    {log_lines}
    reverse_proxy 127.0.0.1:{backend_port} {{
        transport http {{
            keepalive_idle_conns {UPSTREAM_IDLE}
            keepalive_idle_conns_per_host {UPSTREAM_IDLE}
        }}
    }}
}}
""")
    return [str(binary), "run", "--config", str(caddyfile), "--adapter", "caddyfile"]


def go_env(workdir: Path) -> dict[str, str]:
    """One OS thread running Go code (the peers' equivalent of one nginx worker), and a home of
    their own so that nothing is read from or written to the user's."""
    home = workdir / "go-home"
    home.mkdir(exist_ok=True)
    return dict(os.environ) | {"GOMAXPROCS": "1", "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
                               "XDG_CONFIG_HOME": str(home / "config")}


def peer_paths(args: argparse.Namespace) -> dict[str, Path]:
    """The peers' binaries: --traefik/--caddy, else where bench/peers.sh builds them.

    A peer asked for and not built stops the run: a comparison without it is not the one asked for.
    """
    wanted = [name for name in args.proxies if name in PEERS]
    given = {name: getattr(args, name) for name in wanted if getattr(args, name)}
    if len(given) < len(wanted):
        done = subprocess.run(["bash", str(PEERS_SH), "--print-path"], capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchFailed(f"bench/peers.sh --print-path failed:\n{done.stderr}")
        built = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
        given = {name: Path(built[name]) for name in wanted} | given
    missing = [f"{name} ({path})" for name, path in given.items() if not os.access(path, os.X_OK)]
    if missing:
        raise BenchFailed(f"not built: {', '.join(missing)}: run bench/peers.sh (or give --traefik/--caddy)")
    return {name: Path(path) for name, path in given.items()}


def peer_version(name: str, binary: Path) -> str:
    """What the binary says it is (C{traefik version}, C{caddy version})."""
    done = subprocess.run([str(binary), "version"], capture_output=True, text=True, timeout=30)
    text = (done.stdout or done.stderr).strip()
    if name == TRAEFIK:  # "Version:      v3.6.12" among other lines
        return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Version:")), text)
    return text.split()[0] if text else "?"


def twingress_build() -> dict[str, str]:
    """Which twingress the run measures: its request path mypyc-compiled or not (setup.py
    build_ext), and the HTTP/2 stack compiled or not (h2stack.py), as twingress would import them."""
    done = subprocess.run([sys.executable, "-c", "import h2.connection, ingress.proxy.message.h1 as h1; "
                           "print(h1.__file__); print(h2.connection.__file__)"],
                          capture_output=True, text=True, env=twingress_env(), cwd=REPO, timeout=60)
    if done.returncode != 0:
        raise BenchFailed(f"cannot import twingress:\n{done.stderr}")
    ingress_file, h2_file = done.stdout.split()
    return {"ingress": "compiled" if ingress_file.endswith(".so") else "pure",
            "h2_stack": "compiled" if h2_file.endswith(".so") else "pure", "python": interpreter()}


# --- checks -----------------------------------------------------------------------------

def h2_get(port: int, sha256: str) -> str:
    """One GET / over a fresh TLS connection offering h2 and http/1.1 by ALPN (SNI as wrk and
    h2load send it), then one with curl --http2: "" when the proxy chose h2, served our
    certificate and answered 200 with the backend's body over HTTP/2, else what was wrong."""
    ctx = tls_handshakes.client_context(None)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    conn = tls_handshakes.handshake(ctx, port, tls_bench.WRK_SNI, timeout=3.0)
    try:
        alpn, served = conn.selected_alpn_protocol(), tls_handshakes.describe(conn)["cert_sha256"]
    finally:
        conn.close()
    if alpn != "h2":
        return f"ALPN chose {alpn!r}, not 'h2'"
    if served != sha256:
        return f"served certificate {served[:16]} is not ours ({sha256[:16]})"
    url = f"https://{tls_bench.WRK_SNI}:{port}/"
    done = subprocess.run(["curl", "-sS", "-k", "--http2", "--max-time", "5", "--resolve", f"{tls_bench.WRK_SNI}:{port}:127.0.0.1",
                           "-H", f"Host: {targets.HOST}", "-w", "\n%{http_version} %{response_code}", url],
                          capture_output=True, timeout=10)
    body, _, trailer = done.stdout.rpartition(b"\n")
    if done.returncode != 0 or trailer != b"2 200" or body != targets.BODY:
        return f"curl --http2: exit {done.returncode}, HTTP version and status {trailer!r}, body {body[:200]!r} {done.stderr[-300:]!r}"
    return ""


def wait_until_h2(proc: procs.Proc, port: int, sha256: str, timeout: float) -> None:
    """Poll L{h2_get} until it passes; raise L{procs.StartError} with the last reason if it never does."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise procs.StartError(f"{proc.name} exited with code {proc.popen.returncode}; its output:\n{proc.tail()}")
        try:
            last = h2_get(port, sha256)
        except (OSError, subprocess.TimeoutExpired) as e:
            last = f"{type(e).__name__}: {e}"
        if not last:
            return
        time.sleep(0.2)
    raise procs.StartError(f"{proc.name} on 127.0.0.1:{port}: no h2 answer with our certificate and body within "
                           f"{timeout:.0f} s (last: {last}); its output:\n{proc.tail()}")


# --- the run ----------------------------------------------------------------------------

class Bench(h2_bench.Bench):
    """h2_bench's processes and measurements (and tls_bench's under them), over four proxies."""

    def __init__(self, args: argparse.Namespace, stack: ExitStack, workdir: Path) -> None:
        super().__init__(args, stack, workdir)
        self.peers: dict[str, Path] = args.peer_paths
        self.cert: Optional[tls_bench.Cert] = None
        self.negotiated: dict[str, str] = {}  # "kind proxy": TLS version and cipher of the check

    def start(self, proxy: str, kind: str, port: int, backend_port: int) -> procs.Proc:
        """One proxy on the proxy CPU, configured for C{kind} (plain HTTP, or TLS with h2 by ALPN)."""
        tls = kind != HTTP
        cpu = self.args.proxy_cpu
        access_log = self.access_log(proxy, kind)
        if proxy == NGINX:
            if tls:
                return self.nginx(tls_bench.NGINX_TLS, self.nginx_logging(h2_bench.nginx_h2_conf(self.workdir, port, backend_port), access_log), port, cpu)
            return self.nginx("nginx-proxy", self.nginx_logging(targets.proxy_conf(self.workdir, port, backend_port), access_log), port, cpu)
        name = f"{proxy}-{'tls' if tls else 'http'}"
        logging = ["--access-log", str(access_log) if access_log else "off"]
        if proxy == TWINGRESS:
            if tls:
                assert self.cert is not None
                manifests = self.workdir / "manifests-tls"
                tls_bench.write_manifests(manifests, backend_port, [
                    tls_bench.secret(tls_bench.SECRET, self.cert),
                    tls_bench.tls_ingress("bench-tls", [targets.HOST, tls_bench.WRK_SNI], tls_bench.SECRET)], False)
                admin_port = procs.free_port()
                proc = self.twingress(name, manifests, port, admin_port, logging)
                tls_bench.wait_for_table(proc, admin_port, 2, self.args.start_timeout)
                return proc
            manifests = self.workdir / "manifests"
            targets.write_manifests(manifests, backend_port)
            argv = targets.twingress_argv(targets.DEFAULT_TWINGRESS_CMD, Path(sys.prefix) / "bin", manifests, port, backend_port)
            return self.spawn(name, argv + logging, port, cpu, env=twingress_env())
        make = traefik_argv if proxy == TRAEFIK else caddy_argv
        return self.spawn(name, make(self.peers[proxy], self.workdir, port, backend_port, tls, access_log), port, cpu,
                          env=go_env(self.workdir))

    def access_log(self, proxy: str, kind: str) -> Optional[Path]:
        """The file C{proxy} writes its access lines to in C{kind}'s row with C{--access-log on}
        (not a C{*.log}: keep_logs would copy it), else None."""
        if self.args.access_log == "off":
            return None
        return self.workdir / f"{proxy}-{kind.replace('/', '')}.access"

    @staticmethod
    def nginx_logging(conf: str, access_log: Optional[Path]) -> str:
        """C{conf} (access_log off, as every nginx of the benches) logging to C{access_log} if given
        (the combined format, unbuffered: nginx's defaults)."""
        if access_log is None:
            return conf
        if conf.count(NGINX_NO_ACCESS_LOG) != 1:
            raise BenchFailed(f"the nginx config changed: no single {NGINX_NO_ACCESS_LOG!r} to log to {access_log} instead")
        return conf.replace(NGINX_NO_ACCESS_LOG, f"access_log {access_log};")

    def unlogged(self, proxy: str, kind: str, requests: int) -> Optional[str]:
        """With C{--access-log on}, what is wrong unless C{proxy} wrote a line for each of the C{requests}
        measured (the warm-up's and the checks' come on top): logging fewer would not be the same work.
        Removes the log: the next row's lines are counted alone."""
        path = self.access_log(proxy, kind)
        if path is None:
            return None
        written = count_lines(path)
        path.unlink(missing_ok=True)
        return f"access log {path.name}: {written} lines for {requests} requests" if written < requests else None

    def http_row(self, proc: procs.Proc, port: int, proxy: str) -> Row:
        """http_bench's measurement (it checks the body first) as a row of this table."""
        measured = http_bench.measure(self.args, f"{HTTP} {proxy}", proc, port)
        row = Row(HTTP, proxy, failure=measured.failure)
        if measured.result is not None:
            result = measured.result
            row.rps, row.requests = result.rps, result.requests
            row.failed = result.errors + measured.warmup_errors
            row.mean_latency = f"{result.p('50'):.2f}ms(p50)"
            if measured.target_cpu_seconds is not None and result.requests:
                row.cpu_us = round(1e6 * measured.target_cpu_seconds / result.requests, 1)
            row.cpu_busy = measured.cpu_busy
            if row.failed and not row.failure:
                row.failure = f"{result.non_2xx} non-2xx/3xx, socket errors {result.socket_errors}, {measured.warmup_errors} in warm-up"
        return row

    def row(self, proxy: str, kind: str, backend_port: int) -> Row:
        """Start C{proxy} for C{kind}, check it answers rightly, measure it, stop it; then check its access log."""
        self.unlogged(proxy, kind, 0)  # a failed row's lines, if any
        row = self.measured_row(proxy, kind, backend_port)
        unlogged = self.unlogged(proxy, kind, row.requests)
        row.failure = row.failure or unlogged
        return row

    def measured_row(self, proxy: str, kind: str, backend_port: int) -> Row:
        """Start C{proxy} for C{kind}, check it answers rightly, measure it, stop it."""
        assert self.cert is not None
        port = procs.free_port()
        try:
            proc = self.start(proxy, kind, port, backend_port)
            try:
                if kind == HTTP:
                    return self.http_row(proc, port, proxy)
                seen = tls_bench.wait_until_served(proc, port, {targets.HOST: self.cert.sha256, tls_bench.WRK_SNI: self.cert.sha256},
                                                   self.args.start_timeout)
                info = seen[tls_bench.WRK_SNI]
                self.negotiated[f"{kind} {proxy}"] = f"{info['version']} {info['cipher']}"
                if kind == HTTPS:
                    row = self.keepalive_row(proc, port, proxy)
                    if row.failed and not row.failure:
                        row.failure = f"{row.failed} failed requests"
                    return row
                wait_until_h2(proc, port, self.cert.sha256, self.args.start_timeout)
                return self.measured(Row(H2, proxy), proc, f"https://{tls_bench.WRK_SNI}:{port}/", targets.HOST, grpc=False)
            finally:
                procs.stop(proc)
        except (procs.StartError, wrk.WrkError, tls_bench.BenchFailed, h2_bench.BenchFailed,
                OSError, http.client.HTTPException, subprocess.TimeoutExpired) as e:
            return Row(kind, proxy, failure=str(e))

    def start_backend(self) -> tuple[procs.Proc, int]:
        """The certificate every TLS proxy serves (workdir's bench.crt and bench.key), and the
        backend on the load CPU: (the backend, its port)."""
        self.cert = tls_bench.make_cert(tls_bench.make_key("ecdsa"), [targets.HOST, tls_bench.WRK_SNI])
        (self.workdir / "bench.crt").write_bytes(self.cert.cert_pem)
        (self.workdir / "bench.key").write_bytes(self.cert.key_pem)
        backend_port = procs.free_port()
        return self.nginx("backend", targets.backend_conf(self.workdir, backend_port), backend_port, self.args.load_cpu), backend_port

    def run_rounds(self) -> list[list[Row]]:
        """The backend up for the whole run; then each round's rows (see L{round_order})."""
        backend, backend_port = self.start_backend()
        rounds = []
        for number in range(self.args.rounds):
            order = round_order(self.args.proxies, number)
            print(f"==> round {number + 1} of {self.args.rounds}: {', '.join(order)}", flush=True)
            rounds.append([self.row(proxy, kind, backend_port) for kind in self.args.kinds for proxy in order])
            if backend.popen.poll() is not None:
                raise BenchFailed(f"the backend exited during the run:\n{backend.tail()}")
        return rounds


def count_lines(path: Path) -> int:
    """The number of lines in C{path} (0 if there is none), read in chunks: a log of a run can be large."""
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def round_order(proxies: Sequence[str], number: int) -> list[str]:
    """Round C{number}'s order (from 0): protocol by protocol, the proxies as given, reversed in odd rounds,
    so that no proxy always runs first, when the guest has just been idle, or last."""
    return list(proxies) if number % 2 == 0 else list(reversed(proxies))


# --- report -----------------------------------------------------------------------------

def verdicts(rows: list[Row]) -> dict[str, Optional[bool]]:
    """Per protocol: is twingress's CPU per request below every peer's measured in this run (None: not all measured)?"""
    out: dict[str, Optional[bool]] = {}
    for kind in dict.fromkeys(row.kind for row in rows):
        cpu = {row.target: row.cpu_us for row in rows if row.kind == kind and not row.failure}
        peers = [cpu.get(name) for name in PEERS if any(r.kind == kind and r.target == name for r in rows)]
        mine = cpu.get(TWINGRESS)
        out[kind] = None if mine is None or not peers or None in peers else all(mine < p for p in peers if p is not None)
    return out


def across_rounds(rounds: list[list[Row]], row: Row) -> list[Row]:
    """C{row}'s protocol and proxy in every round, in round order."""
    return [r for one in rounds for r in one if r.kind == row.kind and r.target == row.target]


def measured(rows: list[Row]) -> list[Row]:
    """The rows that gave a CPU figure (neither failed nor unmeasured): what a median is of."""
    return [r for r in rows if not r.failure and r.cpu_us is not None]


def medians(rounds: list[list[Row]]) -> list[Row]:
    """One row per protocol and proxy, in the first round's order (protocol by protocol): the median
    CPU per request and req/s of the rounds where it did not fail (a failure if it failed in every round)."""
    out = []
    for row in rounds[0]:
        same = across_rounds(rounds, row)
        good = measured(same)
        median = Row(row.kind, row.target, failed=sum(r.failed for r in same))
        if good:
            median.cpu_us = round(statistics.median(r.cpu_us for r in good if r.cpu_us is not None), 1)
            median.rps = statistics.median(r.rps or 0.0 for r in good)
        else:
            median.failure = "; ".join(dict.fromkeys(r.failure or "no CPU figure" for r in same))
        out.append(median)
    return out


def rounds_below(rounds: list[list[Row]]) -> dict[str, list[Optional[bool]]]:
    """Per protocol, round by round: was twingress below every peer measured in that round?"""
    out: dict[str, list[Optional[bool]]] = {}
    for one in rounds:
        for kind, verdict in verdicts(one).items():
            out.setdefault(kind, []).append(verdict)
    return out


def round_table(rounds: list[list[Row]], summary: list[Row]) -> str:
    """Each protocol and proxy's CPU per request in every round (µs), and its median (C{summary})."""
    lines = [f"{'kind':<10} {'target':<10} {'CPU/req by round (us)':<40} median"]
    for row in summary:
        shown = ", ".join("-" if r.cpu_us is None else f"{r.cpu_us:.1f}" for r in across_rounds(rounds, row))
        lines.append(f"{row.kind:<10} {row.target:<10} {shown:<40} {'-' if row.cpu_us is None else f'{row.cpu_us:.1f}'}")
    return "\n".join(lines)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a run with the peers (this bench's, mix_bench.py's): the peers' binaries, then h2_bench's."""
    p.add_argument("--traefik", type=Path, help="Traefik binary (default: where bench/peers.sh builds it)")
    p.add_argument("--caddy", type=Path, help="Caddy binary (default: where bench/peers.sh builds it)")
    p.add_argument("--access-log", choices=ACCESS_LOG_CHOICES, default="off",
                   help="off: no proxy writes an access log (the peers' default); on: each writes its own to a file (off)")
    h2_bench.add_run_arguments(p)


def distinct_names(p: argparse.ArgumentParser, flag: str, value: str, allowed: Sequence[str]) -> list[str]:
    """A comma-separated option's names, each one of C{allowed} and none twice (else the usage error)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names or set(names) - set(allowed) or len(set(names)) != len(names):
        p.error(f"{flag}: distinct names from {', '.join(allowed)}")
    return names


def check_cpus(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The proxy and the load need two distinct CPUs this process may use."""
    if args.proxy_cpu == args.load_cpu or not {args.proxy_cpu, args.load_cpu} <= os.sched_getaffinity(0):
        p.error("need two distinct usable CPUs for --proxy-cpu and --load-cpu")


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per row (10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per row (3)")
    p.add_argument("--connections", type=int, default=32, help="wrk -c and h2load -c (32)")
    p.add_argument("--streams", type=int, default=10, help="h2load -m: concurrent streams per connection (10)")
    p.add_argument("--threads", type=int, default=1, help="wrk -t (1)")
    p.add_argument("--proxies", default=",".join(PROXIES),
                   help="the proxies to measure, in this order within each protocol (%(default)s)")
    p.add_argument("--kinds", default=",".join(KINDS), help="the protocols, in this order (%(default)s)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every row this many times, the proxies' order reversed every other round (1)")
    add_run_arguments(p)
    args = p.parse_args(argv)
    args.proxies = distinct_names(p, "--proxies", args.proxies, PROXIES)
    args.kinds = distinct_names(p, "--kinds", args.kinds, KINDS)
    if args.duration < 1 or args.warmup < 0 or args.connections < args.threads or args.rounds < 1:
        p.error("need --duration >= 1, --warmup >= 0, --connections >= --threads and --rounds >= 1")
    check_cpus(p, args)
    args.header = []  # http_bench.measure's extra request headers: none here
    return args


def builds(args: argparse.Namespace) -> dict[str, str]:
    """What the run measures: each peer's binary (into C{args.peer_paths}) and version, and twingress's build."""
    args.peer_paths = peer_paths(args)
    versions = {name: peer_version(name, path) for name, path in args.peer_paths.items()}
    if TWINGRESS in args.proxies:
        versions |= {f"twingress_{k}": v for k, v in twingress_build().items()}
    return versions


def machine_before(args: argparse.Namespace, versions: dict[str, str]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The CPUs' busy share and the load average before the run, printed with the builds (a note if busy)."""
    busy = cpuload.background_busy([args.proxy_cpu, args.load_cpu])
    loadavg = {"before": [round(v, 2) for v in os.getloadavg()]}
    print(f"builds: {versions}; access logs {args.access_log}; load average before {loadavg['before']}, CPUs busy {busy}", flush=True)
    if max(busy.values()) >= IDLE_LIMIT:
        print(f"note: the machine is busy before the run ({busy}); numbers are suspect", flush=True)
    return busy, loadavg


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    missing = [tool for tool in (args.nginx, "wrk", "h2load", "curl", "taskset") if not shutil.which(tool)]
    if missing:
        print(f"FAILED missing {', '.join(missing)}: run bench/setup.sh", file=sys.stderr)
        return 1
    try:
        versions = builds(args)
    except (BenchFailed, OSError, subprocess.TimeoutExpired) as e:
        print(f"FAILED {e}", file=sys.stderr)
        return 1
    busy, loadavg = machine_before(args, versions)
    rounds, bench, status = run_in_workdir(args, "twpeers-", Bench, lambda bench: bench.run_rounds(),
                                           (BenchFailed, tls_bench.BenchFailed, h2_bench.BenchFailed, procs.StartError))
    if rounds is None or not isinstance(bench, Bench):
        return status
    loadavg["after"] = [round(v, 2) for v in os.getloadavg()]
    rows = [row for one in rounds for row in one]
    summary = medians(rounds) if len(rounds) > 1 else rounds[0]
    below, by_round = verdicts(summary), rounds_below(rounds)
    print()
    for number, one in enumerate(rounds):
        if len(rounds) > 1:
            print(f"round {number + 1} ({', '.join(round_order(args.proxies, number))}):")
        print(h2_bench.table(one, args))
    if len(rounds) > 1:
        print()
        print(round_table(rounds, summary))
    print(f"load average before {loadavg['before']}, after {loadavg['after']}")
    if bench.negotiated:
        print("negotiated (the check's handshake): " + "; ".join(f"{k} {v}" for k, v in bench.negotiated.items()))
    peers = " and ".join(name for name in PEERS if name in args.proxies) or "no peer"
    for kind, verdict in below.items():
        said = {True: "below", False: "NOT below", None: "not compared with"}[verdict]
        counted = by_round[kind]
        rounds_said = f" (median of {len(rounds)} rounds; below in {counted.count(True)} of them)" if len(rounds) > 1 else ""
        print(f"twingress CPU/req over {kind}: {said} {peers}{rounds_said}")
    out = {"benchmark": "peers", "environment": environment(args.nginx) | versions, "background_busy_percent": busy,
           "loadavg": loadavg, "twingress_below_peers": below, "twingress_below_peers_by_round": by_round,
           "negotiated": bench.negotiated,
           "config": {k: getattr(args, k) for k in ("duration", "warmup", "connections", "streams", "threads",
                                                     "proxies", "kinds", "rounds", "proxy_cpu", "load_cpu", "access_log")},
           "medians": [row.__dict__ | {"rounds_measured": len(measured(across_rounds(rounds, row)))} for row in summary] if len(rounds) > 1 else None,
           "results": [row.__dict__ | {"round": number + 1} for number, one in enumerate(rounds) for row in one]}
    return write_and_exit_status(args.json, out, [f"{row.kind} {row.target}: {row.failure}" for row in rows if row.failure])

if __name__ == "__main__":
    sys.exit(main())
