"""
Streams: twingress's TCP bulk throughput (one stream, then C{--streams} in parallel) as a ratio to
HAProxy's, and its UDP datagrams a second as a ratio to socat's, each forwarding the same traffic
alone on the proxy CPUs, after the same traffic sent direct.  TCP load is iperf3 (server and client
on the load CPUs); UDP load is bench/udpload (an echo server and a closed-loop generator keeping
C{--udp-window} datagrams in flight per client; each datagram crosses the proxy twice).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any, Optional

from bench.lib import procs, site
from bench.lib.procs import BenchFailed
from bench.scenarios import Run

NAME = "streams"
QUESTION = "How fast does twingress forward TCP streams and UDP packets, as a ratio to HAProxy and socat?"
TOOLS = ("haproxy", "socat", "iperf3")
DIRECT, HAPROXY, SOCAT, TWINGRESS = "direct", "haproxy", "socat", "twingress"
HAPROXY_CONF = """\
global
    nbthread {threads}
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=int, default=10, help="measured seconds per run, after 1 s of warm-up (10)")
    p.add_argument("--streams", type=int, default=32, help="parallel TCP streams of the second TCP run (32)")
    p.add_argument("--udp-clients", type=int, default=8, help="UDP clients (8)")
    p.add_argument("--udp-window", type=int, default=16, help="datagrams in flight per UDP client (16)")
    p.add_argument("--udp-size", type=int, default=128, help="UDP payload bytes (128)")


def check(args: argparse.Namespace) -> str:
    if args.against:
        return "--against: streams always compares with HAProxy (TCP) and socat (UDP)"
    small = [name for name in ("seconds", "streams", "udp_clients", "udp_window", "udp_size") if getattr(args, name) < 1]
    return f"--{', --'.join(n.replace('_', '-') for n in small)} at least 1" if small else ""


def wait_for_udp(port: int, timeout: float) -> None:
    """Until a datagram to C{port} comes back (an echo behind whatever listens there)."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                s.sendto(b"ping", (procs.LOOPBACK, port))
                if s.recvfrom(2048)[0] == b"ping":
                    return
            except OSError:
                time.sleep(0.05)
    raise BenchFailed(f"no UDP echo through 127.0.0.1:{port} within {timeout:.0f} s")


def udp_child(run: Run, name: str, argv: list[str], port: int, env: Optional[dict[str, str]] = None) -> procs.Proc:
    """A child that listens on UDP (C{Children.spawn} waits on TCP): started, its stop registered, echoing."""
    proc = procs.start(name, argv, run.children.workdir, run.proxy_cpus if name != "udp-echo" else run.load_cpus, env=env, cwd=site.REPO)
    run.children.stack.callback(procs.stop, proc)
    wait_for_udp(port, run.args.start_timeout)
    return proc


class Streams:
    """The backends (iperf3's server, bench/udpload's echo) and the proxies, started one at a time."""

    def __init__(self, run: Run) -> None:
        self.run, self.udpload = run, site.go_tool("udpload")
        self.iperf_port, self.echo_port = procs.free_port(), procs.free_port()
        run.children.spawn("iperf3-server", ["iperf3", "-s", "-p", str(self.iperf_port)], self.iperf_port, run.load_cpus)
        udp_child(run, "udp-echo", [str(self.udpload), "echo", str(self.echo_port)], self.echo_port)

    def haproxy(self) -> tuple[procs.Proc, int]:
        port, conf = procs.free_port(), self.run.children.workdir / "haproxy.conf"
        conf.write_text(HAPROXY_CONF.format(port=port, backend=self.iperf_port, threads=self.run.args.workers))
        return self.run.children.spawn(HAPROXY, ["haproxy", "-db", "-f", str(conf)], port, self.run.proxy_cpus), port

    def socat(self) -> tuple[procs.Proc, int]:
        port = procs.free_port()
        argv = ["socat", f"UDP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork", f"UDP4:127.0.0.1:{self.echo_port}"]
        return udp_child(self.run, SOCAT, argv, port), port

    def twingress(self) -> tuple[procs.Proc, int]:
        """twingress with a TCP and a UDP StreamIngress on one port, nothing else listening but its admin."""
        port, admin_port = procs.free_port(), procs.free_port()
        manifests = self.run.children.workdir / "streams-manifests"
        manifests.mkdir(exist_ok=True)
        (manifests / "streams.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            stream_ingress("bench-tcp", "TCP", port, self.iperf_port), stream_ingress("bench-udp", "UDP", port, self.echo_port)]}))
        checkout = site.Checkout(site.REPO)
        checkout.check()
        argv = [str(checkout.twistd), "--pidfile=", "-n", "ingress", "--manifests", str(manifests), "--http", "", "--https", "",
                "--admin", f"tcp:{admin_port}:interface=127.0.0.1", "--stream-interface", "127.0.0.1", "--access-log", "off",
                *(["--workers", str(self.run.args.workers)] if self.run.args.workers > 1 else [])]
        env = dict(os.environ) | {"PYTHONPATH": str(site.REPO), "PYTHONUNBUFFERED": "1"}
        proc = self.run.children.spawn(TWINGRESS, argv, port, self.run.proxy_cpus, env=env, cwd=site.REPO)
        wait_for_udp(port, self.run.args.start_timeout)
        return proc, port

    def tcp(self, port: int, streams: int) -> float:
        """iperf3's bulk upload through C{port}: MB/s received by the server (its first second left out)."""
        seconds = self.run.args.seconds
        argv = procs.pinned(self.run.load_cpus, ["iperf3", "-c", procs.LOOPBACK, "-p", str(port), "-t", str(seconds), "-O", "1",
                                                  "-P", str(streams), "-J"])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
        try:
            report = json.loads(done.stdout or "{}")
        except ValueError:
            report = {"error": done.stdout[-300:]}
        if done.returncode or "error" in report:
            raise BenchFailed(f"iperf3 -P {streams} via {port}: {report.get('error') or done.stderr.strip()}")
        return float(report["end"]["sum_received"]["bits_per_second"]) / 8e6

    def udp(self, port: int) -> float:
        """Datagrams answered a second through C{port}."""
        a = self.run.args
        argv = procs.pinned(self.run.load_cpus, [str(self.udpload), "load", str(port), str(a.udp_clients), str(a.udp_window),
                                                  str(a.udp_size), str(a.seconds)])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=a.seconds + 30)
        words = done.stdout.split()
        if done.returncode or len(words) != 4 or int(words[2]) == 0:
            raise BenchFailed(f"udpload via {port}: {done.stdout.strip()} {done.stderr.strip()}")
        return int(words[2]) / float(words[1])

    def target(self, name: str, start: Callable[[], tuple[Optional[procs.Proc], int]], tcp: bool, udp: bool) -> dict[str, Any]:
        """One target's row: its figures (None where it does not forward that protocol); its process stopped after."""
        proc, port = start()
        try:
            row: dict[str, Any] = {"target": name}
            if tcp:
                row["tcp_1_stream_MBps"] = round(self.tcp(port, 1), 1)
                row["tcp_n_streams_MBps"] = round(self.tcp(port, self.run.args.streams), 1)
            if udp:
                row["udp_pps"] = round(self.udp(port if name != DIRECT else self.echo_port))
            return row
        finally:
            if proc is not None:
                procs.stop(proc)


def stream_ingress(name: str, protocol: str, listen: int, port: int) -> dict[str, Any]:
    return {"apiVersion": "twingress.io/v1alpha1", "kind": "StreamIngress", "metadata": {"name": name, "namespace": "bench"},
            "spec": {"protocol": protocol, "listen": listen, "external": True, "upstream": {"host": "127.0.0.1", "port": port}}}


def run(run: Run) -> list[dict[str, Any]]:
    bench = Streams(run)
    targets: list[tuple[str, Callable[[], tuple[Optional[procs.Proc], int]], bool, bool]] = [
        (DIRECT, lambda: (None, bench.iperf_port), True, True), (HAPROXY, bench.haproxy, True, False),
        (SOCAT, bench.socat, False, True), (TWINGRESS, bench.twingress, True, True)]
    rows = []
    for name, start, tcp, udp in targets:
        try:
            rows.append(bench.target(name, start, tcp, udp))
        except (BenchFailed, subprocess.TimeoutExpired) as e:
            run.failed(f"{name}", e)
            continue
        run.say(line(rows[-1]))
    by = {row["target"]: row for row in rows}
    for row in rows:
        for key, reference in (("tcp_1_stream_MBps", HAPROXY), ("tcp_n_streams_MBps", HAPROXY), ("udp_pps", SOCAT)):
            if row.get(key) and by.get(reference, {}).get(key):
                row[f"{key}_ratio"] = round(row[key] / by[reference][key], 3)
    return rows


def line(row: dict[str, Any]) -> str:
    def cell(key: str, unit: str, reference: str) -> str:
        if key not in row:
            return "-"
        ratio = f" ({row[key + '_ratio']:.2f}x {reference})" if key + "_ratio" in row else ""
        return f"{row[key]:,.0f} {unit}{ratio}"
    return (f"{row['target']:<10} TCP 1 stream {cell('tcp_1_stream_MBps', 'MB/s', 'haproxy')}, N streams "
            f"{cell('tcp_n_streams_MBps', 'MB/s', 'haproxy')}; UDP {cell('udp_pps', 'datagrams/s', 'socat')}")


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
