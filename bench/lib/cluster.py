"""
The cluster the cluster scenarios run against: the real control plane of testenv/ (etcd,
kube-apiserver, kube-controller-manager, started by tests/kube/cluster.py, the code the kube tests
start it with), echo backends on pod-like addresses, the objects of a route (Service, EndpointSlice,
Ingress), an API client that answers as soon as the apiserver has, and the filling of a cluster
with N routes by a thread pool.  It runs in the test network namespace (testenv/netns-run): the
apiserver takes no loopback endpoint.
"""

from __future__ import annotations

import concurrent.futures
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from bench.lib import cpu, procs
from tests.kube import cluster
from tests.support import EchoBackend

CONV_NS, SCALE_NS = "conv", "scale"
CONV_BACKENDS = {"conv-a": "10.244.0.5", "conv-b": "10.244.0.6"}
SCALE_BACKENDS = ("10.244.0.10", "10.244.0.11", "10.244.0.12")
SCALE_BACKEND_NAMES = tuple(f"scale-{a.rsplit('.', 1)[1]}" for a in SCALE_BACKENDS)
BACKEND_PORT = 8080
GATEWAY_GROUP = "gateway.networking.k8s.io"
INGRESS_CLASS = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "twingress"},
                 "spec": {"controller": "twingress.io/ingress-controller"}}

Body = dict[str, Any]


def log(message: str) -> None:
    """A progress line on stderr (the table goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def missing() -> str:
    """Why the cluster cannot start here, or "": the kube binaries of testenv/ and the network namespace."""
    try:
        absent = cluster.missing_binaries(cluster.bin_dir())
    except Exception as e:  # noqa: BLE001 - testenv/build.sh failing to locate them is one line for the user
        return f"cannot locate the kube test binaries: {e}"
    if absent:
        return f"kube test binaries missing ({', '.join(absent)}): make testenv"
    if not cluster.address_exists(SCALE_BACKENDS[-1]):
        return "run inside the test network namespace: testenv/netns-run .venv/bin/python -m bench ..."
    return ""


def start_control_plane(children: procs.Children, name: str = "kube") -> cluster.KubeCluster:
    """A fresh control plane in the run's work directory, stopped with the run; its logs beside the children's (--keep-logs)."""
    kube = cluster.KubeCluster(cluster.bin_dir(), children.workdir / name)
    children.stack.callback(kube.stop)
    kube.start()
    for path in kube.log_dir.glob("*.log"):
        link = children.workdir / f"{name}-{path.name}"
        if not link.exists():
            link.symlink_to(path)
    return kube


def start_echo(children: procs.Children, name: str, address: str) -> None:
    """examples/echo.py on ADDRESS:8080, answering with its NAME, stopped with the run."""
    children.stack.callback(EchoBackend(name, address, BACKEND_PORT).stop)


def start_scale_backends(children: procs.Children) -> None:
    for address, name in zip(SCALE_BACKENDS, SCALE_BACKEND_NAMES, strict=True):
        start_echo(children, name, address)


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) in MB and CPU seconds (user + system) of one process."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024.0
    out["cpu_s"] = sum(cpu.user_system_seconds(pid))
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summary(ms: list[float], failures: int) -> dict[str, Any]:
    """n, failures and the distribution (p50, p90, p99, max, min, mean) of times in ms."""
    if not ms:
        return {"n": 0, "failures": failures}
    return {"n": len(ms), "failures": failures, "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90), "p99_ms": percentile(ms, 99),
            "max_ms": max(ms), "min_ms": min(ms), "mean_ms": statistics.fmean(ms)}


# --- objects -------------------------------------------------------------------------------------


def namespace(name: str) -> Body:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def service(name: str, ns: str, headless: bool = False) -> Body:
    """C{headless}: no cluster IP, which twingress does not use (routes go to the endpoints), and which this control plane allocates slowly by the thousand."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": BACKEND_PORT}], **({"clusterIP": "None"} if headless else {})}}


def endpoint_slice(service_name: str, ns: str, addresses: tuple[str, ...]) -> Body:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service_name}-1", "namespace": ns, "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": BACKEND_PORT}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]}


def ingress(name: str, ns: str, host: str, service_name: str, path: str = "/") -> Body:
    backend = {"service": {"name": service_name, "port": {"number": 80}}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name, "namespace": ns},
            "spec": {"ingressClassName": "twingress",
                     "rules": [{"host": host, "http": {"paths": [{"path": path, "pathType": "Prefix", "backend": backend}]}}]}}


class Api:
    """The kubernetes client, one ApiClient per thread, raw responses (no model deserialization, so a
    call returns when the apiserver has answered: the time a change is measured from)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = str(kubeconfig)
        self._local = threading.local()

    def client(self) -> k8s.ApiClient:
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = k8s_config.new_client_from_config(self.kubeconfig)
        return c

    @staticmethod
    def drain(response: Any) -> bytes:
        body: bytes = response.read()
        response.release_conn()
        return body

    def create(self, body: Body) -> None:
        c, kind, ns = self.client(), body["kind"], body["metadata"].get("namespace")
        r: Any
        if kind == "Service":
            r = k8s.CoreV1Api(c).create_namespaced_service(ns, body, _preload_content=False)
        elif kind == "Secret":
            r = k8s.CoreV1Api(c).create_namespaced_secret(ns, body, _preload_content=False)
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
        self.drain(r)

    def create_retrying(self, body: Body, attempts: int = 6) -> None:
        """L{create}, again after throttling, server and connection errors; AlreadyExists is fine."""
        retrying(lambda: self.create(body), attempts, exists_ok=True, reset=self._reset)

    def _reset(self) -> None:
        self._local.client = None

    def patch_endpoint_slice(self, ns: str, name: str, ops: list[Body]) -> bytes:
        """A JSON patch on one EndpointSlice; the patched slice as JSON (its resourceVersion names its watch event)."""
        return self.drain(k8s.DiscoveryV1Api(self.client()).patch_namespaced_endpoint_slice(name, ns, ops, _preload_content=False))

    def patch_ingress(self, ns: str, name: str, ops: list[Body]) -> None:
        self.drain(k8s.NetworkingV1Api(self.client()).patch_namespaced_ingress(name, ns, ops, _preload_content=False))

    def patch_secret(self, ns: str, name: str, ops: list[Body]) -> None:
        self.drain(k8s.CoreV1Api(self.client()).patch_namespaced_secret(name, ns, ops, _preload_content=False))

    def patch_route(self, ns: str, name: str, merge: Body) -> None:
        """A merge patch on one HTTPRoute."""
        custom = k8s.CustomObjectsApi(self.client())
        self.drain(custom.patch_namespaced_custom_object(GATEWAY_GROUP, "v1", ns, "httproutes", name, merge, _preload_content=False))

    def delete(self, kind: str, ns: str, name: str) -> None:
        c = self.client()
        call = {"Ingress": k8s.NetworkingV1Api(c).delete_namespaced_ingress, "Service": k8s.CoreV1Api(c).delete_namespaced_service,
                "Secret": k8s.CoreV1Api(c).delete_namespaced_secret,
                "EndpointSlice": k8s.DiscoveryV1Api(c).delete_namespaced_endpoint_slice}[kind]
        self.drain(call(name, ns, _preload_content=False))


def retrying(call: Callable[[], None], attempts: int = 6, exists_ok: bool = False, reset: Callable[[], None] = lambda: None) -> None:
    """CALL(), again after throttling (429), server errors and connection errors, backing off."""
    for attempt in range(attempts):
        try:
            return call()
        except ApiException as e:
            if exists_ok and e.status == 409:
                return
            if e.status not in (429, 500, 503, 504) or attempt == attempts - 1:
                raise
        except OSError:
            if attempt == attempts - 1:
                raise
            reset()
        time.sleep(0.2 * 2**attempt)


RouteBody = Callable[[str, str, str, str], Body]
"""(name, namespace, host, Service) -> the object that routes host to the Service: an Ingress, an HTTPRoute."""


def fill(api: Api, start: int, stop: int, threads: int, route: RouteBody = ingress, ns: str = SCALE_NS, headless: bool = False) -> tuple[float, str]:
    """Service, EndpointSlice (the three scale endpoints) and route s{i} (host s{i}.NS.test) for i in
    [start, stop), by a thread pool: (seconds, the host of the route whose create returned last)."""
    last: dict[str, Any] = {"t": 0.0, "host": ""}
    lock = threading.Lock()

    def one(i: int) -> None:
        name = f"s{i}"
        host = f"{name}.{ns}.test"
        api.create_retrying(service(name, ns, headless))
        api.create_retrying(endpoint_slice(name, ns, SCALE_BACKENDS))
        api.create_retrying(route(name, ns, host, name))
        now = time.monotonic()
        with lock:
            if now > last["t"]:
                last["t"], last["host"] = now, host

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for done, future in enumerate(concurrent.futures.as_completed([pool.submit(one, i) for i in range(start, stop)]), 1):
            future.result()
            if done % 1000 == 0:
                log(f"  created {done}/{stop - start} (x3 objects, {3 * done / (time.monotonic() - t0):.0f} objects/s)")
    return time.monotonic() - t0, str(last["host"])
