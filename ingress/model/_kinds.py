# -*- test-case-name: tests.unit.test_parse -*-
"""
One parser per API kind we handle: an object's spec (and metadata) to its L{ingress.model} value.

Each public C{parse_*} function takes the object and its already parsed
L{ObjectMeta}, and is what a L{ingress.model.parse.Kind} entry points at; the
dispatch by apiVersion/kind, and the snapshot the values make, stay in
L{ingress.model.parse}, which re-exports everything public here (import it from
there).  Kept apart from the field helpers (L{ingress.model._fields}) so that this
module reads as the shape of each kind and the rules the API server and
routing put on it.  Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ingress.model import (
    PATH_EXACT,
    PATH_IMPLEMENTATION_SPECIFIC,
    PATH_PREFIX,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    HTTPIngressPath,
    Ingress,
    IngressBackend,
    IngressClass,
    IngressRule,
    IngressTLS,
    Node,
    ObjectMeta,
    OpaqueSecret,
    Pod,
    Service,
    ServiceBackendPort,
    ServicePort,
    TLSSecret,
)
from ingress.model._fields import (
    _DNS_1035_LABEL,
    _DNS_1123_LABEL,
    _IANA_SVC_NAME,
    ParseError,
    _check_dns_subdomain,
    _int,
    _invalid,
    _list,
    _mapping,
    _parse_address,
    _parse_path,
    _port_number,
    _required,
    _str,
    parse_host,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TLS_SECRET_TYPE = "kubernetes.io/tls"
OPAQUE_SECRET_TYPE = "Opaque"
PATH_TYPES = frozenset({PATH_EXACT, PATH_PREFIX, PATH_IMPLEMENTATION_SPECIFIC})
SERVICE_TYPES = frozenset({"ClusterIP", "NodePort", "LoadBalancer", "ExternalName"})
PROTOCOLS = frozenset({"TCP", "UDP", "SCTP"})
ADDRESS_TYPES = frozenset({"IPv4", "IPv6", "FQDN"})


# -- networking.k8s.io/v1


def _parse_backend(value: Any, path: str) -> IngressBackend:
    """
    A service backend; a resource backend parses (the API accepts it) with an empty service name.

    Routing reports resource backends as unsupported instead of dropping the whole Ingress.
    """
    backend = _mapping(value, path)
    service, resource = backend.get("service"), backend.get("resource")
    if service is not None and resource is not None:
        raise _invalid(path, "", "cannot set both resource and service backends")
    if resource is not None:
        resource = _mapping(resource, f"{path}.resource")
        if not _str(resource.get("kind"), f"{path}.resource.kind"):
            raise _required(f"{path}.resource.kind")
        if not _str(resource.get("name"), f"{path}.resource.name"):
            raise _required(f"{path}.resource.name")
        return IngressBackend("", ServiceBackendPort(name=""))
    if service is None:
        raise _invalid(path, "", "resource or service backend is required")
    service = _mapping(service, f"{path}.service")
    name = _str(service.get("name"), f"{path}.service.name")
    if not name:
        raise _required(f"{path}.service.name")
    if len(name) > 63 or not _DNS_1035_LABEL.fullmatch(name):
        raise _invalid(f"{path}.service.name", name, "must be an RFC 1035 label")
    return IngressBackend(name, _parse_backend_port(service.get("port"), f"{path}.service.port"))


def _parse_backend_port(value: Any, path: str) -> ServiceBackendPort:
    port = _mapping(value, path)
    number = _int(port.get("number"), f"{path}.number") or 0
    name = _str(port.get("name"), f"{path}.name")
    if number and name:
        raise _invalid(path, "", "cannot set both port name & port number")
    if name:
        if not _IANA_SVC_NAME.fullmatch(name):
            raise _invalid(f"{path}.name", name, "must be an IANA_SVC_NAME (at most 15 characters: a-z, 0-9, -)")
        return ServiceBackendPort(name=name)
    if number:
        return ServiceBackendPort(number=_port_number(number, f"{path}.number"))
    raise _required(path, "port name or number is required")


def _parse_http_path(value: Any, path: str) -> HTTPIngressPath:
    item = _mapping(value, path)
    path_type = _str(item.get("pathType"), f"{path}.pathType")
    if not path_type:
        raise _required(f"{path}.pathType", "pathType must be specified")
    if path_type not in PATH_TYPES:
        raise _invalid(f"{path}.pathType", path_type, f"supported values: {sorted(PATH_TYPES)}")
    return HTTPIngressPath(
        path=_parse_path(item.get("path"), path_type, f"{path}.path"),
        path_type=path_type,
        backend=_parse_backend(item.get("backend"), f"{path}.backend"),
    )


def _parse_rule(value: Any, path: str) -> IngressRule:
    rule = _mapping(value, path)
    host = parse_host(rule.get("host"), f"{path}.host")
    if rule.get("http") is None:
        return IngressRule(host, ())
    paths = _list(_mapping(rule["http"], f"{path}.http").get("paths"), f"{path}.http.paths")
    if not paths:
        raise _required(f"{path}.http.paths")
    return IngressRule(host, tuple(_parse_http_path(p, f"{path}.http.paths[{i}]") for i, p in enumerate(paths)))


def _parse_tls(value: Any, path: str) -> IngressTLS:
    tls = _mapping(value, path)
    hosts = _list(tls.get("hosts"), f"{path}.hosts")
    return IngressTLS(
        hosts=tuple(parse_host(h, f"{path}.hosts[{i}]", allow_ip=True) for i, h in enumerate(hosts)),
        secret_name=_str(tls.get("secretName"), f"{path}.secretName"),
    )


def parse_ingress(obj: Mapping[str, Any], meta: ObjectMeta) -> Ingress:
    """A networking.k8s.io/v1 Ingress; it needs rules or a default backend, as the API requires."""
    spec = _mapping(obj.get("spec"), "spec")
    default = spec.get("defaultBackend")
    default_backend = None if default is None else _parse_backend(default, "spec.defaultBackend")
    rules = tuple(_parse_rule(r, f"spec.rules[{i}]") for i, r in enumerate(_list(spec.get("rules"), "spec.rules")))
    if not rules and default_backend is None:
        raise _required("spec", "either defaultBackend or rules must be specified")
    tls = tuple(_parse_tls(t, f"spec.tls[{i}]") for i, t in enumerate(_list(spec.get("tls"), "spec.tls")))
    class_name = _str(spec.get("ingressClassName"), "spec.ingressClassName") or None
    return Ingress(meta, class_name, default_backend, rules, tls, _load_balancer(obj.get("status")))


def _load_balancer(status: Any) -> tuple[str, ...]:
    """C{status.loadBalancer.ingress} as its ip or hostname strings; the status controller compares these."""
    balancer = _mapping(_mapping(status, "status").get("loadBalancer"), "status.loadBalancer")
    entries = _list(balancer.get("ingress"), "status.loadBalancer.ingress")
    addresses = []
    for i, entry in enumerate(entries):
        item = _mapping(entry, f"status.loadBalancer.ingress[{i}]")
        address = _str(item.get("ip"), f"status.loadBalancer.ingress[{i}].ip") or _str(
            item.get("hostname"), f"status.loadBalancer.ingress[{i}].hostname"
        )
        if address:
            addresses.append(address)
    return tuple(addresses)


def parse_ingress_class(obj: Mapping[str, Any], meta: ObjectMeta) -> IngressClass:
    """An IngressClass: its controller decides whether its Ingresses are ours."""
    controller = _str(_mapping(obj.get("spec"), "spec").get("controller"), "spec.controller")
    if not controller:
        raise _required("spec.controller")
    return IngressClass(meta, controller)


# -- v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Secret


def _parse_service_port(value: Any, path: str) -> ServicePort:
    item = _mapping(value, path)
    name = _str(item.get("name"), f"{path}.name")
    if name and (len(name) > 63 or not _DNS_1123_LABEL.fullmatch(name)):
        raise _invalid(f"{path}.name", name, "must be an RFC 1123 label")
    port = _port_number(item.get("port"), f"{path}.port")
    protocol = _protocol(item.get("protocol"), f"{path}.protocol")
    app_protocol = _str(item.get("appProtocol"), f"{path}.appProtocol")
    return ServicePort(name, port, _target_port(item.get("targetPort", port), f"{path}.targetPort"), protocol, app_protocol)


def _target_port(value: Any, path: str) -> int | str:
    """A number or a container port name; the API server defaults it to the port, and so do we."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _port_number(value, path)
    name = _str(value, path)
    if not name:
        raise _required(path)
    return name


def _protocol(value: Any, path: str) -> str:
    protocol = _str(value, path, "TCP")
    if protocol not in PROTOCOLS:
        raise _invalid(path, protocol, f"supported values: {sorted(PROTOCOLS)}")
    return protocol


def _check_port_names(ports: Sequence[ServicePort]) -> None:
    """Backends find ports by name, so names must be unique, and set when there is more than one port."""
    names = [p.name for p in ports]
    if len(ports) > 1 and not all(names):
        raise _required("spec.ports.name", "a name is required when there is more than one port")
    if len(set(names)) != len(names):
        raise ParseError("Duplicate", f"spec.ports.name: Duplicate value in {names!r}")


def parse_service(obj: Mapping[str, Any], meta: ObjectMeta) -> Service:
    """A v1 Service: its ports map backend port names and numbers; ExternalName needs its target."""
    spec = _mapping(obj.get("spec"), "spec")
    service_type = _str(spec.get("type"), "spec.type", "ClusterIP")
    if service_type not in SERVICE_TYPES:
        raise _invalid("spec.type", service_type, f"supported values: {sorted(SERVICE_TYPES)}")
    items = _list(spec.get("ports"), "spec.ports")
    ports = tuple(_parse_service_port(p, f"spec.ports[{i}]") for i, p in enumerate(items))
    _check_port_names(ports)
    external_name = _str(spec.get("externalName"), "spec.externalName").rstrip(".").lower()
    if service_type == "ExternalName":
        if not external_name:
            raise _required("spec.externalName")
        _check_dns_subdomain(external_name, "spec.externalName")
    cluster_ip = _str(spec.get("clusterIP"), "spec.clusterIP")
    if cluster_ip and cluster_ip != "None":
        try:
            ipaddress.ip_address(cluster_ip)
        except ValueError:
            raise _invalid("spec.clusterIP", cluster_ip, "must be an IP address or None") from None
    else:
        cluster_ip = ""  # headless, or not assigned yet
    external_ips = tuple(
        _str(ip, f"spec.externalIPs[{i}]") for i, ip in enumerate(_list(spec.get("externalIPs"), "spec.externalIPs"))
    )
    return Service(
        meta, service_type, ports, external_name if service_type == "ExternalName" else "", cluster_ip,
        tuple(ip for ip in external_ips if ip), _load_balancer(obj.get("status")),
    )


def _parse_endpoint_port(value: Any, path: str) -> Optional[EndpointPort]:
    """A slice port; one without a number means "all ports", which we cannot route to: skipped."""
    item = _mapping(value, path)
    if item.get("port") is None:
        return None
    return EndpointPort(
        name=_str(item.get("name"), f"{path}.name"),
        port=_port_number(item.get("port"), f"{path}.port"),
        protocol=_protocol(item.get("protocol"), f"{path}.protocol"),
    )


def _parse_endpoint(value: Any, address_type: str, path: str) -> Endpoint:
    item = _mapping(value, path)
    items = _list(item.get("addresses"), f"{path}.addresses")
    if not items:
        raise _required(f"{path}.addresses")
    addresses = tuple(_parse_address(a, address_type, f"{path}.addresses[{i}]") for i, a in enumerate(items))
    ready = _mapping(item.get("conditions"), f"{path}.conditions").get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise _invalid(f"{path}.conditions.ready", ready, "must be a boolean")
    return Endpoint(addresses, ready is not False)  # absent or null means ready (API rule)


def parse_endpoint_slice(obj: Mapping[str, Any], meta: ObjectMeta) -> EndpointSlice:
    """An EndpointSlice: ready addresses are what the proxy connects to (not the ClusterIP)."""
    address_type = _str(obj.get("addressType"), "addressType")
    if address_type not in ADDRESS_TYPES:
        raise _invalid("addressType", address_type, f"supported values: {sorted(ADDRESS_TYPES)}")
    ports = (_parse_endpoint_port(p, f"ports[{i}]") for i, p in enumerate(_list(obj.get("ports"), "ports")))
    items = _list(obj.get("endpoints"), "endpoints")
    return EndpointSlice(
        meta=meta,
        service_name=meta.labels.get(SERVICE_NAME_LABEL, ""),
        address_type=address_type,
        ports=tuple(p for p in ports if p is not None),
        endpoints=tuple(_parse_endpoint(e, address_type, f"endpoints[{i}]") for i, e in enumerate(items)),
    )


def _secret_value(obj: Mapping[str, Any], key: str, required: bool = True) -> bytes:
    """stringData wins over data, as on the API server; data is base64 (line breaks allowed)."""
    string_data = _mapping(obj.get("stringData"), "stringData")
    if key in string_data:
        return _str(string_data[key], f"stringData[{key}]").encode("utf-8")
    data = _mapping(obj.get("data"), "data")
    if key not in data and not required:
        return b""
    if key not in data:
        raise _required(f"data[{key}]", f"a {TLS_SECRET_TYPE} Secret needs {key!r}")
    text = "".join(_str(data[key], f"data[{key}]").split())
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"data[{key}]", text[:20], "must be base64") from None


def _opaque_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """Every key of an Opaque Secret, decoded (stringData wins over data, as on the API server)."""
    keys = set(_mapping(obj.get("data"), "data")) | set(_mapping(obj.get("stringData"), "stringData"))
    return {str(key): _secret_value(obj, str(key)) for key in sorted(keys)}


def parse_secret(obj: Mapping[str, Any], meta: ObjectMeta) -> Optional[TLSSecret | OpaqueSecret]:
    """A kubernetes.io/tls Secret, or an Opaque one (basic auth); other Secret types are not ours (None)."""
    kind = _str(obj.get("type"), "type", OPAQUE_SECRET_TYPE)
    if kind == OPAQUE_SECRET_TYPE:
        return OpaqueSecret(meta, _opaque_data(obj))
    if kind != TLS_SECRET_TYPE:
        return None
    ca = _secret_value(obj, "ca.crt", required=False)  # cert-manager's Certificates carry their CA here
    return TLSSecret(meta, _secret_value(obj, "tls.crt"), _secret_value(obj, "tls.key"), ca)


# -- v1 Pod and Node: only our own pods and their nodes, for the Ingress status addresses


def parse_pod(obj: Mapping[str, Any], meta: ObjectMeta) -> Pod:
    """Where a pod runs and whether it is Ready (only then does it receive traffic)."""
    spec, status = _mapping(obj.get("spec"), "spec"), _mapping(obj.get("status"), "status")
    conditions = _list(status.get("conditions"), "status.conditions")
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )
    return Pod(meta, _str(spec.get("nodeName"), "spec.nodeName"), _str(status.get("hostIP"), "status.hostIP"), ready)


def parse_node(obj: Mapping[str, Any], meta: ObjectMeta) -> Node:
    status = _mapping(obj.get("status"), "status")
    addresses = []
    for i, entry in enumerate(_list(status.get("addresses"), "status.addresses")):
        item = _mapping(entry, f"status.addresses[{i}]")
        addresses.append((_str(item.get("type"), f"status.addresses[{i}].type"), _str(item.get("address"), f"status.addresses[{i}].address")))
    return Node(meta, tuple(addresses))
