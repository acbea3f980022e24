# -*- test-case-name: tests.kube.test_ingress_status -*-
"""
Ingress status: C{status.loadBalancer.ingress} says where an Ingress is served.

The addresses are C{--publish-status-address} when given, else the
addresses of the nodes our ready pods run on (ExternalIP first, then
InternalIP, else the pod's hostIP) - with hostNetwork that is where traffic
arrives.  An Ingress we serve gets them; one we stopped serving (its class
changed) and that still shows exactly our addresses is cleared; any other
Ingress is never touched.  A write happens only when the value differs, so a
resync costs no writes.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Optional

from ingress.controllers.writer import LeaderWriter
from ingress.model import ClusterState, Ingress, IngressClass, Node, Pod
from ingress.routing.selection import select_ingresses
from ingress.sources.kube.client import MERGE_PATCH
from ingress.sources.kube.reflector import Store

ADDRESS_PREFERENCE = ("ExternalIP", "InternalIP", "ExternalDNS", "Hostname")


class PublishedAddresses:
    """Where our Ingresses are reachable, recomputed from the stores on each call (cheap: our pods only)."""

    def __init__(self, static: tuple[str, ...], pods: Optional[Store] = None, nodes: Optional[Store] = None) -> None:
        self.static = tuple(sorted(static))
        self.pods = pods
        self.nodes = nodes

    def current(self) -> tuple[str, ...]:
        if self.static or self.pods is None:
            return self.static
        found = set()
        for pod in self.pods.values():
            if isinstance(pod, Pod) and pod.ready and pod.node_name:
                address = self._node_address(pod.node_name) or pod.host_ip
                if address:
                    found.add(address)
        return tuple(sorted(found))

    def _node_address(self, node_name: str) -> str:
        node = self.nodes.get(("", node_name)) if self.nodes is not None else None
        if not isinstance(node, Node):
            return ""
        by_type: dict[str, str] = {}
        for type_, address in node.addresses:
            by_type.setdefault(type_, address)
        return next((by_type[t] for t in ADDRESS_PREFERENCE if t in by_type), "")


def load_balancer_entries(addresses: tuple[str, ...]) -> list[dict[str, str]]:
    """IPs as C{ip}, names as C{hostname}: the two shapes of a LoadBalancerIngress."""
    entries = []
    for address in addresses:
        try:
            ipaddress.ip_address(address)
            entries.append({"ip": address})
        except ValueError:
            entries.append({"hostname": address})
    return entries


class IngressStatusSync:
    """The sync function of the status controller, one Ingress key at a time."""

    def __init__(
        self,
        writer: LeaderWriter,
        ingresses: Store,
        classes: Store,
        addresses: PublishedAddresses,
        class_name: str,
        controller_name: str,
    ) -> None:
        self.writer = writer
        self.ingresses = ingresses
        self.classes = classes
        self.addresses = addresses
        self.class_name = class_name
        self.controller_name = controller_name

    def __call__(self, key: tuple[str, str]) -> None:
        ingress = self.ingresses.get(key)
        if not isinstance(ingress, Ingress):
            return
        addresses = self.addresses.current()
        if not addresses:
            return  # nothing known yet (pods starting): never wipe a status for lack of knowledge
        current = tuple(sorted(ingress.load_balancer))
        if self._served(ingress):
            if current != addresses:
                self._write(ingress, addresses)
        elif current and current == addresses:
            self._write(ingress, ())

    def _served(self, ingress: Ingress) -> bool:
        classes = tuple(c for c in self.classes.values() if isinstance(c, IngressClass))
        state = ClusterState(ingresses=(ingress,), ingress_classes=classes)
        return bool(select_ingresses(state, class_name=self.class_name, controller_name=self.controller_name))

    def _write(self, ingress: Ingress, addresses: tuple[str, ...]) -> None:
        body: dict[str, Any] = {"status": {"loadBalancer": {"ingress": load_balancer_entries(addresses) or None}}}
        path = f"/apis/networking.k8s.io/v1/namespaces/{ingress.meta.namespace}/ingresses/{ingress.meta.name}/status"
        self.writer.request("PATCH", path, "Ingress", "patch-status", body, MERGE_PATCH)
