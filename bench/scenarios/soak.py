"""
Soak: a day of traffic in ten minutes: twingress under steady load, constant churn and backend kills.

Short benchmarks cannot see what goes wrong only after hours in production: memory or file
descriptors that leak a little per request, per table swap or per certificate; a change that
never reaches the data plane; requests failed by a table swap or a dead endpoint. This bench
compresses that into ``--duration`` seconds and reports it (the targets are printed next to the
numbers):

1. Setup (bench/lib/cluster.py, bench/lib/kubeproxy.py): etcd, kube-apiserver,
   kube-controller-manager; three echo backends on 10.244.0.20-22:8080; ``--ingresses`` Ingresses
   with their Services and EndpointSlices, every ``--tls-every``-th with a TLS Secret
   (bench/lib/churn.py describes the objects); twingress (``twistd -n ingress --kubeconfig``, HTTP
   and HTTPS on loopback, ``--workers``, access log off).
2. Load for the whole run (bench/lib/soakload.py, a process of its own): ``--connections`` keep-alive
   connections, new TCP connections and new TLS handshakes, each at a bounded rate.
3. Churn every ``--churn-interval``: an Ingress, an EndpointSlice or a Secret changes, in turn; a
   checker thread polls each change through the proxy until it is live (``--change-timeout``).
4. Every ``--kill-interval`` one echo backend is SIGKILLed and restarted ``--down`` seconds later
   on the same address. Failed requests are split: in flight while the backend died (expected),
   started while it was down (twingress should have passed them to the other endpoint), other.
5. Every 10 s: RSS and open fds of twingress's process tree. At the end: requests, failures and
   p50/p99 latency per kind, memory and fd growth after ``--warmup``, changes made/live/not live,
   twingress's own request and upstream-failure counters.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from bench.lib import churn, cluster, procs, soakreport
from bench.lib.cluster import BACKEND_PORT, Api, log
from bench.lib.kubeproxy import Prober, Twingress
from bench.lib.results import REPO
from bench.scenarios import Run
from tests.support import EchoBackend

NAME = "soak"
QUESTION = "Does twingress hold up under steady load, constant churn and backend kills (errors, latency, memory, fds over time)?"
SAMPLE_INTERVAL = 10.0
PASSIVE_HEALTH = 5.0  # twingress's --upstream-fail-timeout default: an endpoint that refused is skipped that long
METRICS = {  # name: (the label summed by, the group in the report)
    "twingress_http_requests_total": ("status", "requests_by_status"),
    "twingress_upstream_failures_total": ("reason", "upstream_failures"),
    "twingress_kube_watch_restarts_total": ("kind", "watch_restarts"),
    "twingress_kube_relists_total": ("kind", "relists"),
}
METRIC_LINE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


# --- the twingress process tree ------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    """ROOT and its descendants (from the parent pid of every /proc/PID/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def open_fds(pid: int) -> tuple[int, int]:
    """(open fds, of which sockets) of one process, from /proc/PID/fd."""
    fds = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return fds, sockets


def tree_usage(root: int) -> dict[str, float]:
    """Summed VmRSS (MB), open fds and sockets among them over ROOT's process tree."""
    rss_kb = fds = sockets = count = 0
    for pid in process_tree(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            f, so = open_fds(pid)
        except OSError:
            continue  # it exited meanwhile
        fds, sockets, count = fds + f, sockets + so, count + 1
        rss_kb += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return {"rss_mb": rss_kb / 1024.0, "fds": fds, "sockets": sockets, "processes": count}


def twingress_metrics(tw: Twingress) -> dict[str, dict[str, float]]:
    """The METRICS counters, each summed by one label."""
    out: dict[str, dict[str, float]] = {group: {} for _, group in METRICS.values()}
    _, body = tw.admin_get("/metrics")
    for line in body.decode().splitlines():
        m = METRIC_LINE.match(line)
        if m and m.group(1) in METRICS:
            label, group = METRICS[m.group(1)]
            value = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))).get(label, "?")
            out[group][value] = out[group].get(value, 0.0) + float(m.group(3))
    return out


# --- echo backends and their killing -------------------------------------------------------------


class Backends:
    """The three echo backends, by name; one can be killed (SIGKILL) and restarted on its address."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, Optional[EchoBackend]] = dict.fromkeys(churn.NAMES)
        self.restarted: dict[str, float] = dict.fromkeys(churn.NAMES, 0.0)

    def start(self) -> None:
        for name in churn.NAMES:
            self.restart(name)

    def kill(self, name: str) -> None:
        with self.lock:
            backend, self.running[name] = self.running[name], None
        if backend is not None:
            backend.process.send_signal(signal.SIGKILL)
            backend.process.wait()

    def down_lately(self, name: str) -> bool:
        """Killed now, or restarted less than PASSIVE_HEALTH s ago (twingress may still skip it)."""
        with self.lock:
            return self.running[name] is None or time.monotonic() - self.restarted[name] < PASSIVE_HEALTH

    def restart(self, name: str) -> None:
        backend = EchoBackend(name, churn.BACKENDS[name], BACKEND_PORT)
        with self.lock:
            self.running[name] = backend
            self.restarted[name] = time.monotonic()

    def stop(self) -> None:
        with self.lock:
            backends = [b for b in self.running.values() if b is not None]
        for b in backends:
            b.stop()


def kill_loop(backends: Backends, interval: float, down: float, stop: threading.Event, kills: list[dict[str, Any]]) -> None:
    """Every INTERVAL s: SIGKILL the next backend, restart it DOWN s later (at once when stopping)."""
    k = 0
    while not stop.wait(interval):
        name = churn.NAMES[k % len(churn.NAMES)]
        k += 1
        event: dict[str, Any] = {"backend": name, "kill": time.monotonic()}
        backends.kill(name)
        event["dead"] = time.monotonic()
        stop.wait(down)
        try:
            backends.restart(name)
        except (OSError, RuntimeError, TimeoutError) as e:
            event["restart_error"] = str(e)
            log(f"restarting {name} failed: {e}")
        event["up"] = time.monotonic()
        kills.append(event)
        log(f"killed {name}, back after {event['up'] - event['dead']:.1f} s")


def sample_loop(tw: Twingress, t0: float, stop: threading.Event, samples: list[dict[str, float]]) -> None:
    """Every SAMPLE_INTERVAL s: twingress's tree usage. If twingress died, record it and stop the run."""
    while True:
        try:
            tw.check_alive()
        except procs.BenchFailed as e:
            samples.append({"t": time.monotonic() - t0, "died": 1.0})
            log(str(e))
            stop.set()
            return
        samples.append({"t": time.monotonic() - t0, **tree_usage(tw.pid)})
        if stop.wait(SAMPLE_INTERVAL):
            return


# --- setup ---------------------------------------------------------------------------------------


def create_world(api: Api, world: churn.World) -> float:
    """Create every object (8 threads, in order within each kind group); seconds it took."""
    t0 = time.monotonic()
    objects = list(world.objects())
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for kinds in (("Service", "EndpointSlice", "Secret"), ("Ingress",)):
            list(pool.map(api.create_retrying, [o for o in objects if o["kind"] in kinds]))
    return time.monotonic() - t0


def wait_initial(tw: Twingress, world: churn.World, prober: Prober, timeout: float = 180.0) -> float:
    """Until every host is in the table and every TLS host serves its certificate; seconds it took."""
    t0 = time.monotonic()
    hosts = {churn.host(i) for i in range(world.n)} | {churn.check_host(i) for i in range(world.n)}
    waiting_tls = list(world.tls_indices)
    while time.monotonic() - t0 < timeout:
        tw.check_alive()
        if hosts and hosts <= set(tw.route_hosts()):
            hosts = set()
        if not hosts:
            waiting_tls = [i for i in waiting_tls if not prober.serves(churn.host(i), world.cert_sha[i])]
            if not waiting_tls:
                return time.monotonic() - t0
        time.sleep(0.5)
    raise procs.BenchFailed(f"not live within {timeout:.0f} s: {len(hosts)} hosts missing, {len(waiting_tls)} certificates not served")


def start_load(args: argparse.Namespace, tw: Twingress, https_port: int, world: churn.World, work: Path, load_cpus: Optional[str]) -> tuple[procs.Proc, Path]:
    config = {
        "http_port": tw.http_port,
        "https_port": https_port,
        "http_hosts": [churn.host(i) for i in range(world.n)],
        "tls_hosts": [churn.host(i) for i in world.tls_indices],
        "backends": list(churn.NAMES),
        "ca_pem": world.ca.pem().decode(),
        "connections": args.connections,
        "keepalive_rate": args.keepalive_rate,
        "new_conn_rate": args.new_conn_rate,
        "tls_rate": args.tls_rate,
        "duration": args.duration + 60.0,  # a safety net: the bench stops it with SIGTERM at the end
    }
    (work / "load.json").write_text(json.dumps(config))
    out = work / "load-result.json"
    argv = [sys.executable, "-m", "bench.lib.soakload", "--config", str(work / "load.json"), "--out", str(out)]
    return procs.start("soak-load", argv, work, load_cpus, cwd=REPO), out


# --- the run -------------------------------------------------------------------------------------


def soak(run: Run, api: Api, tw: Twingress, https_port: int, world: churn.World, backends: Backends) -> dict[str, Any]:
    """Load, churn, kills and sampling for --duration seconds; the raw results."""
    args, stop = run.args, threading.Event()
    prober = Prober(tw.http_port, https_port)
    checker = churn.Checker(prober, stop, backends.down_lately)
    changes = churn.Churn(api, world, checker, args.change_timeout)
    kills: list[dict[str, Any]] = []
    samples: list[dict[str, float]] = []
    metrics_start = twingress_metrics(tw)
    load, load_out = start_load(args, tw, https_port, world, run.children.workdir, run.load_cpus)
    t0 = time.monotonic()
    threads = [
        checker,
        threading.Thread(target=kill_loop, args=(backends, args.kill_interval, args.down, stop, kills), name="soak-killer", daemon=True),
        threading.Thread(target=sample_loop, args=(tw, t0, stop, samples), name="soak-sampler", daemon=True),
    ]
    try:
        for t in threads:
            t.start()
        ticks = churn_until(changes, t0, args, stop, load)
        end = {"t": time.monotonic() - t0, **tree_usage(tw.pid)}
        metrics_end = twingress_metrics(tw) if tw.proc.popen.poll() is None else metrics_start
    finally:
        stop.set()
        procs.stop(load, grace=30.0)  # SIGTERM: the load finishes its requests and writes its results
        for t in threads:
            t.join(timeout=args.change_timeout + args.down + 30.0)
    return {
        "load": json.loads(load_out.read_text()) if load_out.exists() else None,
        "load_log_tail": load.tail(),
        "kills": kills,
        "samples": samples,
        "end_sample": end,
        "churn_ticks": ticks,
        "changes": changes.summary(),
        "live_ms": checker.live_ms,
        "live_after_kill_ms": checker.live_after_kill_ms,
        "not_live": checker.not_live,
        "metrics": {"start": metrics_start, "end": metrics_end},
    }


def churn_until(changes: churn.Churn, t0: float, args: argparse.Namespace, stop: threading.Event, load: procs.Proc) -> int:
    """One churn tick every --churn-interval until the duration is over (or twingress or the load died)."""
    tick, next_at = 0, t0
    while time.monotonic() < t0 + args.duration and not stop.is_set():
        if load.popen.poll() is not None:
            log(f"the load generator exited early:\n{load.tail()}")
            break
        changes.tick(tick)
        tick += 1
        next_at = max(next_at + args.churn_interval, time.monotonic() - args.churn_interval)
        stop.wait(max(0.0, next_at - time.monotonic()))
    return tick


# --- main ----------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load, churn and kills (600)")
    p.add_argument("--warmup", type=float, default=60.0, help="memory and fds are compared from this second on (60)")
    p.add_argument("--ingresses", type=int, default=200, help="Ingresses, each with a Service and an EndpointSlice (200)")
    p.add_argument("--tls-every", type=int, default=4, help="every N-th Ingress has a TLS Secret (4; 0: none)")
    p.add_argument("--connections", type=int, default=512, help="keep-alive connections (512)")
    p.add_argument("--keepalive-rate", type=float, default=400.0, help="requests/s over all keep-alive connections (400)")
    p.add_argument("--new-conn-rate", type=float, default=50.0, help="requests/s, each on a new TCP connection (50)")
    p.add_argument("--tls-rate", type=float, default=20.0, help="requests/s, each on a new TLS connection (20)")
    p.add_argument("--churn-interval", type=float, default=0.1, help="seconds between two changes (0.1)")
    p.add_argument("--change-timeout", type=float, default=30.0, help="a change not live after this many seconds counts as not live (30)")
    p.add_argument("--kill-interval", type=float, default=60.0, help="seconds between two backend kills (60)")
    p.add_argument("--down", type=float, default=3.0, help="seconds a killed backend stays down (3)")


def check(args: argparse.Namespace) -> str:
    if args.against:
        return "--against: the cluster scenarios measure twingress alone"
    if args.ingresses < 1 or args.connections < 1 or args.tls_every < 0:
        return "--ingresses and --connections at least 1, --tls-every 0 or more"
    if min(args.duration, args.keepalive_rate, args.new_conn_rate, args.tls_rate, args.churn_interval, args.kill_interval) <= 0:
        return "--duration, the rates and the intervals above 0"
    return cluster.missing()


SHOWN = ("duration", "warmup", "ingresses", "tls_every", "workers", "connections", "change_timeout")


def run(run: Run) -> list[dict[str, Any]]:
    args = run.args
    result: dict[str, Any] = {"args": {key: getattr(args, key) for key in SHOWN}, "loadavg_start": cluster.loadavg()}
    kube = cluster.start_control_plane(run.children)
    log(f"control plane up in {kube.startup_seconds['total']:.1f} s")
    backends = Backends()
    run.children.stack.callback(backends.stop)
    backends.start()
    api = Api(kube.kubeconfig)
    api.create(cluster.INGRESS_CLASS)
    api.create(cluster.namespace(churn.NS))
    world = churn.World(args.ingresses, args.tls_every)
    result["create_s"] = create_world(api, world)
    log(f"{args.ingresses} Ingresses ({len(world.tls_indices)} TLS) created in {result['create_s']:.1f} s")
    https_port = procs.free_port()
    extra = ["--https", f"tcp:{https_port}:interface=127.0.0.1", "--access-log", "off", "--shutdown-delay", "0"]
    tw = Twingress(run.children, kube.kubeconfig, args.workers, run.proxy_cpus, extra_args=extra)
    result["ready_s"] = tw.wait_ready(args.start_timeout)
    prober = Prober(tw.http_port, https_port)
    result["initial_live_s"] = wait_initial(tw, world, prober)
    prober.http.close()
    log(f"twingress ready in {result['ready_s']:.1f} s, everything live {result['initial_live_s']:.1f} s later; soaking for {args.duration:.0f} s")
    result.update(soak(run, api, tw, https_port, world, backends))
    result["loadavg_end"] = cluster.loadavg()
    if result["load"] is None:
        run.failures.append(f"the load generator wrote no results: {result['load_log_tail'].splitlines()[-1:]}")
    if any(sample.get("died") for sample in result["samples"]):
        run.failures.append("twingress died during the soak")
    return [{**soakreport.summarize(result), "raw": result}]


def lines(document: dict[str, Any]) -> list[str]:
    return [line for figure in document["figures"] for line in soakreport.table(figure).splitlines()]
