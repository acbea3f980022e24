# -*- test-case-name: tests.unit.test_routing -*-
"""
Backends to L{Upstream}s: a Service port resolved to the ready addresses of its EndpointSlices.

The indexes (Services by name, slices by Service) are built once per build, and
one Upstream object is made per key, so that routes sharing a backend share it
(and the proxy's pools keyed by it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Optional

from ingress.model import ClusterState, EndpointSlice, IngressBackend, Service, ServiceBackendPort, ServicePort
from ingress.routing.upstream import Upstream

ROUTED_ADDRESS_TYPES = frozenset({"IPv4", "IPv6"})

Issue = tuple[str, str]
"""A (reason, message) pair that becomes a L{Problem} for each Ingress that hits it."""


class Backends:
    """
    Backend to L{Upstream}, with the Service and EndpointSlice indexes built once per build.

    One Upstream object per key, so that routes sharing a backend share it
    (and the proxy's pools keyed by it).
    """

    def __init__(self, state: ClusterState, slices: Optional[Mapping[tuple[str, str], list[EndpointSlice]]] = None) -> None:
        """
        C{slices}: the slices of the Services that will be asked for, when the caller has them (an
        EndpointSlice-only update); else every slice of C{state} is indexed.
        """
        self._services: Mapping[tuple[str, str], Service] = state.services
        self._slices: dict[tuple[str, str], list[EndpointSlice]] = {}
        self._upstreams: dict[str, tuple[Upstream, Optional[Issue]]] = {}
        if slices is not None:
            self._slices = {key: [s for s in found if s.address_type in ROUTED_ADDRESS_TYPES] for key, found in slices.items()}
            return
        for endpoint_slice in state.endpoint_slices:
            if endpoint_slice.service_name and endpoint_slice.address_type in ROUTED_ADDRESS_TYPES:
                self._slices.setdefault((endpoint_slice.meta.namespace, endpoint_slice.service_name), []).append(endpoint_slice)

    def upstream(self, namespace: str, backend: IngressBackend, protocol: str = "TCP") -> tuple[Upstream, Optional[Issue]]:
        """
        The shared Upstream for a backend, and what is wrong with it (if anything).

        C{protocol} is the Service port's protocol the caller needs (HTTP and TCP
        streams: "TCP"; UDP streams: "UDP"); a UDP upstream's key ends in "/UDP".
        """
        key = f"{namespace}/{backend.service_name}:{backend.port}" + ("" if protocol == "TCP" else f"/{protocol}")
        found = self._upstreams.get(key)
        if found is None:
            found = self._upstreams[key] = self._resolve(key, namespace, backend, protocol)
        return found

    def service_upstream(self, namespace: str, backend: IngressBackend) -> tuple[Upstream, Optional[Issue]]:
        """
        ingress-nginx "Service Upstream": the Service's cluster IP and port as the one endpoint,
        instead of its pods (kube-proxy balances; affinity and retries to another pod do not apply).
        """
        upstream, issue = self.upstream(namespace, backend)
        service = self._services.get((namespace, backend.service_name))
        if issue is not None or service is None or service.type == "ExternalName":
            return upstream, issue
        if not service.cluster_ip:
            return Upstream(upstream.key + "#service", ()), ("NoClusterIP", f'Service "{namespace}/{backend.service_name}" has no cluster IP (service-upstream)')
        port = _find_port(service.ports, backend.port)
        assert port is not None  # the upstream resolved without an issue
        return Upstream(upstream.key + "#service", ((service.cluster_ip, port.port),)), None

    def first_port_upstream(self, namespace: str, service_name: str) -> tuple[Upstream, Optional[Issue]]:
        """
        ingress-nginx "Default Backend": a Service of the namespace, at its first port ("In case the
        service has multiple ports, the first one is the one which will receive the backend traffic").
        """
        service = self._services.get((namespace, service_name))
        if service is None or not service.ports:
            what = "not found" if service is None else "has no ports"
            return Upstream(f"{namespace}/{service_name}:", ()), ("ServiceNotFound", f'Service "{namespace}/{service_name}" {what}')
        first = service.ports[0]
        return self.upstream(namespace, IngressBackend(service_name, ServiceBackendPort(number=first.port)))

    def _resolve(self, key: str, namespace: str, backend: IngressBackend, protocol: str) -> tuple[Upstream, Optional[Issue]]:
        """An unusable backend still gets an (empty) Upstream: its route answers 503, not 404."""
        empty = Upstream(key, ())
        if not backend.service_name:
            return empty, ("UnsupportedBackend", "resource backends are not supported")
        service = self._services.get((namespace, backend.service_name))
        if service is None:
            return empty, ("ServiceNotFound", f'Service "{namespace}/{backend.service_name}" not found')
        service_port = _find_port(service.ports, backend.port, protocol)
        if service.type == "ExternalName":
            number = backend.port.number
            if number is None and service_port is not None:
                number = service_port.port
            if number is not None:
                return Upstream(key, (), external_name=service.external_name, external_port=number), None
        if service_port is None:
            message = f'Service "{namespace}/{backend.service_name}" has no port {backend.port}'
            return empty, ("PortNotFound", message)
        if service_port.protocol != protocol:
            message = f'Service "{namespace}/{backend.service_name}" port {backend.port} is {service_port.protocol}, not {protocol}'
            return empty, ("ProtocolMismatch", message)
        return Upstream(key, self._endpoints(namespace, service.meta.name, service_port)), None

    def _endpoints(self, namespace: str, service_name: str, port: ServicePort) -> tuple[tuple[str, int], ...]:
        """Ready addresses from every slice of the Service, at the slice port named like the ServicePort."""
        found: set[tuple[str, int]] = set()
        for endpoint_slice in self._slices.get((namespace, service_name), ()):
            number = next((p.port for p in endpoint_slice.ports if p.name == port.name), None)
            if number is None:
                continue
            for endpoint in endpoint_slice.endpoints:
                if endpoint.ready:
                    found.update((address, number) for address in endpoint.addresses)
        return tuple(sorted(found))


def _find_port(ports: Iterable[ServicePort], wanted: ServiceBackendPort, protocol: str = "TCP") -> Optional[ServicePort]:
    """By name, or by number (C{protocol} first: 53/TCP and 53/UDP may both exist; HTTP is TCP)."""
    if wanted.number is None:
        return next((p for p in ports if p.name == wanted.name), None)
    matches = sorted((p for p in ports if p.port == wanted.number), key=lambda p: p.protocol != protocol)
    return matches[0] if matches else None
