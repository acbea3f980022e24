"""
Gateway API objects in the test cluster, for the Gateway API tests (the release's CRDs judge them).

- L{GatewayAPI}: create, read, patch and delete GatewayClasses, Gateways, routes and
  ReferenceGrants as plain dicts, through the C{kubernetes} client's custom objects API.
- L{gateway_body}, L{route_body}, L{listener}: the objects as a manifest would write them.
- L{conditions}, L{ours}: the status twingress wrote, in a form a test compares.
- The fixtures (C{gateway_api}, C{gateway_class}) are in C{tests/kube/conftest.py}.
"""

from __future__ import annotations

from typing import Any, Optional

from kubernetes import client

from tests.kube.api import Kube, gone
from tests.kube.controller_support import start_controller
from tests.kube.twingress import KubeTwingress

GROUP, VERSION = "gateway.networking.k8s.io", "v1"
GRANT_VERSION = "v1beta1"
"""ReferenceGrant's storage version in v1.6.3 (v1 is served too); twingress watches v1beta1."""

CONTROLLER = "twingress.io/gateway-controller"
STATUS_ADDRESS = "192.0.2.80"


class GatewayAPI:
    """Gateway API objects as plain dicts through the custom objects API."""

    def __init__(self, kube: Kube) -> None:
        self.custom = client.CustomObjectsApi(kube.api)

    @staticmethod
    def _version(plural: str) -> str:
        return GRANT_VERSION if plural == "referencegrants" else VERSION

    def create(self, plural: str, body: dict[str, Any], namespace: Optional[str] = None) -> dict[str, Any]:
        version = self._version(plural)
        if namespace is None:
            return dict(self.custom.create_cluster_custom_object(GROUP, version, plural, body))
        return dict(self.custom.create_namespaced_custom_object(GROUP, version, namespace, plural, body))

    def read(self, plural: str, name: str, namespace: Optional[str] = None) -> dict[str, Any]:
        version = self._version(plural)
        if namespace is None:
            return dict(self.custom.get_cluster_custom_object(GROUP, version, plural, name))
        return dict(self.custom.get_namespaced_custom_object(GROUP, version, namespace, plural, name))

    def patch(self, plural: str, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.custom.patch_namespaced_custom_object(GROUP, self._version(plural), namespace, plural, name, body))

    def patch_status(self, plural: str, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.custom.patch_namespaced_custom_object_status(GROUP, self._version(plural), namespace, plural, name, body))

    def delete(self, plural: str, name: str, namespace: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, self._version(plural), namespace, plural, name)

    def exists(self, plural: str, name: str, namespace: str) -> bool:
        return not gone(lambda: self.read(plural, name, namespace))

    def delete_class(self, name: str) -> None:
        self.custom.delete_cluster_custom_object(GROUP, VERSION, "gatewayclasses", name)


def gateway_body(name: str, class_name: str, port: int, listeners: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Gateway", "metadata": {"name": name},
        "spec": {"gatewayClassName": class_name, "listeners": listeners or [{"name": "http", "port": port, "protocol": "HTTP"}]},
    }


def listener(name: str, port: int, protocol: str = "HTTP", hostname: Optional[str] = None, **extra: Any) -> dict[str, Any]:
    """One listener of a Gateway; C{extra}: C{tls}, C{allowedRoutes}."""
    found: dict[str, Any] = {"name": name, "port": port, "protocol": protocol, **extra}
    if hostname is not None:
        found["hostname"] = hostname
    return found


def route_body(name: str, hostnames: list[str], rules: list[dict[str, Any]], parents: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HTTPRoute", "metadata": {"name": name},
        "spec": {"parentRefs": parents or [{"name": "gw"}], "hostnames": hostnames, "rules": rules},
    }


def grant_body(name: str, from_kind: str, from_namespace: str, to_kind: str, to_name: Optional[str] = None) -> dict[str, Any]:
    """A ReferenceGrant (in the namespace it is created in) from C{from_kind}s of C{from_namespace} to C{to_kind}s."""
    to: dict[str, Any] = {"group": "", "kind": to_kind, **({"name": to_name} if to_name else {})}
    return {
        "apiVersion": f"{GROUP}/{GRANT_VERSION}", "kind": "ReferenceGrant", "metadata": {"name": name},
        "spec": {"from": [{"group": GROUP, "kind": from_kind, "namespace": from_namespace}], "to": [to]},
    }


def conditions(found: list[dict[str, Any]]) -> dict[str, tuple[str, str, int]]:
    """{type: (status, reason, observedGeneration)} of a conditions list."""
    return {c["type"]: (c["status"], c["reason"], c["observedGeneration"]) for c in found}


def ours(route: dict[str, Any]) -> list[dict[str, Any]]:
    """A route's C{status.parents} entries written by twingress."""
    return [p for p in (route.get("status") or {}).get("parents", []) if p["controllerName"] == CONTROLLER]


def start(twingress: Any, namespace: str, *extra: str) -> KubeTwingress:
    """A twingress that leads its own Lease and publishes L{STATUS_ADDRESS}."""
    return start_controller(twingress, namespace, "--publish-status-address", STATUS_ADDRESS, *extra)
