"""
Helpers for the controller tests: annotated Services, generated Ingresses, Events and Leases
read back from the real apiserver, and a twingress started with its own Lease.

Each test passes its own Lease name (and namespace), so the controllers of other tests'
processes never compete with the ones under test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from kubernetes import client

from ingress.model import CONTROLLER_NAME
from tests.kube.api import Kube, gone
from tests.kube.twingress import KubeTwingress, wait_until

GENERATE = "ingress/http"
MANAGED_BY = ("app.kubernetes.io/managed-by", "twingress")


def controller_args(namespace: str, *extra: str, lease: str = "lease") -> tuple[str, ...]:
    """
    Options of a twingress whose controllers use a Lease of this test only and see only the
    test's namespace (every test's twingress leads its own Lease, so each must write only there).
    """
    return (
        "--watch-namespace", namespace,
        "--leader-election-namespace", namespace,
        "--leader-election-id", f"{lease}-{namespace}"[:63],
        *extra,
    )


def start_controller(twingress: Callable[..., KubeTwingress], namespace: str, *extra: str, lease: str = "lease") -> KubeTwingress:
    return twingress(*controller_args(namespace, *extra, lease=lease))


def service_body(namespace: str, name: str, annotations: Optional[dict[str, str]] = None, ports: Optional[list[dict]] = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {"ports": ports or [{"name": "http", "port": 80, "targetPort": 8080}]},
    }


def create_annotated_service(kube: Kube, namespace: str, name: str, **annotations: str) -> dict:
    """A Service with C{ingress/http: "true"} and the given C{ingress/<key>} annotations."""
    values = {GENERATE: "true", **{f"ingress/{k.replace('_', '-')}": v for k, v in annotations.items()}}
    return kube._dict(kube.core.create_namespaced_service(namespace, service_body(namespace, name, values)))


def set_annotations(kube: Kube, namespace: str, name: str, annotations: dict[str, Optional[str]]) -> dict:
    """Merge-patch the Service's annotations (None removes one)."""
    return kube._dict(kube.core.patch_namespaced_service(name, namespace, {"metadata": {"annotations": annotations}}))


def read_ingress(kube: Kube, namespace: str, name: str) -> Optional[dict]:
    if gone(lambda: kube.networking.read_namespaced_ingress(name, namespace)):
        return None
    return kube._dict(kube.networking.read_namespaced_ingress(name, namespace))


def wait_ingress(kube: Kube, namespace: str, name: str, check: Callable[[dict], bool] = lambda i: True, what: str = "", timeout: float = 30.0) -> dict:
    """Until the Ingress exists and C{check} holds; returns it."""

    def ready() -> Optional[dict]:
        ingress = read_ingress(kube, namespace, name)
        return ingress if ingress is not None and check(ingress) else None

    return wait_until(ready, timeout=timeout, what=what or f"Ingress {namespace}/{name}")


def wait_no_ingress(kube: Kube, namespace: str, name: str, timeout: float = 30.0, what: str = "") -> None:
    wait_until(lambda: read_ingress(kube, namespace, name) is None, timeout=timeout, what=what or f"Ingress {namespace}/{name} gone")


def host_of(ingress: dict) -> str:
    return ingress["spec"]["rules"][0]["host"]


def backend_port(ingress: dict) -> dict:
    return ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]


def events_about(kube: Kube, namespace: str, name: str, reason: Optional[str] = None) -> list[dict]:
    """
    twingress's events.k8s.io/v1 Events regarding the object C{name} in C{namespace}: the control
    plane's own (the apiserver's ClusterIPAllocation about a Service, now and then) are not ours.
    """
    events = client.EventsV1Api(kube.api).list_namespaced_event(namespace)
    found = [kube._dict(e) for e in events.items]
    return [
        e for e in found
        if e["regarding"]["name"] == name and e.get("reportingController") == CONTROLLER_NAME and (reason is None or e["reason"] == reason)
    ]


def wait_event(kube: Kube, namespace: str, name: str, reason: str, timeout: float = 30.0) -> dict:
    return wait_until(lambda: (events_about(kube, namespace, name, reason) or [None])[0], timeout=timeout, what=f"Event {reason} about {name}")


def lease_holder(kube: Kube, namespace: str, lease: str) -> str:
    coordination = client.CoordinationV1Api(kube.api)
    if gone(lambda: coordination.read_namespaced_lease(lease, namespace)):
        return ""
    return coordination.read_namespaced_lease(lease, namespace).spec.holder_identity or ""


def load_balancer(ingress: dict) -> list[str]:
    entries = ((ingress.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [e.get("ip") or e.get("hostname") for e in entries]


def writes(process: KubeTwingress, **labels: str) -> float:
    return process.metric("twingress_controller_api_writes_total", **labels)


def managers_of(ingress: dict) -> set[str]:
    return {m["manager"] for m in ingress["metadata"].get("managedFields") or []}


def is_owned_by(ingress: dict, service: dict) -> bool:
    refs = ingress["metadata"].get("ownerReferences") or []
    return any(
        r["kind"] == "Service" and r["uid"] == service["metadata"]["uid"] and r.get("controller") and r.get("blockOwnerDeletion")
        for r in refs
    )

