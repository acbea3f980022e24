"""
twingress installed with Helm, as the README says: `helm install twingress charts/twingress -n
twingress --create-namespace`, the image named by the chart's ingress-nginx-shaped values
(controller.image.registry/image/tag) and loaded on the test node as tests/kube/test_deployment.py
loads it (no registry is reachable). The DaemonSet's pod becomes Ready through its own probes and
routes the echo app's Ingress (HTTP and HTTPS, tests/kube/deployed.py); `helm upgrade` with a
changed value (the rollout image tag) rolls the DaemonSet under the client mix of
tests/kube/upgrade_traffic.py with nothing refused, reset, answered 5xx or timed out (the socket
hand-over); `helm uninstall` leaves nothing of the release behind but what Helm keeps by design:
the CRD of the chart's crds/ and the namespace --create-namespace made (with what every namespace
gets, and what the pods themselves wrote there at run time: their Lease and hand-over key).
The Deployment kind (ingress-nginx's default: no hostNetwork, a LoadBalancer Service) is installed
as a second release: its pod Ready, and its Ingress status the Service's addresses
(--publish-service), following what the test writes as the cloud controller would.

Helm is the one testenv/helm.sh builds (Helm 4); the kubeconfig is the node's admin one.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.deploy.image import built_image
from tests.kube.deployed import (
    APP_NAMESPACE,
    NAMESPACE,
    Deployed,
    assert_lost_nothing,
    assert_routes_to_every_echo_pod,
    install_app,
    published,
    ready,
    rolled,
    run_case,
    wait_gone,
)
from tests.kube.node import KubeNode
from tests.kube.twingress import wait_until
from tests.support import ROOT, unavailable

pytestmark = [pytest.mark.kube, pytest.mark.node]

RELEASE = "twingress"
CHART = ROOT / "charts" / "twingress"
HELM_SCRIPT = ROOT / "testenv" / "helm.sh"
UNINSTALL_WAIT = 240.0  # the last pod, with no successor, serves out --handover-wait and its drain before it exits
# What a namespace holds as soon as it exists (the control plane's controllers make them), and what
# the pods write there themselves at run time (not the chart's objects: Helm never knew them).
EVERY_NAMESPACE = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}
WRITTEN_BY_THE_PODS = {("Lease", f"{RELEASE}-leader"), ("Secret", f"{RELEASE}-handover")}
LIFECYCLE_KINDS = ("Event",)  # come and go on their own
# The kubelet's heartbeat Leases: the node's, made when it registers (which may come after the
# snapshot before the install), never a release's.
NODE_NAMESPACES = ("kube-node-lease",)


@cache
def helm_binary() -> Path:
    """testenv/helm.sh's Helm (make testenv builds it); skips or fails (see L{unavailable}) without it."""
    done = subprocess.run([str(HELM_SCRIPT), "--print-path"], capture_output=True, text=True, cwd=ROOT)
    path = Path(done.stdout.strip().splitlines()[-1]) / "helm" if done.returncode == 0 and done.stdout.strip() else None
    if path is None or not path.is_file():
        unavailable(f"no Helm: run `make testenv` (testenv/helm.sh): {done.stderr.strip()[-300:]}")
    return path


def image_values(image: str) -> list[str]:
    """--set of controller.image for a name such as localhost/twingress:0.1.0 (ingress-nginx's keys: registry, image, tag)."""
    repository, _, tag = image.rpartition(":")
    registry, _, name = repository.partition("/")
    return ["--set", f"controller.image.registry={registry}", "--set", f"controller.image.image={name}", "--set-string", f"controller.image.tag={tag}"]


@dataclass
class Installed:
    deployed: Deployed
    before: set[tuple[str, str, str]]  # every object of the cluster before the install (kind, namespace, name)

    def helm(self, *args: str, timeout: float = 300.0) -> str:
        """Helm with the node's admin kubeconfig; a failure raises AssertionError with Helm's output."""
        argv = [str(helm_binary()), f"--kubeconfig={self.deployed.node.kubeconfig}", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def released(self) -> bool:
        return self.released_as(RELEASE, NAMESPACE)

    def released_as(self, name: str, namespace: str) -> bool:
        listed = yaml.safe_load(self.helm("list", "-n", namespace, "-o", "yaml")) or []
        return any(release["name"] == name for release in listed)


def objects(deployed: Deployed) -> dict[tuple[str, str, str], str]:
    """Every object the apiserver lists (kind, namespace, name), with its Helm release annotation ("" when none)."""
    kinds = deployed.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    columns = "custom-columns=KIND:.kind,NAMESPACE:.metadata.namespace,NAME:.metadata.name,RELEASE:.metadata.annotations.meta\\.helm\\.sh/release-name"
    out = deployed.kubectl("get", ",".join(kinds), "-A", "--no-headers", "-o", columns).stdout
    found = {}
    for line in out.splitlines():
        kind, namespace, name, release = line.split()
        if kind not in LIFECYCLE_KINDS and namespace not in NODE_NAMESPACES:
            found[(kind, "" if namespace == "<none>" else namespace, name)] = "" if release == "<none>" else release
    return found


def chart_crds() -> set[str]:
    """The names of the CRDs in the chart's crds/ (Helm installs them when absent, and never deletes them)."""
    return {doc["metadata"]["name"] for path in (CHART / "crds").glob("*.yaml") for doc in yaml.safe_load_all(path.read_text()) if doc}


@pytest.fixture(scope="module")
def installed(kube_node: KubeNode, tmp_path_factory) -> Iterator[Installed]:
    """The chart installed as the README says, the image on the node, the echo app with an Ingress (HTTP and HTTPS)."""
    helm_binary()
    image = built_image()
    kube_node.load_image(Path(image.archive))  # both tags: the release and the rollout one
    state = Deployed(kube_node, image.name, image.rollout_name)
    wait_gone(state, NAMESPACE)  # test_deployment.py deletes k8s/ without waiting
    wait_gone(state, APP_NAMESPACE)
    install = Installed(state, set(objects(state)))
    install.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", *image_values(image.name))
    state.rolled_out()
    install_app(state, tmp_path_factory.mktemp("chart"))
    try:
        yield install
    finally:
        state.kubectl("delete", "namespace", APP_NAMESPACE, "--ignore-not-found", "--wait=false")
        if install.released():
            install.helm("uninstall", RELEASE, "-n", NAMESPACE)
        state.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
        wait_gone(state, NAMESPACE)  # the next install (k8s/, this chart) needs the node's ports free
        wait_gone(state, APP_NAMESPACE)


def test_the_release_pod_is_ready_and_routes_the_ingress_over_http_and_https(installed: Installed) -> None:
    deployed = installed.deployed
    pod = deployed.pod()
    assert ready(pod), pod["status"]
    assert pod["spec"]["containers"][0]["image"] == deployed.image
    assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert_routes_to_every_echo_pod(deployed)
    # the status written by the release's pod, as its ServiceAccount (the chart's RBAC): the node's address
    wait_until(lambda: published(deployed) == [deployed.address], 60, "the node address in the Ingress status")


def test_helm_upgrade_to_another_tag_rolls_the_daemonset_with_nothing_lost(installed: Installed, report: Callable[[str], None]) -> None:
    """A changed value (controller.image.tag): the surge pod takes the old one's listening sockets."""
    deployed = installed.deployed
    old = deployed.pod()["metadata"]["name"]

    def upgrade() -> None:
        installed.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *image_values(deployed.rollout_image))

    measured = run_case(deployed, "helm upgrade to a new tag", upgrade, rolled(deployed, old), report)
    assert deployed.pod()["spec"]["containers"][0]["image"] == deployed.rollout_image
    assert measured.overlap.most == 2  # surge: both pods ran
    assert_lost_nothing(measured)


def test_helm_uninstall_leaves_only_what_helm_keeps(installed: Installed) -> None:
    """
    Nothing of the release remains: no object carries its annotation, and what is new since the
    install is exactly the namespace --create-namespace made (Helm never deletes it) with what every
    namespace gets and what the pods wrote there; the chart's CRD stays (crds/: Helm never deletes
    one; the test cluster had it before the install).
    """
    deployed = installed.deployed
    deployed.kubectl("delete", "namespace", APP_NAMESPACE, "--wait=false")  # the app's objects are not the release's
    installed.helm("uninstall", RELEASE, "-n", NAMESPACE)
    assert not installed.released()
    kept = {("Namespace", "", NAMESPACE)} | {(kind, NAMESPACE, name) for kind, name in EVERY_NAMESPACE | WRITTEN_BY_THE_PODS}
    settled: list[dict[tuple[str, str, str], str]] = []

    def only_what_helm_keeps() -> bool:
        now = objects(deployed)
        settled[:] = [now]
        new = {key for key in now if key not in installed.before}
        return new == kept and not any(now.values())

    try:
        wait_until(only_what_helm_keeps, UNINSTALL_WAIT, "only what Helm keeps")
    except AssertionError:
        now = settled[0] if settled else {}
        new = sorted(key for key in now if key not in installed.before)
        raise AssertionError(f"left after helm uninstall: {new}; of the release: {sorted(k for k, v in now.items() if v)}") from None
    now = settled[0]
    crds = {name for kind, _, name in now if kind == "CustomResourceDefinition"}
    assert chart_crds() == {"streamingresses.twingress.io"} and chart_crds() <= crds
    print(f"\nleft after helm uninstall: {sorted(kept)} and the CRDs {sorted(chart_crds())}")


LB_RELEASE, LB_NAMESPACE = "edge", "twingress-lb"
LB_FULLNAME = f"{LB_RELEASE}-twingress"  # the chart's full name for a release not named twingress: Service, Deployment, class


def _lb_ingress(namespace: str) -> dict:
    backend = {"service": {"name": LB_FULLNAME, "port": {"number": 80}}}  # any Service: the status does not depend on it
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "behind-the-lb", "namespace": namespace},
        "spec": {"ingressClassName": LB_FULLNAME, "rules": [{"host": "lb.deploy.test", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]},
    }


def test_the_deployment_kind_publishes_its_load_balancer_service_in_ingress_status(kube_node: KubeNode) -> None:
    """
    ingress-nginx's default shape (controller.kind Deployment, no hostNetwork, a LoadBalancer
    Service): the pod Ready, and --publish-service puts the Service's address in Ingress status as
    the cloud controller writes it (patched here as one would: no cloud controller runs), IPs and
    hostnames, following each change.
    """
    helm_binary()
    image = built_image()
    kube_node.load_image(Path(image.archive))
    state = Deployed(kube_node, image.name, image.rollout_name)
    wait_gone(state, LB_NAMESPACE)
    release = Installed(state, set())
    release.helm(
        "install", LB_RELEASE, str(CHART), "-n", LB_NAMESPACE, "--create-namespace", *image_values(image.name),
        "--set", "controller.kind=Deployment", "--set", "controller.hostNetwork=false",
    )
    try:
        try:
            state.kubectl("-n", LB_NAMESPACE, "rollout", "status", f"deployment/{LB_FULLNAME}", "--timeout=240s", timeout=300)
        except AssertionError as error:
            logs = state.node.kubectl("-n", LB_NAMESPACE, "logs", f"deployment/{LB_FULLNAME}", "--tail=20", check=False)
            raise AssertionError(f"{error}\n{logs.stdout}{logs.stderr}") from None
        args = json.loads(state.kubectl("-n", LB_NAMESPACE, "get", "deployment", LB_FULLNAME, "-o", "json").stdout)["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--publish-service={LB_NAMESPACE}/{LB_FULLNAME}" in args, args
        state.node.apply(json.dumps(_lb_ingress(LB_NAMESPACE)))

        def status() -> list[dict]:
            ingress = json.loads(state.kubectl("-n", LB_NAMESPACE, "get", "ingress", "behind-the-lb", "-o", "json").stdout)
            return list((ingress.get("status") or {}).get("loadBalancer", {}).get("ingress") or [])

        def provision(*entries: dict[str, str]) -> None:
            body = json.dumps({"status": {"loadBalancer": {"ingress": list(entries)}}})
            state.kubectl("-n", LB_NAMESPACE, "patch", "service", LB_FULLNAME, "--subresource=status", "--type=merge", f"-p={body}")

        provision({"ip": "192.0.2.90"}, {"hostname": "lb-1.deploy.test"})
        wait_until(lambda: status() == [{"ip": "192.0.2.90"}, {"hostname": "lb-1.deploy.test"}], 90, "the load balancer's addresses in Ingress status")
        provision({"ip": "198.51.100.90"})
        wait_until(lambda: status() == [{"ip": "198.51.100.90"}], 60, "Ingress status following the load balancer")
    finally:
        if release.released_as(LB_RELEASE, LB_NAMESPACE):
            release.helm("uninstall", LB_RELEASE, "-n", LB_NAMESPACE)
        state.kubectl("delete", "namespace", LB_NAMESPACE, "--ignore-not-found", "--wait=false")
        wait_gone(state, LB_NAMESPACE)
