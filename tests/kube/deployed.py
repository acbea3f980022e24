"""
twingress installed on the test node, as the install tests share it: k8s/ applied with kubectl
(tests/kube/test_deployment.py) or charts/twingress installed with Helm (tests/kube/test_chart.py).

L{Deployed} reads the installed pods; L{install_app} adds the echo app with an Ingress (HTTP and
HTTPS) and a StreamIngress, served through the node's ports; L{run_case} runs the client mix of
tests/kube/upgrade_traffic.py around one lifecycle event and measures it (the overlap of the two
pods, the kernel's counters, the listening sockets' inodes), and L{assert_lost_nothing} holds it to
the hand-over's promise: nothing refused, reset, answered 5xx or left to time out.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.kube.deploy_support import Traffic, process_ids
from tests.kube.node import ECHO_PORT, KubeNode, echo_deployment
from tests.kube.twingress import wait_until
from tests.kube.upgrade_traffic import Mix
from tests.proxy.certs import CertificateAuthority
from tests.proxy.handover_support import listening_inodes

NAMESPACE = "twingress"
APP_NAMESPACE = "deploy-test"
APP = "deploy-echo"
HOST = "echo.deploy.test"
TLS_HOST = "secure.deploy.test"
STREAM_PORT = 9700  # a StreamIngress to the echo pods
ROLLOUT_WAIT = "240s"
IN_THE_IMAGE = "/opt/twingress/"  # the image's venv: tells the pod's processes from the test run's own twistd
POD_SELECTOR = "app.kubernetes.io/name=twingress"


@dataclass
class Deployed:
    node: KubeNode
    image: str
    rollout_image: str
    workload: str = "daemonset/twingress"

    @property
    def address(self) -> str:
        return self.node.address

    def kubectl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return self.node.kubectl(*args, timeout=timeout)

    def pods(self) -> list[dict]:
        """Every twingress pod, those being deleted too."""
        return list(json.loads(self.kubectl("-n", NAMESPACE, "get", "pods", "-l", POD_SELECTOR, "-o", "json").stdout)["items"])

    def pod(self) -> dict:
        """The one twingress pod that is not being deleted."""
        pods = self.pods()
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == 1, [p["metadata"]["name"] for p in pods]
        return live[0]

    def rolled_out(self) -> None:
        try:
            self.kubectl("-n", NAMESPACE, "rollout", "status", self.workload, f"--timeout={ROLLOUT_WAIT}", timeout=300)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.diagnosis()}") from None

    def diagnosis(self) -> str:
        """What an operator would look at when the pods do not become ready: the pods, their events and logs."""
        described = self.node.kubectl("-n", NAMESPACE, "describe", "pods", check=False).stdout
        logs = self.node.kubectl("-n", NAMESPACE, "logs", "-l", POD_SELECTOR, "--tail=60", check=False)
        return f"--- kubectl describe pods\n{described[-6000:]}\n--- kubectl logs\n{(logs.stdout + logs.stderr)[-6000:]}"


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _app_objects(image: str) -> list[dict]:
    """The echo Deployment, a Service selecting its pods (the endpointslice controller writes its slices), an Ingress for both hosts."""
    labels = {"app": APP}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": APP, "namespace": APP_NAMESPACE},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": ECHO_PORT}]},
    }
    backend = {"service": {"name": APP, "port": {"number": 80}}}
    rules = [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}} for host in (HOST, TLS_HOST)]
    ingress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": APP, "namespace": APP_NAMESPACE},
        "spec": {"ingressClassName": "twingress", "tls": [{"hosts": [TLS_HOST], "secretName": "deploy-tls"}], "rules": rules},
    }
    stream = {
        "apiVersion": "twingress.io/v1alpha1",
        "kind": "StreamIngress",
        "metadata": {"name": APP, "namespace": APP_NAMESPACE},
        "spec": {"listen": STREAM_PORT, "upstream": {"service": APP, "port": 80}},
    }
    return [echo_deployment(APP, APP_NAMESPACE, image, 2), service, ingress, stream]


def install_app(state: Deployed, work: Path) -> None:
    """The echo app with its TLS Secret, Ingress and StreamIngress, answering through the node's ports."""
    leaf = CertificateAuthority("deploy test CA").issue([TLS_HOST])
    (work / "tls.crt").write_bytes(leaf.fullchain_pem())
    (work / "tls.key").write_bytes(leaf.key_pem())
    state.kubectl("create", "namespace", APP_NAMESPACE)
    state.kubectl("-n", APP_NAMESPACE, "create", "secret", "tls", "deploy-tls", f"--cert={work / 'tls.crt'}", f"--key={work / 'tls.key'}")
    state.node.apply(yaml.safe_dump_all(_app_objects(state.node.echo_image)))
    state.kubectl("-n", APP_NAMESPACE, "rollout", "status", f"deployment/{APP}", f"--timeout={ROLLOUT_WAIT}", timeout=300)
    wait_until(lambda: Traffic(state.address, 80, HOST).one().kind == "ok", 90, f"http://{HOST} answered through the node")
    wait_until(lambda: Traffic(state.address, STREAM_PORT, HOST).one().kind == "ok", 90, f"the stream port {STREAM_PORT} relaying to the echo pods")


def echo_pods(deployed: Deployed) -> set[str]:
    """The names of the echo pods that are ready, as the apiserver lists them."""
    pods = json.loads(deployed.kubectl("-n", APP_NAMESPACE, "get", "pods", "-l", f"app={APP}", "-o", "json").stdout)["items"]
    return {p["metadata"]["name"] for p in pods if ready(p) and not p["metadata"].get("deletionTimestamp")}


def assert_routes_to_every_echo_pod(deployed: Deployed) -> None:
    """
    Both echo pods answer, through the node's :80 and :443. The second pod's endpoint reaches the
    proxy's table through an EndpointSlice update that may come after the first answer the install
    waited for, so each port is given until that update shows (60 s) to have answered from both.
    """
    pods = echo_pods(deployed)
    assert len(pods) == 2, pods
    for port, host, tls in ((80, HOST, False), (443, TLS_HOST, True)):
        seen = _answered_from_every_pod(Traffic(deployed.address, port, host, tls=tls), pods)
        assert seen - {""} <= pods, (port, seen, pods)


def _answered_from_every_pod(traffic: Traffic, pods: set[str]) -> set[str]:
    """Ten requests at a time until every one of C{pods} has answered (60 s at most); the backends seen."""
    seen: set[str] = set()

    def every_pod_answered() -> bool:
        seen.update(traffic.one().backend for _ in range(10))
        return seen >= pods

    try:
        wait_until(every_pod_answered, 60, f"every echo pod answering through :{traffic.port}")
    except AssertionError:
        raise AssertionError((traffic.port, sorted(seen), sorted(pods))) from None
    return seen


def published(deployed: Deployed) -> list[str]:
    """The echo Ingress's status.loadBalancer.ingress, as written by the pod (each entry's IP, else its hostname)."""
    ingress = json.loads(deployed.kubectl("-n", APP_NAMESPACE, "get", "ingress", APP, "-o", "json").stdout)
    return [entry.get("ip") or entry.get("hostname", "") for entry in ingress.get("status", {}).get("loadBalancer", {}).get("ingress", [])]


def wait_gone(deployed: Deployed, namespace: str, timeout: float = 240.0) -> None:
    """Until C{namespace} no longer exists (one being deleted holds its pods, and the node's ports, until it is)."""
    wait_until(lambda: not deployed.kubectl("get", "namespace", namespace, "--ignore-not-found", "-o", "name").stdout.strip(), timeout, f"namespace {namespace} gone")


NSTAT = ("TcpExtListenDrops", "TcpExtListenOverflows", "TcpOutRsts")


def _nstat() -> dict[str, int]:
    """The kernel's counters of the node's network namespace (absolute; the history file left alone)."""
    out = subprocess.run(["nstat", "-asz", *NSTAT], capture_output=True, text=True, check=True).stdout
    found = {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line and not line.startswith("#")}
    return {name: found.get(name, 0) for name in NSTAT}


def _parent(pid: int) -> int:
    try:
        return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("PPid:"))
    except (OSError, StopIteration):
        return 0


def primaries() -> list[int]:
    """
    The twingress primaries on the node (one per pod), not counting a child a primary has forked
    and not yet exec'd (a worker process being started shows its parent's command line until then).
    """
    found = process_ids(IN_THE_IMAGE, "twistd --pidfile= -n ingress")
    return [pid for pid in found if _parent(pid) not in found]


class Overlap:
    """How long two twingress primaries (two pods) ran at once, from the node's process table, polled."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Overlap:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _poll(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.1):
            now, running = time.monotonic(), len(primaries())
            self.most = max(self.most, running)
            if running >= 2:
                self.seconds += now - last
            last = now


@dataclass
class Measured:
    """What one case measured."""

    mix: Mix
    overlap: Overlap
    counters: tuple[dict[str, int], dict[str, int]]
    inodes: tuple[dict[int, set[int]], dict[int, set[int]]]

    def line(self, name: str) -> str:
        before, after = self.counters
        counters = ", ".join(f"{name} {before[name]}->{after[name]}" for name in NSTAT)
        inodes = "; ".join(f":{port} {sorted(self.inodes[0][port])}->{sorted(self.inodes[1][port])}" for port in (80, 443, STREAM_PORT))
        return f"lifecycle, {name}: {self.mix.summary()}; overlap {self.overlap.seconds:.1f}s ({self.overlap.most} pods at most); nstat {counters}; listening inodes {inodes}"


def _inodes() -> dict[int, set[int]]:
    return {port: listening_inodes(port) for port in (80, 443, STREAM_PORT)}


def run_case(deployed: Deployed, name: str, event: Callable[[], None], settle: Callable[[], None], report: Callable[[str], None], after: int = 200) -> Measured:
    """The clients running from before C{event} until after C{settle} (and C{after} answers more); printed and reported."""
    mix = Mix(deployed.address, HOST, TLS_HOST, STREAM_PORT)
    inodes, counters = _inodes(), _nstat()
    with Overlap() as overlap, mix.running():
        mix.wait_answered(200)
        event()
        try:
            settle()
        except AssertionError as error:
            raise AssertionError(f"{error}\n{mix.summary()}\n{deployed.diagnosis()}") from None
        if after:
            mix.wait_answered(after)
    measured = Measured(mix, overlap, (counters, _nstat()), (inodes, _inodes()))
    line = measured.line(name)
    print(f"\n{line}")
    report(line)
    return measured


def assert_lost_nothing(measured: Measured, same_sockets: bool = True) -> None:
    """0 refused, 0 reset, 0 5xx, 0 timeouts, for every client; the listening sockets kept (or more of them, bound into their group)."""
    assert measured.mix.lost() == {}, measured.mix.summary()
    before, after = measured.inodes
    for port in (80, 443, STREAM_PORT):
        assert before[port] and (before[port] == after[port] if same_sockets else before[port] <= after[port]), (port, before, after)


def one_pod_again(deployed: Deployed, old: str) -> Callable[[], None]:
    """The settling of an update: the new pod ready, and the old one gone (it exits once the DaemonSet controller deletes it)."""

    def settle() -> None:
        wait_until(lambda: [p["metadata"]["name"] for p in deployed.pods()] != [old] and len(deployed.pods()) == 1 and ready(deployed.pod()), 240, "the old pod gone, the new one ready")

    return settle


def rolled(deployed: Deployed, old: str) -> Callable[[], None]:
    settle = one_pod_again(deployed, old)

    def done() -> None:
        deployed.rolled_out()
        settle()

    return done
