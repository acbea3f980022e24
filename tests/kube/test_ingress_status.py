"""
Ingress status written by the leader: published addresses, or the nodes our ready pods run on.

Pods and Nodes are real API objects here (no kubelet runs: the test writes the pods' status
through the status subresource, as a kubelet would).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.client.rest import ApiException

from tests.kube.api import Kube
from tests.kube.controller_support import load_balancer, read_ingress, start_controller, wait_ingress, writes
from tests.kube.twingress import wait_until

POD_LABELS = {"app.kubernetes.io/name": "twingress"}


def our_ingress(kube: Kube, namespace: str, name: str, class_name: str = "twingress") -> dict:
    kube.create_service(namespace, f"{name}-svc")
    return kube.create_ingress(namespace, name, f"{name}.{namespace}.example.com", f"{name}-svc", class_name=class_name)


def set_class(kube: Kube, namespace: str, name: str, class_name: str) -> None:
    kube.networking.patch_namespaced_ingress(name, namespace, {"spec": {"ingressClassName": class_name}})


def set_status(kube: Kube, namespace: str, name: str, addresses: list[str]) -> None:
    body = {"status": {"loadBalancer": {"ingress": [{"ip": a} for a in addresses]}}}
    kube.networking.patch_namespaced_ingress_status(name, namespace, body)


def test_published_addresses_are_written_cleared_and_never_touch_other_classes(kube: Kube, namespace: str, twingress) -> None:
    proxy = start_controller(twingress, namespace, "--publish-status-address", "192.0.2.30, lb.example.com")
    our_ingress(kube, namespace, "mine")
    mine = wait_ingress(kube, namespace, "mine", lambda i: load_balancer(i), "status of our Ingress")
    assert mine["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.30"}, {"hostname": "lb.example.com"}]

    our_ingress(kube, namespace, "theirs", class_name="other")
    set_status(kube, namespace, "theirs", ["198.51.100.1"])
    our_ingress(kube, namespace, "bare", class_name="other")

    # our Ingress moves to another class: we clear what we wrote
    set_class(kube, namespace, "mine", "other")
    wait_ingress(kube, namespace, "mine", lambda i: not load_balancer(i), "status cleared")

    # a later Ingress of ours gets its status: the others were synced before it, and left alone
    our_ingress(kube, namespace, "marker")
    wait_ingress(kube, namespace, "marker", lambda i: load_balancer(i), "status of the marker")
    assert load_balancer(read_ingress(kube, namespace, "theirs")) == ["198.51.100.1"]
    assert load_balancer(read_ingress(kube, namespace, "bare")) == []

    # no write storms: a change that does not alter the status costs no status write
    before = writes(proxy, kind="Ingress", verb="patch-status")
    assert before == 3  # mine, its clearing, marker
    kube.networking.patch_namespaced_ingress("marker", namespace, {"metadata": {"annotations": {"touched": "1"}}})
    our_ingress(kube, namespace, "marker2")
    wait_ingress(kube, namespace, "marker2", lambda i: load_balancer(i), "status of the second marker")
    assert writes(proxy, kind="Ingress", verb="patch-status") == before + 1


@pytest.fixture
def nodes(kube: Kube, namespace: str) -> Iterator[list[str]]:
    """Two Nodes (cluster-scoped, named after the test): one with an ExternalIP, one with only an InternalIP."""
    names = [f"edge-1-{namespace}"[:63], f"edge-2-{namespace}"[:63]]
    addresses = [
        [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "ExternalIP", "address": "203.0.113.5"}],
        [{"type": "InternalIP", "address": "10.0.0.6"}, {"type": "Hostname", "address": "edge-2"}],
    ]
    for name, node_addresses in zip(names, addresses, strict=True):
        kube.core.create_node({"metadata": {"name": name}})
        kube.core.patch_node_status(name, {"status": {"addresses": node_addresses}})
    yield names
    for name in names:
        kube.core.delete_node(name)


def create_ready_pod(kube: Kube, namespace: str, name: str, node: str, host_ip: str, ready: bool = True) -> None:
    body = {
        "metadata": {"name": name, "labels": POD_LABELS},
        "spec": {"nodeName": node, "automountServiceAccountToken": False, "containers": [{"name": "twingress", "image": "twingress:test"}]},
    }
    kube.core.create_namespaced_pod(namespace, body)
    set_pod_ready(kube, namespace, name, host_ip, ready)


def set_pod_ready(kube: Kube, namespace: str, name: str, host_ip: str, ready: bool) -> None:
    status = {"phase": "Running", "hostIP": host_ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    kube.core.patch_namespaced_pod_status(name, namespace, {"status": status})


def test_addresses_of_the_nodes_running_ready_pods(kube: Kube, namespace: str, twingress, nodes: list[str]) -> None:
    # pods need their service account (the controller-manager may have made "default" already)
    try:
        kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    except ApiException as error:
        if error.status != 409:
            raise
    create_ready_pod(kube, namespace, "twingress-a", nodes[0], "10.0.0.5")
    create_ready_pod(kube, namespace, "twingress-b", nodes[1], "10.0.0.6")
    create_ready_pod(kube, namespace, "twingress-c", nodes[1], "10.0.0.6", ready=False)
    start_controller(twingress, namespace)  # the Lease namespace is where our pods are watched
    our_ingress(kube, namespace, "site")
    site = wait_ingress(kube, namespace, "site", lambda i: len(load_balancer(i)) == 2, "status from two nodes")
    assert load_balancer(site) == ["10.0.0.6", "203.0.113.5"]  # ExternalIP preferred, else InternalIP

    set_pod_ready(kube, namespace, "twingress-b", "10.0.0.6", False)
    wait_ingress(kube, namespace, "site", lambda i: load_balancer(i) == ["203.0.113.5"], "status after a pod went unready")
    kube.core.delete_namespaced_pod("twingress-a", namespace, grace_period_seconds=0)
    set_pod_ready(kube, namespace, "twingress-c", "10.0.0.6", True)
    wait_until(lambda: load_balancer(read_ingress(kube, namespace, "site")) == ["10.0.0.6"], what="status follows the pods")


def create_load_balancer(kube: Kube, namespace: str, name: str) -> None:
    """A LoadBalancer Service no cloud controller provisions here: the test writes its status as one would."""
    body = {"metadata": {"name": name}, "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}
    kube.core.create_namespaced_service(namespace, body)


def provision(kube: Kube, namespace: str, name: str, *entries: dict[str, str]) -> None:
    """What a cloud controller writes once its load balancer exists: status.loadBalancer.ingress, through the status subresource."""
    kube.core.patch_namespaced_service_status(name, namespace, {"status": {"loadBalancer": {"ingress": list(entries) or None}}})


def said(proxy, text: str) -> str:
    return wait_until(lambda: text if text in proxy.log() else None, what=f"the log line {text!r}")


def status_addresses(proxy) -> float:
    return proxy.metric("twingress_status_addresses")


def test_publish_service_follows_the_load_balancer_and_never_writes_an_empty_status(kube: Kube, namespace: str, twingress) -> None:
    """
    --publish-service NAMESPACE/NAME (ingress-nginx's rule, L{ingress.controllers.status.service_addresses}):
    status.loadBalancer.ingress - IPs and hostnames - then spec.externalIPs; a Service without an
    address, or gone, is said in the log and the gauge, and leaves a good status as it is.
    """
    create_load_balancer(kube, namespace, "edge")
    proxy = start_controller(twingress, namespace, "--publish-service", f"{namespace}/edge")
    our_ingress(kube, namespace, "site")
    said(proxy, f"--publish-service {namespace}/edge: the Service has no address yet (type LoadBalancer")
    wait_until(lambda: proxy.metric("twingress_controller_syncs_total", controller="status", result="ok") >= 1, what="the Ingress synced")
    assert load_balancer(read_ingress(kube, namespace, "site")) == []  # synced, and nothing written for lack of an address
    assert writes(proxy, kind="Ingress", verb="patch-status") == 0
    assert status_addresses(proxy) == 0

    provision(kube, namespace, "edge", {"ip": "192.0.2.80"}, {"hostname": "lb-1.example.com"})
    site = wait_ingress(kube, namespace, "site", lambda i: len(load_balancer(i)) == 2, "status from the load balancer")
    assert site["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.80"}, {"hostname": "lb-1.example.com"}]
    assert status_addresses(proxy) == 2

    # the cloud controller moves the load balancer, and the Service gains an external IP: the status follows both
    provision(kube, namespace, "edge", {"hostname": "lb-2.example.com"})
    kube.core.patch_namespaced_service("edge", namespace, {"spec": {"externalIPs": ["203.0.113.9"]}})
    wait_ingress(kube, namespace, "site", lambda i: load_balancer(i) == ["203.0.113.9", "lb-2.example.com"], "status after the move")
    our_ingress(kube, namespace, "later")
    wait_ingress(kube, namespace, "later", lambda i: load_balancer(i) == ["203.0.113.9", "lb-2.example.com"], "a new Ingress's status")

    # the load balancer goes, then the Service: said each time, and the good status stays
    kube.core.patch_namespaced_service("edge", namespace, {"spec": {"externalIPs": None}})
    wait_ingress(kube, namespace, "later", lambda i: load_balancer(i) == ["lb-2.example.com"], "status without the external IP")
    wait_ingress(kube, namespace, "site", lambda i: load_balancer(i) == ["lb-2.example.com"], "status without the external IP")
    provision(kube, namespace, "edge")
    said(proxy, f"--publish-service {namespace}/edge: the Service has no address yet")
    kube.delete_service(namespace, "edge")
    said(proxy, f"--publish-service {namespace}/edge: the Service does not exist; Ingress status is left as it is")
    assert status_addresses(proxy) == 0
    before = writes(proxy, kind="Ingress", verb="patch-status")
    our_ingress(kube, namespace, "orphan")  # queued with no address known: no write
    wait_until(lambda: proxy.has_host(f"orphan.{namespace}.example.com"), what="the new Ingress in our stores")
    for name in ("site", "later"):
        assert load_balancer(read_ingress(kube, namespace, name)) == ["lb-2.example.com"]

    # a new load balancer: one write per Ingress, none of them an empty one meanwhile
    create_load_balancer(kube, namespace, "edge")
    provision(kube, namespace, "edge", {"ip": "192.0.2.81"})
    said(proxy, f"--publish-service {namespace}/edge: publishing 192.0.2.81")
    for name in ("site", "later", "orphan"):
        wait_ingress(kube, namespace, name, lambda i: load_balancer(i) == ["192.0.2.81"], f"{name}'s status from the new load balancer")
    assert writes(proxy, kind="Ingress", verb="patch-status") == before + 3
