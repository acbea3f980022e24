#!/usr/bin/env python3
"""
Stream benchmark: twingress's TCP bulk throughput (one stream and N parallel
streams) as a ratio to HAProxy, and its UDP packets/s as a ratio to socat,
each forwarding the same traffic in the same run.  See bench/README.md.

TCP load is iperf3 (client and server on the load CPU); UDP load is
bench/udpload (Go, built with go build into the temp dir): an echo server and
a closed-loop generator keeping a window of datagrams in flight per client.
Targets run one after the other, each proxy alone on the proxy CPU.

Run with the project venv::

    .venv/bin/python -m bench streams [--duration 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpuload  # noqa: E402
import procs  # noqa: E402
from harness import Harness, install_signal_handlers  # noqa: E402
from report import IDLE_LIMIT, REPO  # noqa: E402

DIRECT, HAPROXY, SOCAT, TWINGRESS = "direct", "haproxy", "socat", "twingress"
TWINGRESS_CMD = (
    "{venv_bin}/twistd --pidfile= -n ingress --manifests {manifests} --http '' --https ''"
    " --admin tcp:{admin_port}:interface=127.0.0.1 --stream-interface 127.0.0.1 --access-log off"
)
HAPROXY_CONF = """\
global
    nbthread 1
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend streams
    bind 127.0.0.1:{port}
    default_backend iperf
backend iperf
    server s1 127.0.0.1:{backend}
"""


class BenchFailed(RuntimeError):
    """A process did not start or a load run broke."""


@dataclass
class Result:
    """One target's figures (None where the target does not do that protocol)."""

    name: str
    tcp_one: Optional[float] = None  # MB/s
    tcp_many: Optional[float] = None
    udp_pps: Optional[float] = None
    busy: dict[str, dict[str, float]] = field(default_factory=dict)  # run -> cpuN -> %
    failure: Optional[str] = None


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per run (after 1 s of warm-up)")
    p.add_argument("--streams", type=int, default=32, help="parallel TCP streams of the second TCP run")
    p.add_argument("--udp-clients", type=int, default=8)
    p.add_argument("--udp-window", type=int, default=16, help="datagrams in flight per UDP client")
    p.add_argument("--udp-size", type=int, default=128, help="UDP payload bytes")
    p.add_argument("--proxy-cpu", type=int, default=0)
    p.add_argument("--load-cpu", type=int, default=1)
    p.add_argument("--start-timeout", type=float, default=20.0)
    p.add_argument("--json", type=Path)
    p.add_argument("--keep-logs", type=Path)
    p.add_argument("--skip-twingress", action="store_true")
    p.add_argument("--wait-idle", type=float, default=0.0, help="wait up to this many seconds for both CPUs to be idle first")
    p.add_argument("--twingress-cmd", default=TWINGRESS_CMD,
                   help="template: {venv_bin} {manifests} {routes} {port} {admin_port} {tcp_backend} {udp_backend}")
    return p.parse_args(argv)


class StreamBench(Harness):
    def __init__(self, args: argparse.Namespace, stack: ExitStack, workdir: Path) -> None:
        super().__init__(args, stack, workdir)
        self.udp_load = self._build_udp_load()
        self.iperf_port = procs.free_port()
        self.echo_port = procs.free_port()

    def _build_udp_load(self) -> Path:
        """The Go UDP tool, found as testenv/build.sh finds Go ($GO, go on PATH, /usr/local/go/bin/go)."""
        binary = self.workdir / "udp_load"
        go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
        env = os.environ | {"CGO_ENABLED": "0", "GO111MODULE": "on"}
        try:
            done = subprocess.run([go, "build", "-o", str(binary), "."], cwd=REPO / "bench" / "udpload",
                                  env=env, capture_output=True, text=True)
        except OSError as error:
            raise BenchFailed(f"no Go toolchain to build bench/udpload ({go}: {error}); set GO=/path/to/go") from error
        if done.returncode:
            raise BenchFailed(f"go build bench/udpload failed:\n{done.stderr}")
        return binary

    def start_backends(self) -> None:
        self.spawn("iperf3-server", ["iperf3", "-s", "-p", str(self.iperf_port)], self.iperf_port, self.args.load_cpu)
        proc = procs.start("udp-echo", [str(self.udp_load), "echo", str(self.echo_port)], self.workdir, self.args.load_cpu)
        self.stack.callback(procs.stop, proc)
        wait_for_udp(self.echo_port, self.args.start_timeout)

    # -- the proxies

    def haproxy(self) -> int:
        port = procs.free_port()
        conf = self.workdir / "haproxy.conf"
        conf.write_text(HAPROXY_CONF.format(port=port, backend=self.iperf_port))
        self.spawn(HAPROXY, ["haproxy", "-db", "-f", str(conf)], port, self.args.proxy_cpu)
        return port

    def socat(self) -> int:
        port = procs.free_port()
        argv = ["socat", f"UDP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork", f"UDP4:127.0.0.1:{self.echo_port}"]
        proc = procs.start(SOCAT, argv, self.workdir, self.args.proxy_cpu)
        self.stack.callback(procs.stop, proc)
        wait_for_udp(port, self.args.start_timeout)
        return port

    def twingress(self) -> int:
        port, admin_port = procs.free_port(), procs.free_port()
        manifests = self.workdir / "manifests"
        manifests.mkdir(exist_ok=True)
        (manifests / "streams.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            stream_ingress("bench-tcp", "TCP", port, self.iperf_port), stream_ingress("bench-udp", "UDP", port, self.echo_port)]}))
        routes = self.workdir / "routes.json"
        routes.write_text(json.dumps([{"protocol": "TCP", "port": port, "targets": [["127.0.0.1", self.iperf_port]]},
                                      {"protocol": "UDP", "port": port, "targets": [["127.0.0.1", self.echo_port]]}]))
        command = self.args.twingress_cmd.format(
            venv_bin=Path(sys.executable).parent, manifests=manifests, routes=routes, port=port,
            admin_port=admin_port, tcp_backend=self.iperf_port, udp_backend=self.echo_port)
        pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        env = os.environ | {"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        self.spawn(TWINGRESS, shlex.split(command), port, self.args.proxy_cpu, env=env)
        wait_for_udp(port, self.args.start_timeout)
        return port

    # -- the load

    def tcp(self, port: int, streams: int) -> float:
        """iperf3 bulk upload through C{port}: MB/s received by the server (1 s warm-up omitted)."""
        argv = ["taskset", "-c", str(self.args.load_cpu), "iperf3", "-c", "127.0.0.1", "-p", str(port),
                "-t", str(self.args.duration), "-O", "1", "-P", str(streams), "-J"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=self.args.duration + 60)
        report = json.loads(done.stdout or "{}")
        if done.returncode or "error" in report:
            raise BenchFailed(f"iperf3 -P {streams} via {port}: {report.get('error') or done.stderr.strip()}")
        return float(report["end"]["sum_received"]["bits_per_second"]) / 8e6

    def udp(self, port: int) -> float:
        """Answered datagrams per second through C{port} (each crossed the proxy twice)."""
        a = self.args
        argv = ["taskset", "-c", str(a.load_cpu), str(self.udp_load), "load", str(port), str(a.udp_clients),
                str(a.udp_window), str(a.udp_size), str(a.duration)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=a.duration + 30)
        words = done.stdout.split()
        if done.returncode or len(words) != 4 or int(words[2]) == 0:
            raise BenchFailed(f"udp_load via {port}: {done.stdout.strip()} {done.stderr.strip()}")
        return int(words[2]) / float(words[1])

    def measured(self, result: Result, run: str, call: Any) -> Any:
        before = cpuload.cpu_times()
        value = call()
        result.busy[run] = cpuload.busy_percent(before, cpuload.cpu_times(), [self.args.proxy_cpu, self.args.load_cpu])
        return value

    def target(self, name: str, start: Any, tcp: bool, udp: bool) -> Result:
        result = Result(name)
        with ExitStack() as own:
            outer, self.stack = self.stack, own  # this target's processes stop when its runs are done
            try:
                tcp_port, udp_port = start()
                if tcp:
                    result.tcp_one = self.measured(result, "tcp1", lambda: self.tcp(tcp_port, 1))
                    result.tcp_many = self.measured(result, "tcpN", lambda: self.tcp(tcp_port, self.args.streams))
                if udp:
                    result.udp_pps = self.measured(result, "udp", lambda: self.udp(udp_port))
            except (BenchFailed, procs.StartError, subprocess.TimeoutExpired) as error:
                result.failure = str(error)
            finally:
                self.stack = outer
        return result

    def run(self) -> list[Result]:
        self.start_backends()
        results = [self.target(DIRECT, lambda: (self.iperf_port, self.echo_port), True, True)]
        results.append(self.target(HAPROXY, lambda: (self.haproxy(), None), True, False))
        results.append(self.target(SOCAT, lambda: (None, self.socat()), False, True))
        if not self.args.skip_twingress:
            results.append(self.target(TWINGRESS, lambda: (self.twingress(),) * 2, True, True))
        return results


def stream_ingress(name: str, protocol: str, listen: int, port: int) -> dict[str, Any]:
    return {"apiVersion": "twingress.io/v1alpha1", "kind": "StreamIngress", "metadata": {"name": name, "namespace": "bench"},
            "spec": {"protocol": protocol, "listen": listen, "external": True, "upstream": {"host": "127.0.0.1", "port": port}}}


def wait_for_udp(port: int, timeout: float) -> None:
    """Until a datagram to C{port} comes back (an echo behind whatever listens there)."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                s.sendto(b"ping", ("127.0.0.1", port))
                if s.recvfrom(2048)[0] == b"ping":
                    return
            except OSError:
                time.sleep(0.05)
    raise BenchFailed(f"no UDP echo through 127.0.0.1:{port} within {timeout:.0f} s")


def ratio(value: Optional[float], reference: Optional[float]) -> Optional[float]:
    return round(value / reference, 3) if value and reference else None


def notes(results: list[Result], proxy_cpu: int, background: dict[str, float]) -> list[str]:
    """Why a run's ratios may not be trusted: someone else's work on the CPUs."""
    found = []
    if background and max(background.values()) >= IDLE_LIMIT:
        found.append(f"the machine was busy before the run ({background}): rerun with --wait-idle")
    direct = next((r for r in results if r.name == DIRECT), None)
    for run, busy in (direct.busy.items() if direct else []):
        if busy.get(f"cpu{proxy_cpu}", 0.0) >= IDLE_LIMIT:
            found.append(f"the proxy CPU was {busy[f'cpu{proxy_cpu}']:.0f}% busy in the direct {run} run, with no proxy on it"
                         " (the kernel's loopback work for the load, or other processes)")
    return found


def report(results: list[Result]) -> dict[str, Any]:
    by_name = {r.name: r for r in results}
    ref_tcp, ref_udp = by_name.get(HAPROXY, Result("")), by_name.get(SOCAT, Result(""))
    rows = []
    for r in results:
        rows.append({"target": r.name, "failure": r.failure, "busy_percent": r.busy,
                     "tcp_1_stream_MBps": _round(r.tcp_one), "tcp_n_streams_MBps": _round(r.tcp_many),
                     "udp_pps": _round(r.udp_pps),
                     "tcp_1_vs_haproxy": ratio(r.tcp_one, ref_tcp.tcp_one),
                     "tcp_n_vs_haproxy": ratio(r.tcp_many, ref_tcp.tcp_many),
                     "udp_vs_socat": ratio(r.udp_pps, ref_udp.udp_pps)})
    return {"benchmark": "streams", "time": datetime.datetime.now().astimezone().isoformat(), "results": rows,
            "versions": versions()}


def _round(value: Optional[float]) -> Optional[float]:
    return round(value, 1) if value is not None else None


def versions() -> dict[str, str]:
    def first_line(argv: list[str]) -> str:
        done = subprocess.run(argv, capture_output=True, text=True)
        return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "?"

    socat = subprocess.run(["socat", "-V"], capture_output=True, text=True).stdout
    socat_version = next((line.split("version", 1)[1].split()[0] for line in socat.splitlines() if "socat version" in line), "?")
    return {"haproxy": first_line(["haproxy", "-v"]), "socat": socat_version,
            "iperf3": first_line(["iperf3", "--version"]), "python": sys.version.split()[0],
            "commit": first_line(["git", "-C", str(REPO), "describe", "--always", "--dirty"])}


def print_table(data: dict[str, Any], streams: int) -> None:
    def cell(value: Any, suffix: str = "") -> str:
        return "-" if value is None else (f"{value:,.0f}{suffix}" if suffix != "x" else f"{value:.2f}x")

    print(f"{'target':<10} {'TCP 1 MB/s':>11} {'vs haproxy':>10} {f'TCP {streams} MB/s':>12} {'vs haproxy':>10}"
          f" {'UDP pkt/s':>10} {'vs socat':>9}  busy cpu0/cpu1 (tcp1, tcpN, udp)")
    for row in data["results"]:
        busy = ", ".join(f"{b.get('cpu0', 0):.0f}%/{b.get('cpu1', 0):.0f}%" for b in row["busy_percent"].values())
        print(f"{row['target']:<10} {cell(row['tcp_1_stream_MBps'], ' '):>11} {cell(row['tcp_1_vs_haproxy'], 'x'):>10}"
              f" {cell(row['tcp_n_streams_MBps'], ' '):>12} {cell(row['tcp_n_vs_haproxy'], 'x'):>10}"
              f" {cell(row['udp_pps'], ' '):>10} {cell(row['udp_vs_socat'], 'x'):>9}  {busy}")
        if row["failure"]:
            print(f"FAILED {row['target']}: {row['failure']}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    cpus = [args.proxy_cpu, args.load_cpu]
    background = cpuload.wait_for_idle(cpus, IDLE_LIMIT, args.wait_idle) if args.wait_idle else cpuload.background_busy(cpus)
    try:
        with ExitStack() as stack:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="twstream-")))
            bench = StreamBench(args, stack, workdir)
            try:
                results = bench.run()
            finally:
                if args.keep_logs:
                    bench.keep_logs(args.keep_logs)
    except KeyboardInterrupt:
        return 130
    except (BenchFailed, procs.StartError) as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    data = report(results)
    data["background_busy_percent"] = background
    data["notes"] = notes(results, args.proxy_cpu, background)
    data["config"] = {k: v if not isinstance(v, Path) else str(v) for k, v in vars(args).items()}
    print_table(data, args.streams)
    for note in data["notes"]:
        print(f"note: {note}")
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 1 if any(r.failure for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
