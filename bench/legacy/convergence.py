"""Convergence, rebuild time and memory of twingress against a real kube-apiserver.

Run inside the private network namespace of the kube tests (pod-like addresses on lo):

    testenv/netns-run .venv/bin/python -m bench convergence [--changes 200] [--scale 1000,10000] [--json PATH]

What it does (everything started here is stopped here, in finally blocks):

1. Starts etcd + kube-apiserver + kube-controller-manager (tests/kube/cluster.py) and prints their
   setup time; echo backends on 10.244.0.5 (conv-a), 10.244.0.6 (conv-b) and 10.244.0.10-12 (the
   scale endpoints); the IngressClass ``twingress``; twingress itself (``twistd -n ingress
   --kubeconfig ...``).
2. Convergence: time from an API write returning (time.monotonic just after the call) to the route
   being live *through the proxy*: real HTTP requests (keep-alive, ``Host:`` the changed host),
   back to back, until one answers 200 from the expected backend. Three series of ``--changes``:
   ``create`` (a new Ingress for a new host), ``update-path`` (the path of one Ingress changes, the
   new path is polled), ``update-backend`` (the backend Service of one Ingress flips between
   conv-a and conv-b, polled until the other echo answers) and ``update-endpoints`` (the one
   endpoint of a Service's EndpointSlice moves between conv-a and conv-b: a pod replaced).
3. Scale, cumulatively for each ``--scale`` N: N Ingresses in namespace ``scale``, each with its
   own Service and one EndpointSlice of 3 endpoints (10.244.0.10-12:8080), created by a thread pool
   while twingress runs. Reported: create time, time from the last create returning to all N hosts
   live (informer counts in /readyz, a 200 through the proxy for the host whose create returned
   last, then every host present in /debug/routes), the full rebuild time (twingress_table_build_seconds
   _sum/_count diff around a touch of one Ingress, ``--rebuilds`` times) with the twingress process's
   CPU time around it and the write-to-swap time; ``--scale-changes`` convergence changes at that
   size, once per ``--scale-poll-intervals`` value (back-to-back polling keeps the reactor thread
   busy, and the build thread shares the GIL with it: the second series shows how much the probe
   itself slows a big build), and the steady RSS (VmRSS after the generation has not
   moved for a few seconds) plus VmHWM (peak).
With ``--baseline N``, first: N Services, EndpointSlices and Ingresses of another class created
the same way with no twingress running, in a fresh control plane of its own (stopped after), for
the objects/s to compare the scale steps' creation rate with.

4. Unless ``--no-cold-start``, a fresh twingress against the largest cluster: time
   to ready and to all hosts live, and its steady RSS (the first one is stopped before).

With ``--gateway-routes N``, between 2 and 3: N HTTPRoutes on a Gateway of ours, their rebuild time
and ``--gateway-changes`` new HTTPRoute hosts timed as in 2 (bench/convergence_gateway.py).
``--changes 0`` skips 2.

Nothing asserts; targets from the issue are printed next to the numbers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parents[1]
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

import cpuload  # noqa: E402
import procs  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from tests.kube import cluster  # noqa: E402
from tests.support import EchoBackend  # noqa: E402

CONV_NS, SCALE_NS = "conv", "scale"
CONV_BACKENDS = {"conv-a": "10.244.0.5", "conv-b": "10.244.0.6"}
SCALE_BACKENDS = ("10.244.0.10", "10.244.0.11", "10.244.0.12")
BACKEND_PORT = 8080
TARGET_P99_MS = 250.0
TARGET_REBUILD_S = 2.0
TARGET_RSS_MB = 400.0
# The large-cluster issue's targets by size: new host p99, endpoint move p99, cold start to ready, steady RSS.
SCALE_TARGETS = {10000: (50.0, 30.0, 5.0, 200.0), 50000: (100.0, 100.0, 30.0, 800.0)}
TARGET_CREATION_RATIO = 0.8  # objects/s with twingress running, to without it
GATEWAY_GROUP = "gateway.networking.k8s.io"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS/VmHWM in MB and CPU seconds (user+system) of one process."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024.0
    out["cpu_s"] = cpuload.process_cpu_seconds(pid)
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summary(ms: list[float], failures: int) -> dict[str, Any]:
    if not ms:
        return {"n": 0, "failures": failures}
    return {
        "n": len(ms),
        "failures": failures,
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
        "min_ms": min(ms),
        "mean_ms": statistics.fmean(ms),
    }


# --- objects -------------------------------------------------------------------------------------


def service(name: str, namespace: str, headless: bool = False) -> dict:
    """C{headless}: no cluster IP (clusterIP: None), which twingress does not use: routes go to the endpoints."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": BACKEND_PORT}], **({"clusterIP": "None"} if headless else {})},
    }


def endpoint_slice(service_name: str, namespace: str, addresses: tuple[str, ...]) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service_name}-1",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service_name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": BACKEND_PORT}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
    }


def ingress(name: str, namespace: str, host: str, service_name: str, path: str = "/") -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "ingressClassName": "twingress",
            "rules": [
                {
                    "host": host,
                    "http": {
                        "paths": [
                            {
                                "path": path,
                                "pathType": "Prefix",
                                "backend": {"service": {"name": service_name, "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ],
        },
    }


class Api:
    """The kubernetes client, one ApiClient per thread, raw responses (no model deserialization,
    so a call "returns" when the apiserver has answered)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = str(kubeconfig)
        self._local = threading.local()

    def _client(self) -> k8s.ApiClient:
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = k8s_config.new_client_from_config(self.kubeconfig)
        return c

    @staticmethod
    def _drain(response: Any) -> bytes:
        body: bytes = response.read()
        response.release_conn()
        return body

    def create(self, body: dict) -> None:
        c, kind, ns = self._client(), body["kind"], body["metadata"].get("namespace")
        if kind == "Service":
            r = k8s.CoreV1Api(c).create_namespaced_service(ns, body, _preload_content=False)
        elif kind == "EndpointSlice":
            r = k8s.DiscoveryV1Api(c).create_namespaced_endpoint_slice(ns, body, _preload_content=False)
        elif kind == "Ingress":
            r = k8s.NetworkingV1Api(c).create_namespaced_ingress(ns, body, _preload_content=False)
        elif kind == "IngressClass":
            r = k8s.NetworkingV1Api(c).create_ingress_class(body, _preload_content=False)
        elif kind == "Namespace":
            r = k8s.CoreV1Api(c).create_namespace(body, _preload_content=False)
        elif body["apiVersion"].startswith(GATEWAY_GROUP + "/"):
            version, plural = body["apiVersion"].split("/")[1], kind.lower() + ("es" if kind.endswith("s") else "s")
            custom = k8s.CustomObjectsApi(c)
            if ns is None:
                r = custom.create_cluster_custom_object(GATEWAY_GROUP, version, plural, body, _preload_content=False)
            else:
                r = custom.create_namespaced_custom_object(GATEWAY_GROUP, version, ns, plural, body, _preload_content=False)
        else:
            raise ValueError(kind)
        self._drain(r)

    def create_retrying(self, body: dict, attempts: int = 6) -> None:
        """create(), retrying throttling/server errors/connection errors; AlreadyExists is fine."""
        for attempt in range(attempts):
            try:
                return self.create(body)
            except ApiException as e:
                if e.status == 409:
                    return
                if e.status not in (429, 500, 503, 504) or attempt == attempts - 1:
                    raise
            except OSError:
                if attempt == attempts - 1:
                    raise
                self._local.client = None
            time.sleep(0.2 * 2**attempt)

    def patch_endpoint_slice(self, namespace: str, name: str, ops: list[dict]) -> bytes:
        """A JSON patch (a list of operations) on one EndpointSlice; the patched slice as JSON (its resourceVersion names its watch event)."""
        r = k8s.DiscoveryV1Api(self._client()).patch_namespaced_endpoint_slice(
            name, namespace, ops, _preload_content=False
        )
        return self._drain(r)

    def patch_ingress(self, namespace: str, name: str, ops: list[dict]) -> None:
        """A JSON patch (a list of operations) on one Ingress."""
        r = k8s.NetworkingV1Api(self._client()).patch_namespaced_ingress(
            name, namespace, ops, _preload_content=False
        )
        self._drain(r)


# --- talking to twingress ------------------------------------------------------------------------


class Http:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1:port, reopened when it closes."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.port = port
        self.timeout = timeout
        self.conn: Optional[http.client.HTTPConnection] = None

    def get(self, path: str, host: str = "localhost") -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                self.conn.request("GET", path, headers={"Host": host})
                response = self.conn.getresponse()
                body = response.read()
                if response.will_close:
                    self.close()
                return response.status, body
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Twingress:
    """twistd -n ingress --kubeconfig ... on free loopback ports, with its admin endpoints."""

    def __init__(
        self, kubeconfig: Path, log_dir: Path, name: str = "twingress", workers: int = 1, extra_args: Sequence[str] = ()
    ) -> None:
        """EXTRA_ARGS come last on twistd's command line, so they win (e.g. ``--https tcp:PORT``)."""
        self.http_port = procs.free_port()
        self.admin_port = procs.free_port()
        while self.admin_port == self.http_port:
            self.admin_port = procs.free_port()
        argv = [
            sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; sys.exit(run())",
            "--pidfile=", "--logfile=-", "-n", "ingress",
            "--kubeconfig", str(kubeconfig),
            "--http", f"tcp:{self.http_port}:interface=127.0.0.1",
            "--admin", f"tcp:{self.admin_port}:interface=127.0.0.1",
            "--https", "",
            "--workers", str(workers),
            *extra_args,
        ]  # fmt: skip
        self.proc = procs.start(name, argv, log_dir, cpu=None, cwd=REPO)
        self.proxy = Http(self.http_port)
        self.admin = Http(self.admin_port, timeout=60.0)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc.popen.poll() is not None:
            raise RuntimeError(f"twingress exited with {self.proc.popen.returncode}:\n{self.proc.tail()}")

    def admin_get(self, path: str) -> tuple[int, bytes]:
        try:
            return self.admin.get(path)
        except OSError as e:
            self.check_alive()
            raise RuntimeError(f"twingress admin {path}: {e}; its log:\n{self.proc.tail()}") from e

    def readyz(self) -> tuple[int, dict]:
        status, body = self.admin_get("/readyz")
        try:
            return status, json.loads(body)
        except ValueError:
            return status, {}

    def wait_ready(self, timeout: float = 120.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            self.check_alive()
            try:
                if self.admin.get("/readyz")[0] == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"twingress not ready within {timeout:.0f} s:\n{self.proc.tail()}")

    def generation(self) -> int:
        return int(self.readyz()[1].get("generation", -1))

    def informer_objects(self, kind: str = "Ingress") -> int:
        return int(self.readyz()[1].get("informers", {}).get(kind, {}).get("objects", -1))

    def metrics(self) -> dict[str, float]:
        _, body = self.admin_get("/metrics")
        out: dict[str, float] = {}
        for line in body.decode().splitlines():
            m = re.match(r"(twingress_table_build_seconds_(?:sum|count)|twingress_table_generation) (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def route_hosts(self) -> list[str]:
        _, body = self.admin_get("/debug/routes")
        return list(json.loads(body).get("hosts", {}))

    def wait_live(
        self, host: str, path: str, expected: str, t0: float, timeout: float, interval: float = 0.0
    ) -> tuple[Optional[float], int]:
        """Poll the proxy until host+path answers 200 from backend EXPECTED: (seconds since t0, polls).
        Back to back, or with INTERVAL seconds of sleep between polls."""
        polls = 0
        while True:
            if polls and interval:
                time.sleep(interval)
            polls += 1
            try:
                status, body = self.proxy.get(path, host)
            except OSError:
                status, body = 0, b""
            if status == 200:
                try:
                    name = json.loads(body).get("name")
                except ValueError:
                    name = None
                if name == expected:
                    return time.monotonic() - t0, polls
            if time.monotonic() - t0 > timeout:
                self.check_alive()
                return None, polls

    def wait_generation_stable(self, quiet: float = 3.0, timeout: float = 300.0) -> int:
        """Until the live generation has not changed for QUIET seconds; returns it."""
        start = time.monotonic()
        last, since = self.generation(), time.monotonic()
        while time.monotonic() - start < timeout:
            time.sleep(0.2)
            g = self.generation()
            if g != last:
                last, since = g, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return g
        return last

    def stop(self) -> None:
        self.proxy.close()
        self.admin.close()
        procs.stop(self.proc, grace=10.0)


# --- convergence ---------------------------------------------------------------------------------


def series(
    name: str,
    tw: Twingress,
    n: int,
    change: Callable[[int], tuple[str, str, str]],
    gap: float,
    timeout: float,
    interval: float = 0.0,
) -> dict[str, Any]:
    """N changes: change(i) does the API write and returns (host, path, expected backend); then the
    proxy is polled. Times are from just after change(i) returned."""
    times: list[float] = []
    polls: list[int] = []
    failures = 0
    for i in range(n):
        host, path, expected, t0 = *change(i), time.monotonic()
        seconds, count = tw.wait_live(host, path, expected, t0, timeout, interval)
        polls.append(count)
        if seconds is None:
            failures += 1
            log(f"{name} #{i}: {host}{path} not live from {expected} within {timeout} s")
        else:
            times.append(seconds * 1000.0)
        time.sleep(gap)
    result = summary(times, failures)
    result["polls_median"] = statistics.median(polls) if polls else 0
    result["samples_ms"] = [round(t, 2) for t in times]
    log(f"{name}: " + fmt_series(result))
    return result


def fmt_series(r: dict[str, Any]) -> str:
    if not r.get("n"):
        return f"no samples ({r.get('failures', 0)} failures)"
    return (
        f"n={r['n']} p50={r['p50_ms']:.1f} ms p99={r['p99_ms']:.1f} ms max={r['max_ms']:.1f} ms"
        + (f" failures={r['failures']}" if r["failures"] else "")
    )


def convergence(api: Api, tw: Twingress, n: int, gap: float, timeout: float, interval: float) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def create(i: int) -> tuple[str, str, str]:
        host = f"c{i}.conv.test"
        api.create(ingress(f"c{i}", CONV_NS, host, "conv-a"))
        return host, "/", "conv-a"

    out["create"] = series("create", tw, n, create, gap, timeout, interval)

    api.create(ingress("upd-path", CONV_NS, "upd-path.conv.test", "conv-a", "/p0"))
    api.create(ingress("upd-backend", CONV_NS, "upd-backend.conv.test", "conv-a"))
    t0 = time.monotonic()
    for host, path in (("upd-path.conv.test", "/p0"), ("upd-backend.conv.test", "/")):
        if tw.wait_live(host, path, "conv-a", t0, timeout)[0] is None:
            raise RuntimeError(f"{host}{path} never became live")

    def update_path(i: int) -> tuple[str, str, str]:
        path = f"/p{i + 1}"
        api.patch_ingress(
            CONV_NS, "upd-path", [{"op": "replace", "path": "/spec/rules/0/http/paths/0/path", "value": path}]
        )
        return "upd-path.conv.test", path, "conv-a"

    def update_backend(i: int) -> tuple[str, str, str]:
        target = "conv-b" if i % 2 == 0 else "conv-a"
        api.patch_ingress(
            CONV_NS,
            "upd-backend",
            [{"op": "replace", "path": "/spec/rules/0/http/paths/0/backend/service/name", "value": target}],
        )
        return "upd-backend.conv.test", "/", target

    out["update-path"] = series("update-path", tw, n, update_path, gap, timeout, interval)
    out["update-backend"] = series("update-backend", tw, n, update_backend, gap, timeout, interval)
    api.create(service("upd-ep", CONV_NS))
    api.create(endpoint_slice("upd-ep", CONV_NS, (CONV_BACKENDS["conv-a"],)))
    api.create(ingress("upd-ep", CONV_NS, "upd-ep.conv.test", "upd-ep"))
    if tw.wait_live("upd-ep.conv.test", "/", "conv-a", time.monotonic(), timeout)[0] is None:
        raise RuntimeError("upd-ep.conv.test never became live")
    out["update-endpoints"] = series("update-endpoints", tw, n, lambda i: update_endpoints(api), gap, timeout, interval)
    return out


_ENDPOINT_AT = ["conv-a"]  # where the one endpoint of Service upd-ep is now


def update_endpoints(api: Api) -> tuple[str, str, str]:
    """The one endpoint of Service upd-ep moves to the other echo backend (a pod replaced by another)."""
    target = "conv-b" if _ENDPOINT_AT[0] == "conv-a" else "conv-a"
    _ENDPOINT_AT[0] = target
    api.patch_endpoint_slice(
        CONV_NS, "upd-ep-1", [{"op": "replace", "path": "/endpoints/0/addresses/0", "value": CONV_BACKENDS[target]}]
    )
    return "upd-ep.conv.test", "/", target


# --- scale ---------------------------------------------------------------------------------------


RouteBody = Callable[[str, str, str, str], dict]
"""(name, namespace, host, Service) -> the object that routes host to the Service: an Ingress, an HTTPRoute."""


def create_scale(
    api: Api, start: int, stop: int, threads: int, route: RouteBody = ingress, namespace: str = SCALE_NS, headless: bool = False
) -> tuple[float, str]:
    """Create Service, EndpointSlice and route s{i} (host s{i}.NAMESPACE.test) for i in [start, stop)
    with a thread pool. Returns (seconds, host of the route whose create returned last)."""
    last = {"t": 0.0, "host": ""}
    lock = threading.Lock()

    def one(i: int) -> None:
        name = f"s{i}"
        host = f"{name}.{namespace}.test"
        api.create_retrying(service(name, namespace, headless))
        api.create_retrying(endpoint_slice(name, namespace, SCALE_BACKENDS))
        api.create_retrying(route(name, namespace, host, name))
        now = time.monotonic()
        with lock:
            if now > last["t"]:
                last["t"], last["host"] = now, host

    t0 = time.monotonic()
    done = 0
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(one, i) for i in range(start, stop)]
        for f in concurrent.futures.as_completed(futures):
            f.result()
            done += 1
            if done % 1000 == 0:
                rate = 3 * done / (time.monotonic() - t0)
                log(f"  created {done}/{stop - start} (x3 objects, {rate:.0f} objects/s)")
    return time.monotonic() - t0, last["host"]


def wait_all_live(
    tw: Twingress, ingresses: int, scale_hosts: int, last_host: str, t0: float, timeout: float,
    kind: str = "Ingress", namespace: str = SCALE_NS,
) -> dict[str, Any]:
    """From t0 (the last create returned): informers hold every route (INGRESSES objects of KIND),
    the last host answers through the proxy, and /debug/routes has every host of NAMESPACE."""
    marks: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout:
        tw.check_alive()
        if "informers_s" not in marks:
            if tw.informer_objects(kind) >= ingresses:
                marks["informers_s"] = time.monotonic() - t0
            else:
                time.sleep(0.05)
                continue
        if "last_host_s" not in marks:
            status, body = tw.proxy.get("/", last_host)
            if status == 200 and json.loads(body).get("name") in SCALE_BACKENDS_NAMES:
                marks["last_host_s"] = time.monotonic() - t0
            else:
                time.sleep(0.01)
                continue
        hosts = sum(1 for h in tw.route_hosts() if h.endswith(f".{namespace}.test"))
        marks["route_hosts"] = hosts
        if hosts >= scale_hosts:
            marks["all_live_s"] = time.monotonic() - t0
            return marks
        time.sleep(0.2)
    marks["timeout"] = True
    return marks


SCALE_BACKENDS_NAMES = tuple(f"scale-{a.rsplit('.', 1)[1]}" for a in SCALE_BACKENDS)


def touch_ingress(api: Api, name: str) -> Callable[[int], None]:
    """A change that makes a full build and nothing else: an annotation on Ingress NAME."""
    return lambda k: api.patch_ingress(SCALE_NS, name, [{"op": "add", "path": "/metadata/annotations", "value": {"bench/touch": str(k)}}])


def rebuilds(tw: Twingress, count: int, touch: Callable[[int], None]) -> dict[str, Any]:
    """TOUCH an object COUNT times; each time the build histogram diff gives that build's time, and
    the write-to-new-generation time is measured from the API call's return."""
    builds: list[float] = []
    swaps: list[float] = []
    cpus: list[float] = []
    counts: list[int] = []
    for k in range(count):
        before = tw.metrics()
        cpu0 = proc_status(tw.pid)["cpu_s"]
        gen = int(before.get("twingress_table_generation", 0))
        touch(k)
        t0 = time.monotonic()
        while tw.generation() <= gen:
            if time.monotonic() - t0 > 120:
                raise RuntimeError("no rebuild within 120 s after touching an Ingress")
            time.sleep(0.005)
        swaps.append((time.monotonic() - t0) * 1000.0)
        # let a possible second (coalesced) build finish, then diff the histogram
        tw.wait_generation_stable(quiet=1.0, timeout=60)
        cpus.append((proc_status(tw.pid)["cpu_s"] - cpu0) * 1000.0)
        after = tw.metrics()
        dcount = after["twingress_table_build_seconds_count"] - before["twingress_table_build_seconds_count"]
        dsum = after["twingress_table_build_seconds_sum"] - before["twingress_table_build_seconds_sum"]
        counts.append(int(dcount))
        builds.append(dsum / dcount * 1000.0 if dcount else float("nan"))
    return {
        "build_ms": [round(b, 1) for b in builds],
        "build_ms_median": statistics.median(builds),
        "build_ms_max": max(builds),
        "builds_per_touch": counts,
        "process_cpu_ms": [round(c) for c in cpus],
        "process_cpu_ms_median": statistics.median(cpus),
        "write_to_swap_ms": [round(s, 1) for s in swaps],
        "write_to_swap_ms_median": statistics.median(swaps),
    }


def steady_memory(tw: Twingress) -> dict[str, Any]:
    gen = tw.wait_generation_stable(quiet=3.0)
    time.sleep(2.0)
    st = proc_status(tw.pid)
    return {"generation": gen, "rss_mb": st["VmRSS"], "hwm_mb": st["VmHWM"], "cpu_s": st["cpu_s"]}


BASELINE_NS = "baseline"


def baseline_rate(workdir: Path, n: int, threads: int, headless: bool = False) -> dict[str, Any]:
    """
    Objects/s creating N (Service, EndpointSlice, Ingress of another class) with no twingress
    running, in a control plane of its own (fresh, as the main one is when twingress's scale step
    creates the same objects: an etcd that held and deleted them first writes slower), stopped after.
    """
    kube = cluster.KubeCluster(cluster.bin_dir(), workdir)
    try:
        kube.start()
        api = Api(kube.kubeconfig)
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BASELINE_NS}})

        def other_class(name: str, namespace: str, host: str, service_name: str) -> dict:
            body = ingress(name, namespace, host, service_name)
            body["spec"]["ingressClassName"] = "not-twingress"
            return body

        seconds, _ = create_scale(api, 0, n, threads, other_class, BASELINE_NS, headless)
    finally:
        kube.stop()
    return {"objects": 3 * n, "seconds": round(seconds, 2), "objects_per_s": round(3 * n / seconds, 1)}


def scale_phase(api: Api, tw: Twingress, n: int, have: int, conv_ingresses: int, args: argparse.Namespace) -> dict[str, Any]:
    log(f"scale {n}: creating Ingresses s{have}..s{n - 1} (+ Service + EndpointSlice each), {args.threads} threads")
    m0 = tw.metrics()
    cpu0 = proc_status(tw.pid)["cpu_s"]
    create_s, last_host = create_scale(api, have, n, args.threads, headless=args.headless_services)
    t_last = time.monotonic()
    objects = 3 * (n - have)
    log(f"scale {n}: {objects} objects in {create_s:.1f} s ({objects / create_s:.0f}/s); waiting for all live")
    live = wait_all_live(tw, conv_ingresses + n, n, last_host, t_last, args.live_timeout)
    log(f"scale {n}: {live}")
    m1 = tw.metrics()
    builds_during = m1["twingress_table_build_seconds_count"] - m0["twingress_table_build_seconds_count"]
    build_s_during = m1["twingress_table_build_seconds_sum"] - m0["twingress_table_build_seconds_sum"]
    cpu1 = proc_status(tw.pid)["cpu_s"]
    tw.wait_generation_stable(quiet=3.0)
    rb = rebuilds(tw, args.rebuilds, touch_ingress(api, f"s{n - 1}"))
    log(f"scale {n}: rebuild {rb['build_ms']} ms (process CPU {rb['process_cpu_ms']} ms), write->swap {rb['write_to_swap_ms']} ms")
    conv: dict[str, Any] = {}
    for k, interval in enumerate(args.scale_poll_intervals if args.scale_changes else ()):
        tw.wait_generation_stable(quiet=1.0)

        def create(i: int, k: int = k) -> tuple[str, str, str]:
            host = f"x{n}-{k}-{i}.conv.test"
            api.create(ingress(f"x{n}-{k}-{i}", CONV_NS, host, "conv-a"))
            return host, "/", "conv-a"

        label = f"create @ {n}" + (f", poll {interval * 1000:g}ms" if interval else "")
        conv[label] = series(label, tw, args.scale_changes, create, args.gap, args.timeout, interval)
    if args.scale_changes and args.changes:  # the Service whose endpoint moves is made by the convergence series
        tw.wait_generation_stable(quiet=1.0)
        label = f"update-endpoints @ {n}"
        conv[label] = series(label, tw, args.scale_changes, lambda i: update_endpoints(api), args.gap, args.timeout)
    mem = steady_memory(tw)
    log(f"scale {n}: steady RSS {mem['rss_mb']:.0f} MB (peak {mem['hwm_mb']:.0f} MB)")
    return {
        "ingresses": n,
        "create_s": create_s,
        "objects_per_s": objects / create_s,
        "last_host": last_host,
        "live": live,
        "builds_during_create": int(builds_during),
        "build_s_during_create": build_s_during,
        "twingress_cpu_s_during_create": cpu1 - cpu0,
        "rebuild": rb,
        "convergence": conv,
        "memory": mem,
    }


def cold_start(kubeconfig: Path, log_dir: Path, n: int, conv_ingresses: int, last_host: str, timeout: float) -> dict[str, Any]:
    tw = Twingress(kubeconfig, log_dir, name="twingress-cold")
    try:
        t0 = time.monotonic()
        ready_s = tw.wait_ready(timeout)
        live = wait_all_live(tw, conv_ingresses + n, n, last_host, t0, timeout)
        mem = steady_memory(tw)
        m = tw.metrics()
        return {
            "ready_s": ready_s,
            "all_live_s": live.get("all_live_s"),
            "builds": int(m.get("twingress_table_build_seconds_count", 0)),
            "build_s_total": m.get("twingress_table_build_seconds_sum", 0.0),
            "memory": mem,
        }
    finally:
        tw.stop()


# --- report --------------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    add("")
    add(f"twingress convergence benchmark  ({result['machine']['cpus']} CPUs)")
    add(f"load average at start: {result['loadavg_start']}   at end: {result['loadavg_end']}")
    cs = result["cluster_startup_s"]
    add(
        "control plane setup: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in cs.items() if k != "total")
        + f"; total {cs['total']:.1f} s"
    )
    add(f"twingress ready (empty-ish cluster): {result['twingress_ready_s']:.2f} s")
    add("")
    rows = list(result["convergence"].items())
    for s in result["scale"]:
        rows.extend(s.get("convergence", {}).items())
    if rows:
        add(f"Convergence: API write returned -> 200 from the expected backend through the proxy (target p99 <= {TARGET_P99_MS:.0f} ms)")
        add(f"  {'series':<28}{'n':>5}{'fail':>6}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}  target")
    for name, r in rows:
        if not r.get("n"):
            add(f"  {name:<28}{0:>5}{r.get('failures', 0):>6}")
            continue
        ok = "ok" if r["p99_ms"] <= TARGET_P99_MS and not r["failures"] else "MISSED"
        add(
            f"  {name:<28}{r['n']:>5}{r['failures']:>6}{r['p50_ms']:>9.1f}{r['p90_ms']:>9.1f}"
            f"{r['p99_ms']:>9.1f}{r['max_ms']:>9.1f}  {ok}"
        )
    if result["scale"]:
        add("")
        add(f"Scale (each Ingress with its own Service and EndpointSlice of 3 endpoints; targets: rebuild <= {TARGET_REBUILD_S:.0f} s at 10k, RSS <= {TARGET_RSS_MB:.0f} MB at 10k)")
        add(
            f"  {'ingresses':>9}{'create s':>10}{'obj/s':>7}{'->live s':>10}{'builds':>8}"
            f"{'rebuild ms':>12}{'cpu ms':>8}{'->swap ms':>11}{'RSS MB':>8}{'peak MB':>9}"
        )
        for s in result["scale"]:
            live = s["live"].get("all_live_s")
            add(
                f"  {s['ingresses']:>9}{s['create_s']:>10.1f}{s['objects_per_s']:>7.0f}"
                f"{(f'{live:.2f}' if live is not None else 'TIMEOUT'):>10}{s['builds_during_create']:>8}"
                f"{s['rebuild']['build_ms_median']:>12.0f}{s['rebuild']['process_cpu_ms_median']:>8.0f}"
                f"{s['rebuild']['write_to_swap_ms_median']:>11.0f}"
                f"{s['memory']['rss_mb']:>8.0f}{s['memory']['hwm_mb']:>9.0f}"
            )
        add("  ->live s: last create returned -> every host in the live table and the last one answering through the proxy")
        add("  builds: table builds while creating; rebuild ms: median of build_seconds (wall) after touching one Ingress;")
        add("  cpu ms: twingress process CPU (user+sys) around that touch: the rebuild's cost without waiting for a core;")
        add("  ->swap ms: API write returned -> new generation live (informer + debounce + build + swap)")
        for s in result["scale"]:
            lines.extend(_issue_16_lines(s, result.get("baseline"), result.get("cold_start")))
    cold = result.get("cold_start")
    if cold:
        add("")
        add(
            f"Cold start at {cold['ingresses']} Ingresses: ready in {cold['ready_s']:.2f} s, all live in "
            f"{cold['all_live_s'] if cold['all_live_s'] is None else round(cold['all_live_s'], 2)} s, "
            f"{cold['builds']} builds ({cold['build_s_total']:.2f} s), steady RSS {cold['memory']['rss_mb']:.0f} MB "
            f"(peak {cold['memory']['hwm_mb']:.0f} MB)"
        )
    if result.get("gateway"):
        import convergence_gateway

        lines.extend(convergence_gateway.report_lines(result["gateway"]))
    add(f"total run time {result['elapsed_s']:.0f} s")
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--changes", type=int, default=200, help="changes per convergence series (200)")
    p.add_argument("--workers", type=int, default=1, help="twingress --workers: live means live in the worker that answered (1)")
    p.add_argument("--scale", default="1000,10000", help="Ingress counts, cumulative ('' to skip)")
    p.add_argument("--threads", type=int, default=12, help="threads creating scale objects (12)")
    p.add_argument("--rebuilds", type=int, default=5, help="touches of one Ingress per scale step (5)")
    p.add_argument("--scale-changes", type=int, default=20, help="convergence changes at each scale step (20)")
    p.add_argument("--poll-interval", type=float, default=0.0, help="sleep between proxy polls, s (0: back to back)")
    p.add_argument(
        "--scale-poll-intervals",
        type=lambda v: [float(x) for x in v.split(",") if x.strip()],
        default=[0.0, 0.01],
        help="one convergence series per poll interval at each scale step (0,0.01)",
    )
    p.add_argument("--gap", type=float, default=0.05, help="pause between convergence changes, s (0.05)")
    p.add_argument("--timeout", type=float, default=30.0, help="per-change convergence timeout, s (30)")
    p.add_argument("--live-timeout", type=float, default=600.0, help="timeout for a scale step to go live, s")
    p.add_argument("--no-cold-start", dest="cold_start", action="store_false", help="skip the cold start")
    p.add_argument("--baseline", type=int, default=0, help="routes created (x3 objects) before twingress starts, for the creation rate without it (0: skip)")
    p.add_argument(
        "--headless-services",
        action="store_true",
        help="scale (and baseline) Services without a cluster IP: this control plane allocates cluster IPs in time growing with their number (74/s at 6k), which 50k would take hours for",
    )
    p.add_argument("--gateway-routes", type=int, default=0, help="HTTPRoutes on a Gateway of ours (0: no Gateway phase)")
    p.add_argument("--gateway-changes", type=int, default=200, help="new HTTPRoute hosts timed with the Gateway's routes (200)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--keep-logs", type=Path, help="copy the logs (cluster, twingress) here")
    return p.parse_args(argv)


def _issue_16_lines(scale: dict[str, Any], baseline: Optional[dict[str, Any]], cold: Optional[dict[str, Any]]) -> list[str]:
    """The large-cluster issue's targets at this size, each with the measured value and ok/MISSED."""
    targets = SCALE_TARGETS.get(scale["ingresses"])
    if targets is None:
        return []
    host_p99, endpoint_p99, cold_s, rss_mb = targets
    conv = scale.get("convergence", {})
    found: list[tuple[str, Optional[float], float]] = [
        ("new host live p99 ms", conv.get(f"create @ {scale['ingresses']}", {}).get("p99_ms"), host_p99),
        ("endpoint moved p99 ms", conv.get(f"update-endpoints @ {scale['ingresses']}", {}).get("p99_ms"), endpoint_p99),
        ("steady RSS MB", scale["memory"]["rss_mb"], rss_mb),
    ]
    if cold and cold["ingresses"] == scale["ingresses"]:
        found.append(("cold start to ready s", cold["ready_s"], cold_s))
    lines = [f"  at {scale['ingresses']}: " + ", ".join(f"{name} {value:.1f} (<= {limit:g}: {'ok' if value <= limit else 'MISSED'})" for name, value, limit in found if value is not None)]
    if baseline:
        ratio = scale["objects_per_s"] / baseline["objects_per_s"]
        verdict = "ok" if ratio >= TARGET_CREATION_RATIO else "MISSED"
        rates = f"{scale['objects_per_s']:.0f}/s with twingress, {baseline['objects_per_s']:.0f}/s without"
        lines.append(f"  at {scale['ingresses']}: creation {rates}: {ratio:.2f}x (>= {TARGET_CREATION_RATIO}: {verdict})")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    scales = sorted(int(s) for s in args.scale.split(",") if s.strip())
    if not cluster.address_exists(SCALE_BACKENDS[-1]):
        print("run inside the test network namespace: testenv/netns-run .venv/bin/python -m bench convergence", file=sys.stderr)
        return 2
    started = time.monotonic()
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count()},
        "loadavg_start": loadavg(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    log(f"load average {result['loadavg_start']}")
    work = Path(tempfile.mkdtemp(prefix="twingress-convergence-"))
    log_dir = work / "logs"
    log_dir.mkdir()
    kube: Optional[cluster.KubeCluster] = None
    failed = True
    try:
        with ExitStack() as stack:
            if args.baseline:
                result["baseline"] = baseline_rate(work / "baseline-kube", args.baseline, args.threads, args.headless_services)
                log(f"baseline without twingress (a control plane of its own): {result['baseline']}")
            kube = cluster.KubeCluster(cluster.bin_dir(), work / "kube")
            stack.callback(kube.stop)
            kube.start()
            result["cluster_startup_s"] = dict(kube.startup_seconds)
            log(f"control plane up in {kube.startup_seconds['total']:.1f} s")

            for name, address in CONV_BACKENDS.items():
                stack.callback(EchoBackend(name, address, BACKEND_PORT).stop)
            for address in SCALE_BACKENDS:
                stack.callback(EchoBackend(f"scale-{address.rsplit('.', 1)[1]}", address, BACKEND_PORT).stop)

            api = Api(kube.kubeconfig)
            api.create(
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "IngressClass",
                    "metadata": {"name": "twingress"},
                    "spec": {"controller": "twingress.io/ingress-controller"},
                }
            )
            for ns in (CONV_NS, SCALE_NS):
                api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            for name, address in CONV_BACKENDS.items():
                api.create(service(name, CONV_NS))
                api.create(endpoint_slice(name, CONV_NS, (address,)))

            tw = Twingress(kube.kubeconfig, log_dir, workers=args.workers)
            stack.callback(tw.stop)
            result["twingress_ready_s"] = tw.wait_ready()
            log(f"twingress ready in {result['twingress_ready_s']:.2f} s (pid {tw.pid})")

            result["convergence"] = {}
            if args.changes:
                log(f"convergence: 4 series of {args.changes} changes")
                result["convergence"] = convergence(api, tw, args.changes, args.gap, args.timeout, args.poll_interval)
            conv_ingresses = args.changes + 2 if args.changes else 0

            if args.gateway_routes:
                import convergence_gateway

                result["gateway"] = convergence_gateway.gateway_phase(api, tw, args)

            result["scale"] = []
            have = 0
            for n in scales:
                step = scale_phase(api, tw, n, have, conv_ingresses, args)
                result["scale"].append(step)
                conv_ingresses += args.scale_changes * len(args.scale_poll_intervals)
                have = n

            if args.cold_start and scales:
                tw.stop()  # one twingress at a time: the machine has few cores
                log(f"cold start against {scales[-1]} Ingresses")
                cold = cold_start(kube.kubeconfig, log_dir, scales[-1], conv_ingresses, result["scale"][-1]["last_host"], args.live_timeout)
                cold["ingresses"] = scales[-1]
                result["cold_start"] = cold
                log(f"cold start: {cold}")
        failed = False
    finally:
        if failed and not args.keep_logs:
            args.keep_logs = Path(tempfile.mkdtemp(prefix="twingress-convergence-failed-"))
            log(f"failed: logs kept in {args.keep_logs}")
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for d in (log_dir, work / "kube" / "logs"):
                if d.is_dir():
                    for f in d.iterdir():
                        shutil.copy(f, args.keep_logs / f.name)
        shutil.rmtree(work, ignore_errors=True)

    result["loadavg_end"] = loadavg()
    result["elapsed_s"] = time.monotonic() - started
    print(report(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    # Run as the module ``convergence``, the one convergence_gateway imports: one copy of its code.
    import convergence as _module

    sys.exit(_module.main())
