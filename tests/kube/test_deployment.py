"""
twingress as deployed: the image `make image` built, k8s/ applied with kubectl (`kubectl apply -k
k8s/`, as the README says), the DaemonSet's pod run by the real kubelet of the test node
(tests/kube/node.py), serving an Ingress to an echo Deployment's pods through the node's ports,
and its upgrades under traffic.

Nothing here starts twingress itself: the kubelet does, from the image, with the DaemonSet's
arguments (`--workers=auto`, the hand-over of k8s/), its ServiceAccount's token and the RBAC of
k8s/ (no admin credentials reach the pod). Each lifecycle case runs clients of every kind at once
(tests/kube/upgrade_traffic.py: new HTTP and new TLS connections without pause, keep-alive
HTTP/1.1, HTTP/2, new TCP connections through a StreamIngress's port) and prints their counts, the time both pods ran (the overlap), the kernel's
listen-queue and reset counters before and after (nstat) and the listening sockets' inodes (ss).
The rolling updates and the pod deletion hand the listening sockets over from the old pod to its
surge successor: nothing is refused, reset, answered 5xx or left to time out (asserted). A
container killed by the runtime, and a pod deleted with no successor, lose what their sockets'
queues held: counted and printed (docs/operations.md, "Upgrading").
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.deploy.image import built_image
from tests.kube.deploy_support import Traffic, process_ids, process_uid
from tests.kube.deployed import (
    APP_NAMESPACE,
    HOST,
    IN_THE_IMAGE,
    NAMESPACE,
    STREAM_PORT,
    TLS_HOST,
    Deployed,
    assert_lost_nothing,
    assert_routes_to_every_echo_pod,
    install_app,
    one_pod_again,
    published,
    ready,
    rolled,
    run_case,
    wait_gone,
)
from tests.kube.node import KubeNode
from tests.kube.twingress import wait_until
from tests.support import ROOT

pytestmark = [pytest.mark.kube, pytest.mark.node]

CLEAN_LOG_OFFENCES = ("#error]", "#critical]", "[stderr#", "Unhandled error", "Traceback", "primary process is gone")


@pytest.fixture(scope="module")
def deployed(kube_node: KubeNode, tmp_path_factory) -> Iterator[Deployed]:
    """k8s/ applied as the README says, the image on the node, an echo app with an Ingress (HTTP and HTTPS)."""
    image = built_image()
    kube_node.load_image(Path(image.archive))  # both tags: the release and the rollout one
    state = Deployed(kube_node, image.name, image.rollout_name)
    wait_gone(state, NAMESPACE)  # the chart's test leaves it to be deleted
    state.kubectl("apply", "-k", str(ROOT / "k8s"))
    state.rolled_out()
    install_app(state, tmp_path_factory.mktemp("deployed"))
    try:
        yield state
    finally:
        state.kubectl("delete", "namespace", APP_NAMESPACE, "--wait=false")
        state.kubectl("delete", "-k", str(ROOT / "k8s"), "--wait=false")


def test_the_daemonset_pod_is_ready_through_its_own_probes(deployed: Deployed) -> None:
    pod = deployed.pod()
    assert ready(pod), pod["status"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == deployed.image
    assert (container["readinessProbe"]["exec"]["command"][-1], container["livenessProbe"]["exec"]["command"][-1]) == ("/readyz", "/healthz")
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
    assert_routes_to_every_echo_pod(deployed)


def test_it_works_as_its_service_account_alone(deployed: Deployed) -> None:
    """The Ingress status is written by the pod as its ServiceAccount (leader, RBAC of k8s/): the node's address."""

    wait_until(lambda: deployed.address in published(deployed), 60, "the node address in the Ingress status")
    pod = deployed.pod()
    volumes = json.dumps(pod["spec"]["volumes"])
    assert "kubeconfig" not in volumes and "kube-api-access" in volumes  # the projected ServiceAccount token only


def test_the_base_exposes_nothing_but_80_and_443(deployed: Deployed) -> None:
    """
    The admin listener is the pod's unix socket: nothing answers on 10254 at any address of the node (its
    own, loopback, another one of its addresses), and only :80 and :443 listen in the node's namespace.
    """
    other = next(address for address in os.environ.get("TWINGRESS_POD_IPS", "127.0.0.2").split() if address != deployed.address)
    for address in (deployed.address, "127.0.0.1", other):
        assert _connect(address, 10254) == "refused", address
    pid = process_ids(IN_THE_IMAGE, "twistd --pidfile= -n ingress")[0]
    ports = {int(port) for port in re.findall(r":(\d+)\s", _ss("-ltnpH", pid))}
    assert ports == {80, 443, STREAM_PORT}, ports  # and the stream port the StreamIngress asks for


def _connect(address: str, port: int) -> str:
    try:
        with socket.create_connection((address, port), timeout=5):
            return "connected"
    except ConnectionRefusedError:
        return "refused"


def _ss(flags: str, pid: int) -> str:
    """C{ss FLAGS}'s lines of process C{pid}'s sockets (the pod's primary: its listeners)."""
    out = subprocess.run(["ss", flags], capture_output=True, text=True, check=True).stdout
    return "\n".join(line for line in out.splitlines() if f"pid={pid}," in line)


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


def _set_image(deployed: Deployed, image: str) -> Callable[[], None]:
    return lambda: deployed.kubectl("-n", NAMESPACE, "set", "image", "daemonset/twingress", f"twingress={image}")


def _workers() -> int:
    return len(process_ids(IN_THE_IMAGE, "ingress.process.worker"))


def test_lifecycle_a_rolling_update_to_a_new_tag(deployed: Deployed, tmp_path: Path, report: Callable[[str], None]) -> None:
    """
    (a) A rolling update to another image tag: the surge pod takes the old one's listening sockets; the old one
    drains, then waits (holding nothing, not ready) until the DaemonSet controller deletes it, and exits 0 at once.
    """
    old = deployed.pod()["metadata"]["name"]
    with _pod_log(deployed, old, tmp_path / "old-pod.log") as log_path:
        measured = run_case(deployed, "(a) rolling update to a new tag", _set_image(deployed, deployed.rollout_image), rolled(deployed, old), report)
    assert deployed.pod()["spec"]["containers"][0]["image"] == deployed.rollout_image
    assert measured.overlap.most == 2  # surge: both pods ran
    assert_lost_nothing(measured)
    log_text = log_path.read_text()
    assert "handed over: no new connections here" in log_text and "exiting on SIGTERM (--after-handover wait)" in log_text, log_text[-3000:]
    _assert_clean_log(log_text)


def test_lifecycle_b_delete_pod(deployed: Deployed, report: Callable[[str], None]) -> None:
    """
    (b) kubectl delete pod: with surge allowed, the DaemonSet controller creates the replacement at once, beside
    the terminating pod (checked), which holds its sockets (--handover-wait) until the replacement takes them.
    """
    old = deployed.pod()["metadata"]["name"]
    seen_both: list[bool] = []

    def settle() -> None:
        wait_until(lambda: len(deployed.pods()) == 2 or len(deployed.pods()) == 1 and deployed.pods()[0]["metadata"]["name"] != old, 60, "a replacement")
        seen_both.append(len(deployed.pods()) == 2)
        one_pod_again(deployed, old)()

    measured = run_case(deployed, "(b) kubectl delete pod", lambda: deployed.kubectl("-n", NAMESPACE, "delete", "pod", old, "--wait=false"), settle, report)
    assert seen_both == [True]  # the replacement existed while the old pod was still there
    assert measured.overlap.most == 2
    assert_lost_nothing(measured)


def test_lifecycle_c_five_rolling_updates_in_a_row(deployed: Deployed, report: Callable[[str], None]) -> None:
    """
    (c) Five rolling updates in a row, the image tag each time and, on the third, the CPU limit (2 -> 1): --workers=auto
    then runs one worker process where there were two, which serves both sockets of each SO_REUSEPORT group.
    """
    workers_before = _workers()
    images = [deployed.image, deployed.rollout_image]
    limit = json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/resources/limits/cpu", "value": "1"}])

    def roll() -> None:
        for index in range(5):
            old = deployed.pod()["metadata"]["name"]
            _set_image(deployed, images[index % 2])()
            if index == 2:
                deployed.kubectl("-n", NAMESPACE, "patch", "daemonset", "twingress", "--type=json", f"-p={limit}")
            rolled(deployed, old)()

    measured = run_case(deployed, "(c) five rolling updates, one changing the CPU limit", roll, lambda: None, report)
    print(f"worker processes: {workers_before} -> {_workers()} (0: --workers auto found 1 CPU, one process serves)")
    assert _workers() < workers_before, (workers_before, _workers())
    assert_lost_nothing(measured)


def test_lifecycle_d_the_runtime_kills_the_container(deployed: Deployed, report: Callable[[str], None]) -> None:
    """(d) The container killed by the runtime (SIGKILL of its task): its sockets die with it and their queues are reset; counted, not asserted."""
    before = deployed.pod()
    status = before["status"]["containerStatuses"][0]
    container_id = status["containerID"].split("://", 1)[1]

    def settle() -> None:
        wait_until(lambda: deployed.pod()["status"]["containerStatuses"][0]["restartCount"] > status["restartCount"] and ready(deployed.pod()), 180, "the container restarted and ready")

    measured = run_case(deployed, "(d) container killed by the runtime", lambda: deployed.node.ctr("tasks", "kill", "-s", "SIGKILL", container_id), settle, report)
    assert measured.mix.answered() > 0


def test_lifecycle_e_delete_with_no_replacement(deployed: Deployed, report: Callable[[str], None]) -> None:
    """
    (e) The pod deleted with no successor to come (its node no longer selected): it serves on for --handover-wait,
    then drains and closes its sockets; from then nothing listens. Counted, not asserted; the node selected again after.
    """
    label = "twingress.test/edge"
    deployed.kubectl("label", "node", deployed.node.name, f"{label}=true", "--overwrite")
    selector = json.dumps({"spec": {"template": {"spec": {"nodeSelector": {label: "true"}}}}})
    old = deployed.pod()["metadata"]["name"]
    deployed.kubectl("-n", NAMESPACE, "patch", "daemonset", "twingress", f"-p={selector}")
    rolled(deployed, old)()

    def settle() -> None:
        wait_until(lambda: not deployed.pods(), 180, "the pod gone")

    try:
        unlabel = lambda: deployed.kubectl("label", "node", deployed.node.name, f"{label}-")  # noqa: E731
        measured = run_case(deployed, "(e) delete with no replacement (node unlabelled)", unlabel, settle, report, after=0)  # nothing serves after
    finally:
        deployed.kubectl("label", "node", deployed.node.name, f"{label}=true", "--overwrite")
        wait_until(lambda: len(deployed.pods()) == 1 and ready(deployed.pod()), 180, "the pod back")
    assert measured.mix.counts["http"]["refused"] > 0  # nothing listened at the end


def _get(address: str, port: int, path: str) -> int:
    with socket.create_connection((address, port), timeout=5) as connection:
        connection.sendall(f"GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n".encode())
        return int(connection.recv(64).split(b" ", 2)[1])


def test_the_metrics_component_answers_metrics_alone_on_the_node_ip(deployed: Deployed, tmp_path: Path) -> None:
    """
    k8s/components/metrics: /metrics on the node's IP, port 10254, and nothing else there (no /debug/routes, no
    probes), nothing on the node's other addresses. Until --metrics exists (helper A's option, issue 63), the
    new pod exits at its command line and this fails for that reason alone.
    """
    overlay = tmp_path / "metrics-overlay"
    overlay.mkdir()
    relative = os.path.relpath(ROOT / "k8s", overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{relative}/base"], "components": [f"{relative}/components/metrics"],
    }))
    old = deployed.pod()["metadata"]["name"]
    deployed.kubectl("apply", "-k", str(overlay))
    try:
        exited: list[str] = []

        def settled() -> bool:
            for pod in deployed.pods():
                if pod["metadata"]["name"] == old:  # the replaced pod exits 0 on its SIGTERM after the hand-over: as it should
                    continue
                for status in pod.get("status", {}).get("containerStatuses", []):
                    if status.get("restartCount", 0) or "terminated" in status.get("state", {}):
                        logs = deployed.node.kubectl("-n", NAMESPACE, "logs", pod["metadata"]["name"], "--tail=5", check=False)
                        exited.append((logs.stdout + logs.stderr)[-1500:])
                        return True
            return len(deployed.pods()) == 1 and deployed.pod()["metadata"]["name"] != old and ready(deployed.pod())

        wait_until(settled, 180, "the pod with --metrics ready, alone")
        assert not exited, f"the pod with --metrics exited: {exited[0]}"
        assert _get(deployed.address, 10254, "/metrics") == 200
        assert _get(deployed.address, 10254, "/debug/routes") == 404 and _get(deployed.address, 10254, "/readyz") == 404
        other = next(address for address in os.environ.get("TWINGRESS_POD_IPS", "127.0.0.2").split() if address != deployed.address)
        assert _connect("127.0.0.1", 10254) == "refused" and _connect(other, 10254) == "refused"
    finally:
        deployed.kubectl("-n", NAMESPACE, "delete", "service", "twingress-metrics", "--ignore-not-found")
        deployed.kubectl("apply", "-k", str(ROOT / "k8s"))
        deployed.rolled_out()
