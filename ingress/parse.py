# -*- test-case-name: tests.unit.test_parse -*-
"""
API objects (plain dicts from YAML, JSON or the Kubernetes client) to L{ingress.model} values.

This is the only place that reads API JSON: every source (manifests directory,
informers) calls L{parse_object} or L{state_from_objects}, so routing never
has to guess at missing or mistyped fields.  We validate what the API server
validates and what routing relies on, because manifests from a directory never
went through an API server.  Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from ingress.model import (
    PATH_EXACT,
    PATH_IMPLEMENTATION_SPECIFIC,
    PATH_PREFIX,
    ClusterState,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    HTTPIngressPath,
    Ingress,
    IngressBackend,
    IngressClass,
    IngressRule,
    IngressTLS,
    ObjectMeta,
    ObjectRef,
    Problem,
    Service,
    ServiceBackendPort,
    ServicePort,
    TLSSecret,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TLS_SECRET_TYPE = "kubernetes.io/tls"
PATH_TYPES = frozenset({PATH_EXACT, PATH_PREFIX, PATH_IMPLEMENTATION_SPECIFIC})
SERVICE_TYPES = frozenset({"ClusterIP", "NodePort", "LoadBalancer", "ExternalName"})
PROTOCOLS = frozenset({"TCP", "UDP", "SCTP"})
ADDRESS_TYPES = frozenset({"IPv4", "IPv6", "FQDN"})

# The API server's checks (k8s.io/apimachinery util/validation, networking validation).
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_1123_LABEL = re.compile(_DNS_LABEL)
_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_IANA_SVC_NAME = re.compile(r"(?=.{1,15}$)(?=.*[a-z])(?!-)(?!.*--)[-a-z0-9]+(?<!-)")
_SLOPPY_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
_INVALID_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_INVALID_PATH_SUFFIXES = ("/..", "/.")


class ParseError(ValueError):
    """
    An object the API server would reject, or that routing cannot use.

    C{reason} is a short CamelCase word ("Invalid", "Required") for metrics and
    conditions; C{message} names the field, like the API server's own errors.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def _invalid(path: str, value: Any, why: str) -> ParseError:
    return ParseError("Invalid", f"{path}: Invalid value: {value!r}: {why}")


def _required(path: str, why: str = "Required value") -> ParseError:
    return ParseError("Required", f"{path}: {why}")


# -- typed field access: every wrong type becomes a ParseError, never a TypeError


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid(path, value, "must be an object")
    return value


def _list(value: Any, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise _invalid(path, value, "must be a list")
    return value


def _str(value: Any, path: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise _invalid(path, value, "must be a string")
    return value


def _int(value: Any, path: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(path, value, "must be an integer")
    return value


def _port_number(value: Any, path: str) -> int:
    number = _int(value, path)
    if number is None:
        raise _required(path)
    if not 1 <= number <= 65535:
        raise _invalid(path, number, "must be between 1 and 65535, inclusive")
    return number


def _string_map(value: Any, path: str) -> dict[str, str]:
    """Labels and annotations: the API only stores strings (YAML `true` unquoted is an error)."""
    return {_str(k, path): _str(v, f"{path}[{k}]") for k, v in _mapping(value, path).items()}


# -- names, hosts and paths


def _check_dns_subdomain(value: str, path: str) -> None:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise _invalid(path, value, "must be a lower-case RFC 1123 subdomain")


def _is_ip(host: str) -> bool:
    """Like the API server's sloppy IP parse: leading zeros still make an IPv4 address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return _SLOPPY_IPV4.fullmatch(host) is not None
    return True


def parse_host(value: Any, path: str, *, allow_ip: bool = False) -> str:
    """
    Lower-case, trailing dot stripped, then validated: the key form routing and SNI use.

    A wildcard is allowed only as one whole leading label ("*.example.com").
    """
    host = _str(value, path).rstrip(".").lower()
    if not host:
        return ""
    if not allow_ip and _is_ip(host):
        raise _invalid(path, host, "must be a DNS name, not an IP address")
    name = host[2:] if host.startswith("*.") else host
    if "*" in name:
        raise _invalid(path, host, "a wildcard must be the whole first label ('*.example.com')")
    _check_dns_subdomain(name, path)
    return host


def _parse_path(value: Any, path_type: str, path: str) -> str:
    """Exact and Prefix paths must be absolute and clean; ImplementationSpecific may be empty."""
    text = _str(value, path)
    if (text or path_type != PATH_IMPLEMENTATION_SPECIFIC) and not text.startswith("/"):
        raise _invalid(path, text, "must be an absolute path")
    if path_type == PATH_IMPLEMENTATION_SPECIFIC:
        return text
    for sequence in _INVALID_PATH_SEQUENCES:
        if sequence in text:
            raise _invalid(path, text, f"must not contain {sequence!r}")
    for suffix in _INVALID_PATH_SUFFIXES:
        if text.endswith(suffix):
            raise _invalid(path, text, f"cannot end with {suffix!r}")
    return text


# -- metadata


def _timestamp(value: Any, path: str) -> str:
    """RFC 3339 text; YAML loaders turn unquoted timestamps into datetimes, so accept those too."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return _str(value, path)


def parse_meta(obj: Mapping[str, Any], *, namespaced: bool = True) -> ObjectMeta:
    """The metadata we use; a namespaced object without a namespace is in "default", as kubectl does."""
    meta = _mapping(obj.get("metadata"), "metadata")
    name = _str(meta.get("name"), "metadata.name")
    if not name:
        raise _required("metadata.name")
    namespace = (_str(meta.get("namespace"), "metadata.namespace") or "default") if namespaced else ""
    return ObjectMeta(
        namespace=namespace,
        name=name,
        uid=_str(meta.get("uid"), "metadata.uid"),
        resource_version=_str(meta.get("resourceVersion"), "metadata.resourceVersion"),
        generation=_int(meta.get("generation"), "metadata.generation") or 0,
        creation_timestamp=_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        labels=_string_map(meta.get("labels"), "metadata.labels"),
        annotations=_string_map(meta.get("annotations"), "metadata.annotations"),
    )


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
    return Ingress(meta, class_name, default_backend, rules, tls)


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
    return ServicePort(name, port, _target_port(item.get("targetPort", port), f"{path}.targetPort"), protocol)


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
    return Service(meta, service_type, ports, external_name if service_type == "ExternalName" else "")


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


def _parse_address(value: Any, address_type: str, path: str) -> str:
    """IPs are checked and written canonically, so that the same endpoint deduplicates across slices."""
    text = _str(value, path)
    if address_type == "FQDN":
        return text
    try:
        address = ipaddress.IPv4Address(text) if address_type == "IPv4" else ipaddress.IPv6Address(text)
    except ValueError:
        raise _invalid(path, text, f"must be a valid {address_type} address") from None
    return str(address)


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


def _secret_value(obj: Mapping[str, Any], key: str) -> bytes:
    """stringData wins over data, as on the API server; data is base64 (line breaks allowed)."""
    string_data = _mapping(obj.get("stringData"), "stringData")
    if key in string_data:
        return _str(string_data[key], f"stringData[{key}]").encode("utf-8")
    data = _mapping(obj.get("data"), "data")
    if key not in data:
        raise _required(f"data[{key}]", f"a {TLS_SECRET_TYPE} Secret needs {key!r}")
    text = "".join(_str(data[key], f"data[{key}]").split())
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"data[{key}]", text[:20], "must be base64") from None


def parse_secret(obj: Mapping[str, Any], meta: ObjectMeta) -> Optional[TLSSecret]:
    """A kubernetes.io/tls Secret; other Secret types are not ours (None)."""
    if _str(obj.get("type"), "type", "Opaque") != TLS_SECRET_TYPE:
        return None
    return TLSSecret(meta, _secret_value(obj, "tls.crt"), _secret_value(obj, "tls.key"))


# -- the kinds we handle, and the snapshot they make


@dataclass(frozen=True, slots=True)
class Kind:
    """
    How one apiVersion/kind is parsed and where its values go in a L{ClusterState}.

    Add an entry to L{KINDS} (StreamIngress, the TCP/UDP ConfigMaps) to teach
    L{parse_object} and L{state_from_objects} a new kind.
    """

    api_version: str
    kind: str
    parse: Callable[[Mapping[str, Any], ObjectMeta], Any]
    state_field: str
    keyed: bool = False  # a Mapping keyed by (namespace, name) instead of a tuple
    namespaced: bool = True


KINDS: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k
    for k in (
        Kind("networking.k8s.io/v1", "Ingress", parse_ingress, "ingresses"),
        Kind("networking.k8s.io/v1", "IngressClass", parse_ingress_class, "ingress_classes", namespaced=False),
        Kind("v1", "Service", parse_service, "services", keyed=True),
        Kind("discovery.k8s.io/v1", "EndpointSlice", parse_endpoint_slice, "endpoint_slices"),
        Kind("v1", "Secret", parse_secret, "secrets", keyed=True),
    )
}
"""Every (apiVersion, kind) we parse; objects of any other kind are ignored."""


def kind_of(obj: Mapping[str, Any]) -> Optional[Kind]:
    """The L{Kind} that handles C{obj}, or None when we ignore it."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return KINDS.get((api_version, kind))


def object_ref(obj: Mapping[str, Any]) -> ObjectRef:
    """Best-effort name of an object, even a malformed one: what a L{Problem} about it points at."""
    handler = kind_of(obj)
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    namespaced = handler is None or handler.namespaced
    return ObjectRef(
        kind=str(obj.get("kind", "")),
        namespace=(namespace if isinstance(namespace, str) and namespace else "default") if namespaced else "",
        name=name if isinstance(name, str) else "",
    )


def parse_object(obj: Mapping[str, Any]) -> Any:
    """
    The model value for one API object; None for kinds (or Secret types) we ignore.

    @raise ParseError: the object is invalid; make it a L{Problem} with L{object_ref}.
    """
    handler = kind_of(obj)
    if handler is None:
        return None
    return handler.parse(obj, parse_meta(obj, namespaced=handler.namespaced))


def state_from_objects(objects: Iterable[Mapping[str, Any]]) -> ClusterState:
    """
    A snapshot of every object we handle; invalid ones become problems, not exceptions.

    Objects are identified by kind, namespace and name, and a later object
    replaces an earlier one, whether either of them is valid or not: the way an
    informer's store holds only the newest version.
    """
    latest: dict[tuple[str, str, str], tuple[Kind, Any]] = {}
    for obj in objects:
        handler = kind_of(obj)
        if handler is None:
            continue
        ref = object_ref(obj)
        try:
            value = parse_object(obj)
        except ParseError as error:
            value = Problem(ref, error.reason, error.message)
        latest[(ref.kind, ref.namespace, ref.name)] = (handler, value)
    return collect(latest.values())


def collect(outcomes: Iterable[tuple[Kind, Any]]) -> ClusterState:
    """A L{ClusterState} from parsed values (and Problems), each with the L{Kind} it was parsed as."""
    fields: dict[str, Any] = {}
    problems: list[Problem] = []
    for handler, value in outcomes:
        if isinstance(value, Problem):
            problems.append(value)
        elif value is None:
            continue
        elif handler.keyed:
            fields.setdefault(handler.state_field, {})[(value.meta.namespace, value.meta.name)] = value
        else:
            fields.setdefault(handler.state_field, []).append(value)
    values = {k: (v if isinstance(v, dict) else tuple(v)) for k, v in fields.items()}
    problems.sort(key=lambda p: (p.ref, p.reason, p.message))
    return ClusterState(**values, problems=tuple(problems))
