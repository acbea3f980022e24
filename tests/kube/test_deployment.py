"""
twingress as deployed: the image `make image` built, k8s/ applied with kubectl (`kubectl apply -k
k8s/`, as the README says), the DaemonSet's pod run by the real kubelet of the test node
(tests/kube/node.py), serving an Ingress to an echo Deployment's pods through the node's ports,
and its lifecycle under traffic.

Nothing here starts twingress itself: the kubelet does, from the image, with the DaemonSet's
arguments (`--workers=auto`), its ServiceAccount's token and the RBAC of k8s/ (no admin
credentials reach the pod). Each lifecycle case prints the requests that failed, those refused
while no pod listened, and the recovery time; a case fails only when the proxy lost a request
it had accepted (or never recovered).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import REPORT_KEY
from tests.deploy.image import built_image
from tests.kube.deploy_support import Traffic, TrafficReport, process_ids, process_uid
from tests.kube.node import ECHO_PORT, KubeNode, echo_deployment
from tests.kube.twingress import wait_until
from tests.proxy.certs import CertificateAuthority
from tests.support import ROOT

pytestmark = [pytest.mark.kube, pytest.mark.node]

NAMESPACE = "twingress"
APP_NAMESPACE = "deploy-test"
APP = "deploy-echo"
HOST = "echo.deploy.test"
TLS_HOST = "secure.deploy.test"
ROLLOUT_WAIT = "240s"
IN_THE_IMAGE = "/opt/twingress/"  # the image's venv: tells the pod's processes from the test run's own twistd
CLEAN_LOG_OFFENCES = ("#error]", "#critical]", "[stderr#", "Unhandled error", "Traceback", "primary process is gone")


@dataclass
class Deployed:
    node: KubeNode
    image: str
    rollout_image: str

    @property
    def address(self) -> str:
        return self.node.address

    def kubectl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return self.node.kubectl(*args, timeout=timeout)

    def pod(self) -> dict:
        """The one twingress pod that is not being deleted."""
        pods = json.loads(self.kubectl("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=twingress", "-o", "json").stdout)["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == 1, [p["metadata"]["name"] for p in pods]
        return live[0]

    def rolled_out(self) -> None:
        try:
            self.kubectl("-n", NAMESPACE, "rollout", "status", "daemonset/twingress", f"--timeout={ROLLOUT_WAIT}", timeout=300)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.diagnosis()}") from None

    def diagnosis(self) -> str:
        """What an operator would look at when the DaemonSet does not become ready: the pods, their events and logs."""
        described = self.node.kubectl("-n", NAMESPACE, "describe", "pods", check=False).stdout
        logs = self.node.kubectl("-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/name=twingress", "--tail=60", check=False)
        return f"--- kubectl describe pods\n{described[-6000:]}\n--- kubectl logs\n{(logs.stdout + logs.stderr)[-6000:]}"


def _ready(pod: dict) -> bool:
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
    return [echo_deployment(APP, APP_NAMESPACE, image, 2), service, ingress]


@pytest.fixture(scope="module")
def deployed(kube_node: KubeNode, tmp_path_factory) -> Iterator[Deployed]:
    """k8s/ applied as the README says, the image on the node, an echo app with an Ingress (HTTP and HTTPS)."""
    image = built_image()
    kube_node.load_image(Path(image.archive))  # both tags: the release and the rollout one
    state = Deployed(kube_node, image.name, image.rollout_name)
    state.kubectl("apply", "-k", str(ROOT / "k8s"))
    state.rolled_out()
    work = tmp_path_factory.mktemp("deployed")
    leaf = CertificateAuthority("deploy test CA").issue([TLS_HOST])
    (work / "tls.crt").write_bytes(leaf.fullchain_pem())
    (work / "tls.key").write_bytes(leaf.key_pem())
    state.kubectl("create", "namespace", APP_NAMESPACE)
    state.kubectl("-n", APP_NAMESPACE, "create", "secret", "tls", "deploy-tls", f"--cert={work / 'tls.crt'}", f"--key={work / 'tls.key'}")
    kube_node.apply(yaml.safe_dump_all(_app_objects(kube_node.echo_image)))
    state.kubectl("-n", APP_NAMESPACE, "rollout", "status", f"deployment/{APP}", f"--timeout={ROLLOUT_WAIT}", timeout=300)
    wait_until(lambda: Traffic(state.address, 80, HOST).one().kind == "ok", 90, f"http://{HOST} answered through the node")
    try:
        yield state
    finally:
        state.kubectl("delete", "namespace", APP_NAMESPACE, "--wait=false")
        state.kubectl("delete", "-k", str(ROOT / "k8s"), "--wait=false")


def test_the_daemonset_pod_is_ready_through_its_own_probes(deployed: Deployed) -> None:
    pod = deployed.pod()
    assert _ready(pod), pod["status"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == deployed.image
    assert (container["readinessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["path"]) == ("/readyz", "/healthz")
    assert pod["spec"]["serviceAccountName"] == "twingress" and pod["spec"]["hostNetwork"]
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"], status


def test_it_runs_as_uid_10001_with_workers_and_binds_80_and_443(deployed: Deployed) -> None:
    """Non-root (the capability NET_BIND_SERVICE through the interpreter's file capability), workers as the DaemonSet asks (auto)."""
    primaries = process_ids(IN_THE_IMAGE, "twistd --pidfile= -n ingress")
    workers = process_ids(IN_THE_IMAGE, "ingress.process.worker")
    assert len(primaries) == 1, primaries
    assert len(workers) >= 1, workers
    assert {process_uid(pid) for pid in primaries + workers} == {10001}
    assert Traffic(deployed.address, 80, HOST).one().kind == "ok"
    assert Traffic(deployed.address, 443, TLS_HOST, tls=True).one().kind == "ok"


def test_it_routes_to_every_echo_pod_over_http_and_https(deployed: Deployed) -> None:
    for port, host, tls in ((80, HOST, False), (443, TLS_HOST, True)):
        seen = {Traffic(deployed.address, port, host, tls=tls).one().backend for _ in range(20)}
        assert len(seen - {""}) == 2, (port, seen)


def test_it_works_as_its_service_account_alone(deployed: Deployed) -> None:
    """The Ingress status is written by the pod as its ServiceAccount (leader, RBAC of k8s/): the node's address."""

    def published() -> list[str]:
        ingress = json.loads(deployed.kubectl("-n", APP_NAMESPACE, "get", "ingress", APP, "-o", "json").stdout)
        return [entry.get("ip", "") for entry in ingress.get("status", {}).get("loadBalancer", {}).get("ingress", [])]

    wait_until(lambda: deployed.address in published(), 60, "the node address in the Ingress status")
    pod = deployed.pod()
    volumes = json.dumps(pod["spec"]["volumes"])
    assert "kubeconfig" not in volumes and "kube-api-access" in volumes  # the projected ServiceAccount token only


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Lines for the run's "deploy" summary (tests/deploy/conftest.py prints it), shown whether the case passes or not."""
    return request.config.stash.setdefault(REPORT_KEY, []).append


def _run_case(deployed: Deployed, name: str, event: Callable[[], None], settle: Callable[[], None], report: Callable[[str], None]) -> TrafficReport:
    traffic = Traffic(deployed.address, 80, HOST)
    with traffic.running():
        time.sleep(2.0)
        event_at = time.monotonic()
        event()
        settle()
        time.sleep(3.0)
    result = traffic.report(event_at)
    line = f"lifecycle, {name}: {result.summary()}; recovery {result.recovery_seconds():.1f}s"
    print(f"\n{line}")
    report(line)
    return result


FILTER_REFUSED = "cannot drop new connection attempts"
"""What the pod logs when the kernel refuses its listening sockets the drain's socket filter."""

NO_FILTER_LOSS_BOUND = 0.001
"""
The share of requests a drain may lose where the kernel refuses the socket filter. This machine's
kernel (6.18, kernel.unprivileged_bpf_disabled=2) answers SO_ATTACH_FILTER with EPERM unless the
process has CAP_NET_ADMIN, which the DaemonSet does not grant (mainline Linux lets any process
filter its own socket): the listeners then close at once, and a connection whose handshake is under
way at that moment is reset (3 in about 11,000 here, one per client thread). With the filter
(tests/proxy/test_drain.py, run as root) no request is lost.
"""


def _assert_drained(result: TrafficReport, pod_log: str) -> None:
    """
    No request is lost after its connection was accepted: the drain makes the listeners drop new
    connection attempts (SYNs) while it accepts what the kernel completed, accepts what is still
    queued, closes them, and gives a connection accepted last a moment for its first request. Where
    the kernel refuses the filter (the pod's log says so), L{NO_FILTER_LOSS_BOUND} applies.
    """
    if FILTER_REFUSED in pod_log:
        assert len(result.failed) <= NO_FILTER_LOSS_BOUND * len(result.outcomes), result.summary()
    else:
        assert not result.failed, result.summary()


@contextmanager
def _pod_log(deployed: Deployed, pod: str, path: Path) -> Iterator[Path]:
    """The pod's log followed into C{path} until the pod is gone (C{kubectl logs -f})."""
    with open(path, "w") as log:
        follower = subprocess.Popen(
            [str(deployed.node.kubectl_binary), f"--kubeconfig={deployed.node.kubeconfig}", "-n", NAMESPACE, "logs", "-f", pod],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            yield path
        finally:
            try:
                follower.wait(120)
            except subprocess.TimeoutExpired:
                follower.kill()


def _assert_clean_log(text: str) -> None:
    assert "Server Shut Down." in text, text[-3000:]
    offences = [line for line in text.splitlines() if any(o in line for o in CLEAN_LOG_OFFENCES)]
    assert not offences, "\n".join(offences[:20])


def test_lifecycle_a_delete_pod_drains(deployed: Deployed, tmp_path: Path, report: Callable[[str], None]) -> None:
    """
    (a) kubectl delete pod: the old pod drains, so the requests it accepted are answered; while no pod listens (on one node the DaemonSet makes the new
    pod only once the old one is gone) connections are refused. The old pod's log has nothing at
    level error or critical.
    """
    old = deployed.pod()["metadata"]["name"]

    def settle() -> None:
        wait_until(lambda: deployed.pod()["metadata"]["name"] != old and _ready(deployed.pod()), 180, "a new ready pod")

    with _pod_log(deployed, old, tmp_path / "old-pod.log") as log_path:
        result = _run_case(deployed, "delete pod", lambda: deployed.kubectl("-n", NAMESPACE, "delete", "pod", old, "--wait=false"), settle, report)
    log_text = log_path.read_text()
    _note_filter(log_text, report)
    _assert_drained(result, log_text)
    _assert_clean_log(log_text)


def test_lifecycle_b_rolling_update_to_a_new_tag(deployed: Deployed, tmp_path: Path, report: Callable[[str], None]) -> None:
    """(b) a rolling update of the DaemonSet to another image tag: accepted requests are answered (L{_assert_drained})."""

    def roll() -> None:
        deployed.kubectl("-n", NAMESPACE, "set", "image", "daemonset/twingress", f"twingress={deployed.rollout_image}")

    with _pod_log(deployed, deployed.pod()["metadata"]["name"], tmp_path / "old-pod.log") as log_path:
        result = _run_case(deployed, "rolling update", roll, deployed.rolled_out, report)
    wait_until(lambda: deployed.pod()["spec"]["containers"][0]["image"] == deployed.rollout_image and _ready(deployed.pod()), 60, "the new tag running")
    _assert_drained(result, log_path.read_text())


def _note_filter(pod_log: str, report: Callable[[str], None]) -> None:
    """Say in the run's summary whether the drain's socket filter held in the pod (L{NO_FILTER_LOSS_BOUND})."""
    if FILTER_REFUSED in pod_log:
        report("lifecycle: the kernel refused the drain's socket filter to the pod (EPERM without CAP_NET_ADMIN): listeners closed at once")
    else:
        report("lifecycle: the drain's socket filter held in the pod")


def test_lifecycle_c_sigkill_of_one_worker(deployed: Deployed, report: Callable[[str], None]) -> None:
    """(c) SIGKILL of one worker process in the container: the primary replaces it; the pod stays Ready."""
    workers = process_ids(IN_THE_IMAGE, "ingress.process.worker")
    assert workers
    before = deployed.pod()

    def settle() -> None:
        wait_until(lambda: bool(set(process_ids(IN_THE_IMAGE, "ingress.process.worker")) - set(workers)), 60, "a replacement worker")

    result = _run_case(deployed, "SIGKILL of a worker", lambda: os.kill(workers[0], signal.SIGKILL), settle, report)
    after = deployed.pod()
    assert after["metadata"]["uid"] == before["metadata"]["uid"] and _ready(after)
    assert after["status"]["containerStatuses"][0]["restartCount"] == before["status"]["containerStatuses"][0]["restartCount"]
    assert result.counts["ok"] > 0  # the failed ones were in flight on the killed worker
    result.recovery_seconds()  # raises when no request succeeded after the last error


def test_lifecycle_d_the_runtime_kills_the_container(deployed: Deployed, report: Callable[[str], None]) -> None:
    """(d) the container killed by the runtime (SIGKILL of its task): the kubelet restarts it in place."""
    before = deployed.pod()
    status = before["status"]["containerStatuses"][0]
    container_id = status["containerID"].split("://", 1)[1]

    def settle() -> None:
        wait_until(lambda: deployed.pod()["status"]["containerStatuses"][0]["restartCount"] > status["restartCount"] and _ready(deployed.pod()), 180, "the container restarted and ready")

    result = _run_case(deployed, "container killed", lambda: deployed.node.ctr("tasks", "kill", "-s", "SIGKILL", container_id), settle, report)
    assert result.counts["ok"] > 0  # the failed ones were in flight when the container died
    result.recovery_seconds()
