# -*- test-case-name: tests.unit.test_parse -*-
"""
Frozen snapshot values: the only shape in which cluster objects travel past a source.

This package holds the values (L{meta}: what every kind has, shared with the
Gateway API's kinds in L{gateway}); its modules turn API JSON into them:
L{parse} (the public entry points), with L{_fields} (typed field access and the
API server's value checks), L{_kinds} (one parser per kind) and L{_streams}
(StreamIngress and the stream ConfigMaps).

Sources (a manifests directory, the Kubernetes informers) parse API JSON once
with L{ingress.model.parse} into these values; routing and the proxy never see API
dicts.  Every value is immutable so a L{ClusterState} can be handed from an
informer thread to a build thread to the reactor without locks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Union

from ingress.model.meta import Condition as Condition
from ingress.model.meta import ObjectMeta as ObjectMeta
from ingress.model.meta import ObjectRef as ObjectRef
from ingress.model.meta import OwnerReference as OwnerReference

if TYPE_CHECKING:  # (ingress.model.gateway imports only ingress.model.meta)
    from ingress.model.gateway import Gateway, GatewayClass, GRPCRoute, HTTPRoute, L4Route, ReferenceGrant


PATH_EXACT = "Exact"
PATH_PREFIX = "Prefix"
PATH_IMPLEMENTATION_SPECIFIC = "ImplementationSpecific"

CONTROLLER_NAME = "twingress.io/ingress-controller"
DEFAULT_CLASS_NAME = "twingress"
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"


@dataclass(frozen=True, slots=True)
class ServiceBackendPort:
    """A Service port named by number or by name (exactly one is set)."""

    number: Optional[int] = None
    name: Optional[str] = None

    def __str__(self) -> str:
        return str(self.number) if self.number is not None else str(self.name)


@dataclass(frozen=True, slots=True)
class IngressBackend:
    """C{service.name} + C{service.port}; resource backends are not supported (C{service_name} empty)."""

    service_name: str
    port: ServiceBackendPort


@dataclass(frozen=True, slots=True)
class HTTPIngressPath:
    path: str
    path_type: str
    backend: IngressBackend


@dataclass(frozen=True, slots=True)
class IngressRule:
    """C{host} is lower-case without a trailing dot; empty means every host."""

    host: str
    paths: tuple[HTTPIngressPath, ...]


@dataclass(frozen=True, slots=True)
class IngressTLS:
    hosts: tuple[str, ...]
    secret_name: str


@dataclass(frozen=True, slots=True)
class Ingress:
    meta: ObjectMeta
    ingress_class_name: Optional[str]
    default_backend: Optional[IngressBackend]
    rules: tuple[IngressRule, ...]
    tls: tuple[IngressTLS, ...] = ()
    load_balancer: tuple[str, ...] = ()  # status.loadBalancer.ingress: each entry's ip or hostname
    # Made once: a build asks for it about 25 times per Ingress (a 10k build made 270,000 of them, 18% of its time).
    ref: ObjectRef = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", ObjectRef("Ingress", self.meta.namespace, self.meta.name))


@dataclass(frozen=True, slots=True)
class IngressClass:
    meta: ObjectMeta
    controller: str

    @property
    def is_default(self) -> bool:
        return self.meta.annotations.get(DEFAULT_CLASS_ANNOTATION, "") == "true"


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    port: int
    target_port: Union[int, str, None]
    protocol: str = "TCP"
    app_protocol: str = ""  # e.g. kubernetes.io/h2c: what the endpoints speak (Gateway API backends read it)


@dataclass(frozen=True, slots=True)
class Service:
    meta: ObjectMeta
    type: str
    ports: tuple[ServicePort, ...]
    external_name: str = ""
    cluster_ip: str = ""  # "" when headless or not assigned (service-upstream needs it)
    external_ips: tuple[str, ...] = ()  # spec.externalIPs: --publish-service publishes them
    load_balancer: tuple[str, ...] = ()  # status.loadBalancer.ingress, each entry's ip or hostname: --publish-service

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("Service", self.meta.namespace, self.meta.name)


@dataclass(frozen=True, slots=True)
class EndpointPort:
    name: str
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint of a slice; C{ready} is true when the condition is true or absent (API rule)."""

    addresses: tuple[str, ...]
    ready: bool = True


@dataclass(frozen=True, slots=True)
class EndpointSlice:
    meta: ObjectMeta
    service_name: str
    address_type: str
    ports: tuple[EndpointPort, ...]
    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True, slots=True)
class TLSSecret:
    """A C{kubernetes.io/tls} Secret: PEM bytes as stored, validated later by the TLS layer."""

    meta: ObjectMeta
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes = b""  # optional ca.crt: the CAs an Ingress trusts for a backend (proxy-ssl-secret)


@dataclass(frozen=True, slots=True)
class OpaqueSecret:
    """
    An C{Opaque} Secret's data, for the Ingresses that name one (basic auth: C{auth-secret}).

    The values stay bytes as stored; only the builder reads the keys an annotation names.
    """

    meta: ObjectMeta
    data: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class Pod:
    """What the status controller needs of one of our own pods: where it runs and whether it serves."""

    meta: ObjectMeta
    node_name: str
    host_ip: str
    ready: bool


@dataclass(frozen=True, slots=True)
class Node:
    """A node's addresses as (type, address) pairs, in the API's order (ExternalIP, InternalIP, Hostname...)."""

    meta: ObjectMeta
    addresses: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Namespace:
    """A namespace, for its labels: what a Gateway listener's allowedRoutes selector reads."""

    meta: ObjectMeta


@dataclass(frozen=True, slots=True)
class SnapshotChanges:
    """
    What one snapshot changed from the one its source made before it (C{base}), when the source
    follows its objects write by write (the informers do): for each field written, the keys
    written with their values now (None: gone from that field).  The incremental build uses it
    instead of comparing every object of both snapshots, which it does when these are missing or
    are not from the snapshot it built last.
    """

    serial: int  # this snapshot's number, from its source
    base: int
    written: Optional[Mapping[str, Mapping[tuple[str, str], object]]]  # None: not known (an informer listed again)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """
    Everything the routing build needs, in one immutable snapshot.

    Maps are keyed by (namespace, name).  C{problems} carries what the source
    could not parse, so that it reaches /debug/routes and metrics together with
    what routing itself rejects.
    """

    ingresses: tuple[Ingress, ...] = ()
    ingress_classes: tuple[IngressClass, ...] = ()
    services: Mapping[tuple[str, str], Service] = field(default_factory=dict)
    endpoint_slices: tuple[EndpointSlice, ...] = ()
    secrets: Mapping[tuple[str, str], TLSSecret] = field(default_factory=dict)
    opaque_secrets: Mapping[tuple[str, str], OpaqueSecret] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()
    stream_ingresses: tuple[StreamIngress, ...] = ()
    config_maps: Mapping[tuple[str, str], ConfigMap] = field(default_factory=dict)
    # Gateway API (ingress.model.gateway): empty where its CRDs are not installed.
    gateway_classes: tuple[GatewayClass, ...] = ()
    gateways: tuple[Gateway, ...] = ()
    http_routes: tuple[HTTPRoute, ...] = ()
    grpc_routes: tuple[GRPCRoute, ...] = ()
    l4_routes: tuple[L4Route, ...] = ()  # TLSRoute, TCPRoute, UDPRoute
    reference_grants: tuple[ReferenceGrant, ...] = ()
    namespaces: Mapping[tuple[str, str], Namespace] = field(default_factory=dict)  # keyed ("", name)
    changes: Optional[SnapshotChanges] = field(default=None, compare=False, repr=False)  # from the source's previous snapshot


@dataclass(frozen=True, slots=True)
class Problem:
    """
    Why an object (or part of one) is not served as written: logged, counted, and shown in status
    where it can be.  C{left_out}: nothing of the object is served (a new object or file that does
    not parse); otherwise the message says which part is not, and the rest of the object applies.
    """

    ref: ObjectRef
    reason: str
    message: str
    left_out: bool = False

    def __str__(self) -> str:
        return f"{self.ref}: {self.reason}: {self.message}"


@dataclass(frozen=True, slots=True)
class StreamIngress:
    """
    A twingress.io/v1alpha1 StreamIngress: one TCP or UDP port, to a Service or an external host.

    Exactly one of C{service} (with C{service_namespace}, already defaulted to
    the object's own) and C{external_host} is set; an external upstream's port
    is always a number.  C{idle_timeout} is None for the listener's default.
    Entries of the ingress-nginx tcp/udp-services ConfigMaps are parsed into
    this shape too, with the ConfigMap's metadata.
    """

    meta: ObjectMeta
    protocol: str
    listen: int
    port: ServiceBackendPort
    service: str = ""
    service_namespace: str = ""
    external_host: str = ""
    proxy_protocol: Optional[str] = None
    idle_timeout: Optional[float] = None
    status_conditions: tuple[Condition, ...] = field(default=(), compare=False)  # written by the leader

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("StreamIngress", self.meta.namespace, self.meta.name)


@dataclass(frozen=True, slots=True)
class ConfigMap:
    """
    A ConfigMap's string data, kept for the ingress-nginx tcp/udp-services maps.

    Only the two maps named on the command line are ever read as stream
    entries, so parsing records what is wrong (C{invalid}: messages) instead of
    failing: an unrelated ConfigMap in a manifests directory is not a problem.
    """

    meta: ObjectMeta
    data: tuple[tuple[str, str], ...] = ()
    invalid: tuple[str, ...] = ()
