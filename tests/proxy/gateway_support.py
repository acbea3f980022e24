"""
Gateway API objects for the tests that run twistd in manifests mode: our GatewayClass, a
Gateway, a route (HTTPRoute or GRPCRoute), and the write that waits for the table serving them.
"""

from __future__ import annotations

from typing import Any, Optional

from tests.support import Manifests, Twingress

GW = "gateway.networking.k8s.io/v1"
GATEWAY_CLASS = {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}}


def gateway(name: str, listeners: list[dict[str, Any]]) -> dict[str, Any]:
    """A Gateway of our class in the default namespace."""
    return {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": name, "namespace": "default"}, "spec": {"gatewayClassName": "twingress", "listeners": listeners}}


def route(name: str, parents: list[dict[str, Any]], rules: list[dict[str, Any]], hostnames: Optional[list[str]] = None, kind: str = "HTTPRoute") -> dict[str, Any]:
    """A route of C{kind} in the default namespace."""
    spec: dict[str, Any] = {"parentRefs": parents, "rules": rules}
    if hostnames:
        spec["hostnames"] = hostnames
    return {"apiVersion": GW, "kind": kind, "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def apply(manifests: Manifests, process: Twingress, *objects: dict[str, Any], name: str = "gateway.yaml") -> None:
    """Write C{objects} (with our GatewayClass) and wait for the table that serves them."""
    generation = process.generation()
    manifests.write(name, GATEWAY_CLASS, *objects)
    process.wait_generation_above(generation)
