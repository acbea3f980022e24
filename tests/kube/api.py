"""
The objects a kube test writes: L{Kube} creates, updates and deletes Namespaces, selector-less
Services, EndpointSlices, IngressClasses, Ingresses (and what else the tests need) through the
C{kubernetes} client, with bodies as plain dicts, as a manifest would be written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.kube.twingress import (
    CONTROLLER,
    DEFAULT_CLASS_ANNOTATION,
    INGRESS_CLASS,
    SERVICE_NAME_LABEL,
    SHIPPED_INGRESS_CLASS,
    wait_until,
)
from tests.support import EchoBackend


class Kube:
    """The objects tests create, with the C{kubernetes} client and plain dict bodies."""

    def __init__(self, kubeconfig: Path) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.discovery = client.DiscoveryV1Api(self.api)

    def close(self) -> None:
        self.api.close()

    # namespaces

    def create_namespace(self, name: str, labels: Optional[dict[str, str]] = None) -> dict:
        return self._dict(self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}}))

    def delete_namespace(self, name: str) -> None:
        _ignore_404(lambda: self.core.delete_namespace(name))

    # Services

    def create_service(self, namespace: str, name: str, port: int = 80, port_name: str = "http", target_port: Optional[int] = None) -> dict:
        """A selector-less ClusterIP Service: its EndpointSlices are the test's to write."""
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": port_name, "port": port, "targetPort": target_port or port, "protocol": "TCP"}]},
        }
        return self._dict(self.core.create_namespaced_service(namespace, body))

    def delete_service(self, namespace: str, name: str) -> None:
        self.core.delete_namespaced_service(name, namespace)

    # EndpointSlices

    @staticmethod
    def endpoint_slice_body(
        namespace: str,
        name: str,
        service: str,
        endpoints: Sequence[str | tuple[str, bool]],
        port: int,
        port_name: str = "http",
    ) -> dict:
        """C{endpoints}: addresses (ready) or (address, ready) pairs; one port for all of them."""
        items = []
        for endpoint in endpoints:
            address, ready = (endpoint, True) if isinstance(endpoint, str) else endpoint
            items.append({"addresses": [address], "conditions": {"ready": ready, "serving": ready, "terminating": False}})
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": namespace, "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4",
            "endpoints": items,
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        }

    def put_endpoint_slice(
        self,
        namespace: str,
        name: str,
        service: str,
        endpoints: Sequence[str | tuple[str, bool]],
        port: int,
        port_name: str = "http",
    ) -> dict:
        """Create the EndpointSlice, or replace its endpoints and ports when it exists."""
        body = self.endpoint_slice_body(namespace, name, service, endpoints, port, port_name)
        try:
            return self._dict(self.discovery.create_namespaced_endpoint_slice(namespace, body))
        except ApiException as e:
            if e.status != 409:
                raise
        current = self.discovery.read_namespaced_endpoint_slice(name, namespace)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        return self._dict(self.discovery.replace_namespaced_endpoint_slice(name, namespace, body))

    def delete_endpoint_slice(self, namespace: str, name: str) -> None:
        self.discovery.delete_namespaced_endpoint_slice(name, namespace)

    def backend(self, namespace: str, name: str, backends: Sequence[EchoBackend], port: int = 80) -> None:
        """A Service C{name} and one EndpointSlice C{name}-1 with the (ready) echo backends,
        which must all listen on one port number."""
        ports = {b.port for b in backends}
        assert len(ports) == 1, f"one EndpointSlice has one port list: {ports}"
        self.create_service(namespace, name, port=port, target_port=ports.pop())
        self.put_endpoint_slice(namespace, f"{name}-1", name, [b.host for b in backends], backends[0].port)

    # IngressClasses (cluster-scoped)

    @staticmethod
    def ingress_class_body(name: str, controller: str = CONTROLLER, default: Optional[bool] = None) -> dict:
        """The shipped IngressClass (k8s/base/ingressclass.yaml); another name or controller for the
        tests of other classes, the default-class annotation when C{default} is given."""
        body = yaml.safe_load(SHIPPED_INGRESS_CLASS.read_text())
        body["metadata"]["name"] = name
        body["metadata"]["annotations"] = {} if default is None else {DEFAULT_CLASS_ANNOTATION: "true" if default else "false"}
        body["spec"]["controller"] = controller
        return body

    def put_ingress_class(self, name: str, controller: str = CONTROLLER, default: Optional[bool] = None) -> dict:
        """Create the IngressClass, or replace it (controller is immutable: a different one is
        deleted and created anew)."""
        body = self.ingress_class_body(name, controller, default)
        try:
            return self._dict(self.networking.create_ingress_class(body))
        except ApiException as e:
            if e.status != 409:
                raise
        current = self.networking.read_ingress_class(name)
        if current.spec.controller != controller:
            self.delete_ingress_class(name)
            wait_until(lambda: gone(lambda: self.networking.read_ingress_class(name)), 30, f"IngressClass {name} deleted")
            return self._dict(self.networking.create_ingress_class(body))
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        return self._dict(self.networking.replace_ingress_class(name, body))

    def set_default_class(self, name: str, default: bool) -> dict:
        """Set the is-default-class annotation to "true" or "false" (a merge patch)."""
        patch = {"metadata": {"annotations": {DEFAULT_CLASS_ANNOTATION: "true" if default else "false"}}}
        return self._dict(self.networking.patch_ingress_class(name, patch))

    def delete_ingress_class(self, name: str) -> None:
        _ignore_404(lambda: self.networking.delete_ingress_class(name))

    # Ingresses

    @staticmethod
    def ingress_body(
        namespace: str,
        name: str,
        host: Optional[str],
        service: str,
        path: str = "/",
        path_type: str = "Prefix",
        class_name: Optional[str] = INGRESS_CLASS,
        port: int = 80,
    ) -> dict:
        rule: dict[str, Any] = {
            "http": {
                "paths": [
                    {"path": path, "pathType": path_type, "backend": {"service": {"name": service, "port": {"number": port}}}}
                ]
            }
        }
        if host:
            rule["host"] = host
        spec: dict[str, Any] = {"rules": [rule]}
        if class_name:
            spec["ingressClassName"] = class_name
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }

    def create_ingress(self, namespace: str, name: str, host: Optional[str], service: str, **kwargs: Any) -> dict:
        body = self.ingress_body(namespace, name, host, service, **kwargs)
        return self._dict(self.networking.create_namespaced_ingress(namespace, body))

    def replace_ingress(self, namespace: str, name: str, host: Optional[str], service: str, **kwargs: Any) -> dict:
        """Replace the whole spec (read-modify-write with the current resourceVersion)."""
        body = self.ingress_body(namespace, name, host, service, **kwargs)

        def write() -> Any:
            body["metadata"]["resourceVersion"] = self.networking.read_namespaced_ingress(name, namespace).metadata.resource_version
            return self.networking.replace_namespaced_ingress(name, namespace, body)

        return self._dict(retry_conflicts(write))

    def delete_ingress(self, namespace: str, name: str) -> None:
        self.networking.delete_namespaced_ingress(name, namespace)

    def read_ingress(self, namespace: str, name: str) -> dict:
        return self._dict(self.networking.read_namespaced_ingress(name, namespace))

    def ingress_exists(self, namespace: str, name: str) -> bool:
        return not gone(lambda: self.networking.read_namespaced_ingress(name, namespace))

    # ConfigMaps (churn that moves resourceVersions on)

    def churn(self, namespace: str, count: int = 5) -> None:
        """Create and delete C{count} ConfigMaps: etcd's revision moves on by 2 * count."""
        for _ in range(count):
            name = f"churn-{uuid.uuid4().hex[:8]}"
            self.core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"k": "v"}})
            self.core.delete_namespaced_config_map(name, namespace)

    # internals

    def _dict(self, obj: Any) -> dict:
        return self.api.sanitize_for_serialization(obj)



def retry_conflicts(write: Callable[[], Any], attempts: int = 5) -> Any:
    """
    A read-modify-write, again while the apiserver answers 409 Conflict: between the read and the
    write, twingress (the leader) may have written the object's status, which moves its
    resourceVersion on (a test's StreamIngress replace met exactly that in CI).
    """
    for _ in range(attempts - 1):
        try:
            return write()
        except ApiException as e:
            if e.status != 409:
                raise
    return write()


def gone(read: Callable[[], Any]) -> bool:
    """True when reading the object answers 404; any other error is raised."""
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def _ignore_404(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as e:
        if e.status != 404:
            raise
