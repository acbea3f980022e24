"""The test node itself (fixture ``kube_node``, tests/kube/node.py): the things later deployment
tests take for granted, each checked once here.

- the Node registers and is Ready;
- a Deployment of our echo image is scheduled by kube-scheduler, its pods get addresses from the
  CNI bridge and become Ready through their httpGet readiness probe, and the test process (which
  shares the node's network namespace) reaches every pod IP;
- a hostNetwork pod reaches a pod IP;
- a pod reaches the apiserver through the ``kubernetes`` Service (10.96.0.1, kube-proxy's rules)
  and authenticates with its ServiceAccount token;
- kubelet restarts a container that was killed, and the ReplicaSet replaces a deleted pod;
- an image that only podman's store has is loaded onto the node and runs.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pytest
import yaml

from tests.kube.node import ECHO_PORT, KubeNode, echo_deployment
from tests.kube.node_config import POD_GATEWAY

TIMEOUT = 90.0


def wait_for(check: Callable[[], object], what: str, timeout: float = TIMEOUT) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.3)


def get_json(node: KubeNode, *args: str) -> dict:
    return json.loads(node.kubectl("get", "-o", "json", *args).stdout)


def http_get(url: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        return json.load(response)


def one_shot_pod(name: str, namespace: str, image: str, args: list[str], host_network: bool = False) -> dict:
    """A pod that runs ``echo get ...`` once (restartPolicy Never)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "hostNetwork": host_network,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "get", "image": image, "imagePullPolicy": "Never", "args": ["get", *args]}],
        },
    }


def run_to_completion(node: KubeNode, pod: dict) -> dict:
    """Apply POD, wait until it has succeeded, and return what ``echo get`` printed."""
    node.apply(json.dumps(pod))
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]

    def finished() -> str:
        phase = get_json(node, "pod", "-n", namespace, name).get("status", {}).get("phase", "")
        return phase if phase in ("Succeeded", "Failed") else ""

    phase = wait_for(finished, f"pod {name} to finish")
    logs = node.kubectl("logs", "-n", namespace, name).stdout  # through the apiserver and kubelet
    assert phase == "Succeeded", f"pod {name} {phase}: {logs}"
    return json.loads(logs.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def workload(kube_node: KubeNode) -> Iterator[tuple[str, str]]:
    """A namespace with an echo Deployment of two replicas: (namespace, deployment name)."""
    namespace = f"node-{uuid.uuid4().hex[:6]}"
    kube_node.kubectl("create", "namespace", namespace)
    kube_node.apply(yaml.safe_dump(echo_deployment("echo", namespace, kube_node.echo_image, 2)))
    kube_node.kubectl("rollout", "status", "-n", namespace, "deployment/echo", f"--timeout={TIMEOUT:.0f}s")
    yield namespace, "echo"
    kube_node.kubectl("delete", "namespace", namespace, "--wait=false")


def echo_pods(node: KubeNode, namespace: str) -> list[dict]:
    return [p for p in get_json(node, "pods", "-n", namespace, "-l", "app=echo")["items"] if p["metadata"].get("deletionTimestamp") is None]


def is_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or [])


def test_node_is_ready(kube_node: KubeNode) -> None:
    node = get_json(kube_node, "node", kube_node.name)
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True", node["status"]["conditions"]
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == kube_node.address
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    server = json.loads(kube_node.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert info["kubeletVersion"] == server["gitVersion"]  # one module builds both
    print(kube_node.describe_startup(), f"runtime {info['containerRuntimeVersion']}, kubelet {info['kubeletVersion']}")


def test_deployment_pods_are_scheduled_addressed_and_reachable(kube_node: KubeNode, workload: tuple[str, str]) -> None:
    namespace, _ = workload
    pods = echo_pods(kube_node, namespace)
    assert len(pods) == 2
    pod_network = ipaddress.ip_network(kube_node.pod_cidr)
    events = get_json(kube_node, "events", "-n", namespace, "--field-selector", "reason=Scheduled")["items"]
    scheduled = {e["involvedObject"]["name"] for e in events if e.get("reportingComponent") == "default-scheduler" or e.get("source", {}).get("component") == "default-scheduler"}
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == kube_node.name
        assert name in scheduled, f"no Scheduled event of default-scheduler for {name}: {events}"
        assert is_ready(pod), pod["status"]
        ip = pod["status"]["podIP"]
        assert ipaddress.ip_address(ip) in pod_network
        answer = http_get(f"http://{ip}:{ECHO_PORT}/from-the-test")
        assert (answer["pod"], answer["podIP"], answer["path"]) == (name, ip, "/from-the-test")
    assert len({p["status"]["podIP"] for p in pods}) == 2


def test_host_network_pod_reaches_a_pod(kube_node: KubeNode, workload: tuple[str, str]) -> None:
    namespace, _ = workload
    target = echo_pods(kube_node, namespace)[0]
    url = f"http://{target['status']['podIP']}:{ECHO_PORT}/from-host-network"
    pod = one_shot_pod("host-client", namespace, kube_node.echo_image, [url], host_network=True)
    got = run_to_completion(kube_node, pod)
    assert got["status"] == 200
    answer = json.loads(got["body"])
    assert (answer["pod"], answer["path"]) == (target["metadata"]["name"], "/from-host-network")
    # From the node's network: its address on the pod bridge, and the pod has the node's IP.
    assert answer["remote"].rsplit(":", 1)[0] == POD_GATEWAY
    assert get_json(kube_node, "pod", "-n", namespace, "host-client")["status"]["podIP"] == kube_node.address


def test_pod_reaches_apiserver_through_kubernetes_service(kube_node: KubeNode, workload: tuple[str, str]) -> None:
    """The ServiceAccount token authenticates the pod as system:serviceaccount:NS:default, which
    may not list pods: the 403 names that user, so the token went through (TLS verified with the
    projected ca.crt, to the ClusterIP that kube-proxy maps to the apiserver)."""
    namespace, _ = workload
    secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
    args = ["-token", f"{secrets}/token", "-cacert", f"{secrets}/ca.crt", f"https://10.96.0.1/api/v1/namespaces/{namespace}/pods"]
    got = run_to_completion(kube_node, one_shot_pod("sa-client", namespace, kube_node.echo_image, args))
    assert got["status"] == 403, got
    assert f"system:serviceaccount:{namespace}:default" in got["body"], got


def test_killed_container_is_restarted_and_deleted_pod_replaced(kube_node: KubeNode, workload: tuple[str, str]) -> None:
    namespace, _ = workload
    pod = echo_pods(kube_node, namespace)[0]
    name = pod["metadata"]["name"]
    status = pod["status"]["containerStatuses"][0]
    container_id = status["containerID"].removeprefix("containerd://")
    killed = kube_node.ctr("tasks", "kill", "--signal", "SIGKILL", container_id)
    assert killed.returncode == 0, killed.stderr

    def restarted() -> dict | None:
        now = get_json(kube_node, "pod", "-n", namespace, name)
        statuses = now["status"].get("containerStatuses") or [{}]
        return now if statuses[0].get("restartCount", 0) > status["restartCount"] and is_ready(now) else None

    again = wait_for(restarted, f"kubelet to restart the container of {name}")
    assert isinstance(again, dict)
    assert http_get(f"http://{again['status']['podIP']}:{ECHO_PORT}/after-restart")["pod"] == name

    kube_node.kubectl("delete", "pod", "-n", namespace, name, "--wait=false")
    wait_for(lambda: len([p for p in echo_pods(kube_node, namespace) if p["metadata"]["name"] != name and is_ready(p)]) == 2, "a replacement pod, Ready")


def test_image_loaded_from_podman_runs(kube_node: KubeNode, workload: tuple[str, str]) -> None:
    """load_image(name) takes an image from podman's store (how the twingress image built by
    podman reaches the node): a tag only podman has runs as a pod."""
    namespace, _ = workload
    tag = f"localhost/twingress-echo:loaded-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "CONTAINERS_CONF": str(kube_node.runtime_dir / "containers.conf")}
    subprocess.run(["podman", "tag", kube_node.echo_image, tag], check=True, env=env, capture_output=True)
    try:
        kube_node.load_image(tag)
    finally:
        subprocess.run(["podman", "rmi", tag], env=env, capture_output=True)
    target = echo_pods(kube_node, namespace)[0]
    got = run_to_completion(kube_node, one_shot_pod("loaded", namespace, tag, [f"http://{target['status']['podIP']}:{ECHO_PORT}/loaded"]))
    assert (got["status"], json.loads(got["body"])["path"]) == (200, "/loaded")
    kube_node.ctr("images", "rm", tag)
