# -*- test-case-name: tests.unit.test_parse -*-
"""
API objects (plain dicts from YAML, JSON or the Kubernetes client) to L{ingress.model} values.

This is the only place that reads API JSON: every source (manifests directory,
informers) calls L{parse_object} or L{state_from_objects}, so routing never
has to guess at missing or mistyped fields.  We validate what the API server
validates and what routing relies on, because manifests from a directory never
went through an API server.  Pure: no I/O, no Twisted.

This module is the public entry: the kinds we handle (L{KINDS}), dispatch and
the snapshot.  The work is in two private modules, re-exported here, so import
everything from C{ingress.model.parse}: L{ingress.model._fields} (typed field access and
the API server's value checks, with L{ParseError}) and L{ingress.model._kinds}
(one parser per kind) and L{ingress.model._streams} (StreamIngress and the
ingress-nginx stream ConfigMaps).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ingress.model import ClusterState, ObjectMeta, ObjectRef, OpaqueSecret, OwnerReference, Problem
from ingress.model._fields import ParseError, _int, _list, _mapping, _required, _str, _string_map, _timestamp, parse_host
from ingress.model._gateway import parse_gateway, parse_gateway_class, parse_grpc_route, parse_http_route, parse_l4_route, parse_namespace, parse_reference_grant
from ingress.model._kinds import (
    ADDRESS_TYPES,
    PATH_TYPES,
    PROTOCOLS,
    SERVICE_NAME_LABEL,
    SERVICE_TYPES,
    TLS_SECRET_TYPE,
    parse_endpoint_slice,
    parse_ingress,
    parse_ingress_class,
    parse_node,
    parse_pod,
    parse_secret,
    parse_service,
)
from ingress.model._streams import (
    PROXY_PROTOCOLS,
    STREAM_PROTOCOLS,
    parse_config_map,
    parse_stream_entry,
    parse_stream_ingress,
)
from ingress.model.gateway import GATEWAY_GROUP

__all__ = [
    "ADDRESS_TYPES",
    "KINDS",
    "PATH_TYPES",
    "PROTOCOLS",
    "PROXY_PROTOCOLS",
    "SERVICE_NAME_LABEL",
    "SERVICE_TYPES",
    "STREAM_PROTOCOLS",
    "TLS_SECRET_TYPE",
    "Kind",
    "ParseError",
    "collect",
    "kind_of",
    "object_ref",
    "parse_endpoint_slice",
    "parse_config_map",
    "parse_host",
    "parse_ingress",
    "parse_ingress_class",
    "parse_meta",
    "parse_node",
    "parse_pod",
    "parse_object",
    "parse_secret",
    "parse_service",
    "parse_stream_entry",
    "parse_stream_ingress",
    "state_from_objects",
]


# -- metadata


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
        owner_references=tuple(
            _owner_reference(o, f"metadata.ownerReferences[{i}]")
            for i, o in enumerate(_list(meta.get("ownerReferences"), "metadata.ownerReferences"))
        ),
    )


def _owner_reference(value: Any, path: str) -> OwnerReference:
    item = _mapping(value, path)
    return OwnerReference(
        api_version=_str(item.get("apiVersion"), f"{path}.apiVersion"),
        kind=_str(item.get("kind"), f"{path}.kind"),
        name=_str(item.get("name"), f"{path}.name"),
        uid=_str(item.get("uid"), f"{path}.uid"),
        controller=item.get("controller") is True,
    )


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
    state_field: Optional[str]  # None: watched for the controllers, not part of a ClusterState
    keyed: bool = False  # a Mapping keyed by (namespace, name) instead of a tuple
    namespaced: bool = True
    fields_by_type: Optional[Mapping[type, str]] = None  # one kind, several fields (Secrets: TLS, Opaque)


KINDS: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k
    for k in (
        Kind("networking.k8s.io/v1", "Ingress", parse_ingress, "ingresses"),
        Kind("networking.k8s.io/v1", "IngressClass", parse_ingress_class, "ingress_classes", namespaced=False),
        Kind("v1", "Service", parse_service, "services", keyed=True),
        Kind("discovery.k8s.io/v1", "EndpointSlice", parse_endpoint_slice, "endpoint_slices"),
        Kind("v1", "Secret", parse_secret, "secrets", keyed=True, fields_by_type={OpaqueSecret: "opaque_secrets"}),
        Kind("v1", "Pod", parse_pod, None),
        Kind("v1", "Node", parse_node, None, namespaced=False),
        Kind("twingress.io/v1alpha1", "StreamIngress", parse_stream_ingress, "stream_ingresses"),
        Kind("v1", "ConfigMap", parse_config_map, "config_maps", keyed=True),  # read only for the stream maps named
        # Gateway API: v1, and v1beta1 which the API server also serves (same fields for what we read).
        *(
            kind
            for version in ("v1", "v1beta1")
            for kind in (
                Kind(f"{GATEWAY_GROUP}/{version}", "GatewayClass", parse_gateway_class, "gateway_classes", namespaced=False),
                Kind(f"{GATEWAY_GROUP}/{version}", "Gateway", parse_gateway, "gateways"),
                Kind(f"{GATEWAY_GROUP}/{version}", "HTTPRoute", parse_http_route, "http_routes"),
                Kind(f"{GATEWAY_GROUP}/{version}", "ReferenceGrant", parse_reference_grant, "reference_grants"),
            )
        ),
        Kind(f"{GATEWAY_GROUP}/v1", "GRPCRoute", parse_grpc_route, "grpc_routes"),
        *(Kind(f"{GATEWAY_GROUP}/{version}", kind, parse_l4_route, "l4_routes")
          for kind in ("TLSRoute", "TCPRoute", "UDPRoute") for version in ("v1", "v1alpha2")),
        Kind("v1", "Namespace", parse_namespace, "namespaces", keyed=True, namespaced=False),
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


ObjectKey = tuple[str, str, str]
"""(kind, namespace, name): what identifies an object across versions."""
LastGood = Mapping[ObjectKey, tuple[Kind, Any]]


def state_from_objects(objects: Iterable[Mapping[str, Any]]) -> ClusterState:
    """
    A snapshot of every object we handle; invalid ones become problems, not exceptions.

    Objects are identified by kind, namespace and name, and a later object
    replaces an earlier one, whether either of them is valid or not: the way an
    informer's store holds only the newest version.
    """
    return collect(parse_objects(objects, {})[0])


def parse_objects(
    objects: Iterable[Mapping[str, Any]], last_good: LastGood
) -> tuple[list[tuple[Kind, Any]], dict[ObjectKey, tuple[Kind, Any]]]:
    """
    The outcomes to L{collect}, and the new last good version of every object.

    An invalid version of an object that was valid before keeps its last good
    version in the outcomes, next to the L{Problem} that says why the new one
    was refused: what the apiserver does with an invalid update, so one bad
    edit of a manifest never takes a working route down.  A new invalid object
    is only a Problem.
    """
    latest: dict[ObjectKey, tuple[Kind, Any]] = {}
    for obj in objects:
        handler = kind_of(obj)
        if handler is None:
            continue
        ref = object_ref(obj)
        try:
            value = parse_object(obj)
        except ParseError as error:
            value = Problem(ref, error.reason, error.message, left_out=True)
        latest[(ref.kind, ref.namespace, ref.name)] = (handler, value)
    outcomes: list[tuple[Kind, Any]] = []
    good: dict[ObjectKey, tuple[Kind, Any]] = {}
    for key, (handler, value) in latest.items():
        if not isinstance(value, Problem):
            good[key] = (handler, value)
        elif key in last_good:
            good[key] = last_good[key]
            outcomes.append(last_good[key])
            value = dataclasses.replace(value, message=f"{value.message}; its last good version stays in use", left_out=False)
        outcomes.append((handler, value))
    return outcomes, good


def merged_state(parts: Iterable[ClusterState]) -> ClusterState:
    """
    One snapshot from the snapshots of parts of the cluster (an informer's each): a field only one
    part fills is that part's value itself, not a copy; mappings are joined, tuples concatenated,
    problems put in the order L{collect} gives them.
    """
    parts = list(parts)
    values: dict[str, Any] = {}
    for found in dataclasses.fields(ClusterState):
        if found.name in ("problems", "changes"):
            continue
        filled = [value for part in parts if (value := getattr(part, found.name))]
        if len(filled) == 1:
            values[found.name] = filled[0]
        elif filled:
            values[found.name] = {k: v for value in filled for k, v in value.items()} if isinstance(filled[0], Mapping) else tuple(x for value in filled for x in value)
    problems = [problem for part in parts for problem in part.problems]
    problems.sort(key=lambda p: (p.ref, p.reason, p.message))
    return ClusterState(**values, problems=tuple(problems))


def collect(outcomes: Iterable[tuple[Kind, Any]]) -> ClusterState:
    """A L{ClusterState} from parsed values (and Problems), each with the L{Kind} it was parsed as."""
    fields: dict[str, Any] = {}
    problems: list[Problem] = []
    for handler, value in outcomes:
        if isinstance(value, Problem):
            problems.append(value)
        elif value is None or handler.state_field is None:
            continue
        elif handler.keyed:
            state_field = handler.fields_by_type.get(type(value), handler.state_field) if handler.fields_by_type else handler.state_field
            fields.setdefault(state_field, {})[(value.meta.namespace, value.meta.name)] = value
        else:
            fields.setdefault(handler.state_field, []).append(value)
    # Each Kind fills its own ClusterState field: the value types differ by key, checked by the dataclass fields.
    values: dict[str, Any] = {k: (v if isinstance(v, dict) else tuple(v)) for k, v in fields.items()}
    problems.sort(key=lambda p: (p.ref, p.reason, p.message))
    return ClusterState(**values, problems=tuple(problems))
