# -*- test-case-name: tests.kube.test_ingress_status -*-
"""
Ingress status: C{status.loadBalancer.ingress} says where an Ingress is served.

The addresses are C{--publish-status-address} when given; else, with
C{--publish-service NAMESPACE/NAME}, the addresses of that Service (a
LoadBalancer's as its cloud controller writes them, see L{service_addresses});
else the addresses of the nodes our ready pods run on (ExternalIP first, then
InternalIP, else the pod's hostIP) - with hostNetwork that is where traffic
arrives.  An Ingress we serve gets them; one we stopped serving (its class
changed) and that still shows exactly our addresses is cleared; any other
Ingress is never touched.  A write happens only when the value differs, so a
resync costs no writes; none happens while no address is known (a Service
missing or not provisioned yet, no ready pod), so a good status is never
overwritten by an empty one.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from typing import Any, Optional

from twisted.logger import Logger

from ingress.controllers.writer import LeaderWriter
from ingress.model import ClusterState, Ingress, IngressClass, Node, Pod, Problem, Service
from ingress.routing.selection import select_ingresses
from ingress.sources.kube.client import MERGE_PATCH
from ingress.sources.kube.reflector import Store

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

ADDRESS_PREFERENCE = ("ExternalIP", "InternalIP", "ExternalDNS", "Hostname")


def service_addresses(service: Service) -> tuple[str, ...]:
    """
    Where a Service takes traffic, by ingress-nginx's rule for C{--publish-service}
    ("the controller mirrors the address of this service's endpoints to the load-balancer
    status of all Ingress objects it satisfies", U{https://kubernetes.github.io/ingress-nginx/user-guide/cli-arguments/};
    the rule itself is C{statusAddressFromService} in ingress-nginx's
    C{internal/ingress/status/status.go}): a LoadBalancer's C{status.loadBalancer.ingress}
    (each entry's IP, else its hostname) followed by its C{spec.externalIPs} not already
    there; a NodePort's C{spec.externalIPs}, else its clusterIP; a ClusterIP's clusterIP; an
    ExternalName's name.  A LoadBalancer not provisioned yet has none.
    """
    if service.type == "LoadBalancer":
        return tuple(dict.fromkeys(service.load_balancer + service.external_ips))
    if service.type == "NodePort" and service.external_ips:
        return service.external_ips
    if service.type == "ExternalName":
        return (service.external_name,) if service.external_name else ()
    return (service.cluster_ip,) if service.cluster_ip else ()


class PublishedService:
    """
    The Service of C{--publish-service}, read from its own informer's store: its addresses,
    or why there are none - it is missing, unreadable or not provisioned yet.
    """

    def __init__(self, store: Store, namespace: str, name: str) -> None:
        self.store = store
        self.key = (namespace, name)

    def addresses(self) -> tuple[tuple[str, ...], str]:
        """The addresses, and "" or the reason there are none."""
        found = self.store.get(self.key)
        if isinstance(found, Problem):
            return (), f"cannot be read ({found.reason}: {found.message})"
        if not isinstance(found, Service):
            return (), "does not exist"
        addresses = service_addresses(found)
        if addresses:
            return addresses, ""
        if found.type == "LoadBalancer":
            return (), "has no address yet (type LoadBalancer: no status.loadBalancer.ingress, no spec.externalIPs)"
        return (), f"has no address (type {found.type})"


class PublishedAddresses:
    """
    Where our Ingresses are reachable, recomputed from the stores on each call (cheap: our
    pods only, or one Service).  Each change of the addresses is told to C{on_count} (the
    C{twingress_status_addresses} gauge); each change of the reason there are none is one log line.
    """

    def __init__(
        self,
        static: tuple[str, ...],
        pods: Optional[Store] = None,
        nodes: Optional[Store] = None,
        service: Optional[PublishedService] = None,
        on_count: Callable[[int], None] = lambda count: None,
    ) -> None:
        self.static = tuple(sorted(static))
        self.pods = pods
        self.nodes = nodes
        self.service = service
        self.on_count = on_count
        self._lock = threading.Lock()
        self._told: Optional[tuple[tuple[str, ...], str]] = None

    def current(self) -> tuple[str, ...]:
        """The addresses now (any thread: the status loop's workers, the informers' listeners)."""
        why = ""
        if self.static:
            found = self.static
        elif self.service is not None:
            addresses, why = self.service.addresses()
            found = tuple(sorted(addresses))
        elif self.pods is not None:
            found = self._from_pods()
        else:
            found = self.static
        self._tell(found, why)
        return found

    def _tell(self, found: tuple[str, ...], why: str) -> None:
        with self._lock:
            told, self._told = self._told, (found, why)
        if told == (found, why):
            return
        self.on_count(len(found))
        if self.service is not None:
            namespace, name = self.service.key
            if why:
                log.warn("status: --publish-service {ns}/{name}: the Service {why}; Ingress status is left as it is",
                         ns=namespace, name=name, why=why)
            else:
                log.info("status: --publish-service {ns}/{name}: publishing {addresses}", ns=namespace, name=name, addresses=", ".join(found))

    def _from_pods(self) -> tuple[str, ...]:
        assert self.pods is not None
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
            return  # nothing known (pods starting, the Service not provisioned): never wipe a status for lack of knowledge
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
