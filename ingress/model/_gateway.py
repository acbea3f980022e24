# -*- test-case-name: tests.unit.test_gateway_parse -*-
"""
Gateway API JSON (gateway.networking.k8s.io/v1) to L{ingress.model.gateway} values.

The CRDs' defaults are applied here (a rule without matches matches PathPrefix
"/", a backendRef's weight is 1, a parentRef's namespace is the route's own),
so that objects from a manifests directory, which no API server defaulted,
mean what they would mean in a cluster.  The CRDs' CEL validation is the API
server's business: here only what routing relies on is checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ingress.model import Condition, Namespace, ObjectMeta
from ingress.model._fields import ParseError, _int, _invalid, _list, _mapping, _port_number, _required, _str, parse_host
from ingress.model._gateway_rules import backend_ref, duration, route_filter, route_match, rule_retry, value_match
from ingress.model.gateway import (
    FROM_SAME,
    GATEWAY_GROUP,
    VALUE_MATCH_EXACT,
    VALUE_MATCH_REGEX,
    Gateway,
    GatewayClass,
    GRPCMethodMatch,
    GRPCRoute,
    GRPCRouteMatch,
    GRPCRouteRule,
    HTTPRoute,
    L4Route,
    LabelSelector,
    Listener,
    ListenerSeen,
    ParentRef,
    ReferenceGrant,
    RouteKind,
    RouteMatch,
    RouteRule,
    SecretRef,
)


def parse_namespace(obj: Mapping[str, Any], meta: ObjectMeta) -> Namespace:
    """A Namespace: only its labels are read (allowedRoutes selectors)."""
    return Namespace(meta)


def parse_gateway_class(obj: Mapping[str, Any], meta: ObjectMeta) -> GatewayClass:
    """A GatewayClass: its controllerName decides whether its Gateways are ours."""
    controller = _str(_mapping(obj.get("spec"), "spec").get("controllerName"), "spec.controllerName")
    if not controller:
        raise _required("spec.controllerName")
    return GatewayClass(meta, controller, _conditions(obj))


def parse_gateway(obj: Mapping[str, Any], meta: ObjectMeta) -> Gateway:
    """A Gateway: its class and listeners."""
    spec = _mapping(obj.get("spec"), "spec")
    class_name = _str(spec.get("gatewayClassName"), "spec.gatewayClassName")
    if not class_name:
        raise _required("spec.gatewayClassName")
    listeners = tuple(_listener(item, f"spec.listeners[{i}]", meta.namespace) for i, item in enumerate(_list(spec.get("listeners"), "spec.listeners")))
    if not listeners:
        raise _required("spec.listeners")
    status = _mapping(obj.get("status"), "status")
    seen = tuple(
        ListenerSeen(
            name=_str(item.get("name"), "status.listeners.name"),
            supported_kinds=tuple(_str(_mapping(k, "status.listeners.supportedKinds").get("kind"), "status.listeners.supportedKinds.kind")
                                  for k in _list(item.get("supportedKinds"), "status.listeners.supportedKinds")),
            attached_routes=_int(item.get("attachedRoutes"), "status.listeners.attachedRoutes") or 0,
            conditions=tuple(_condition(c) for c in _list(item.get("conditions"), "status.listeners.conditions")),
        )
        for item in (_mapping(i, "status.listeners") for i in _list(status.get("listeners"), "status.listeners"))
    )
    addresses = tuple(_str(_mapping(a, "status.addresses").get("value"), "status.addresses.value") for a in _list(status.get("addresses"), "status.addresses"))
    requested = tuple(
        _str(entry.get("value"), "spec.addresses.value")
        for entry in (_mapping(a, "spec.addresses") for a in _list(spec.get("addresses"), "spec.addresses"))
        if _str(entry.get("type"), "spec.addresses.type", "IPAddress") == "IPAddress"
    )
    return Gateway(meta, class_name, listeners, _conditions(obj), seen, addresses, requested)


def _listener(value: Any, path: str, namespace: str) -> Listener:
    item = _mapping(value, path)
    name = _str(item.get("name"), f"{path}.name")
    if not name:
        raise _required(f"{path}.name")
    protocol = _str(item.get("protocol"), f"{path}.protocol")
    if not protocol:
        raise _required(f"{path}.protocol")
    tls = _mapping(item.get("tls"), f"{path}.tls")
    refs = tuple(_secret_ref(ref, f"{path}.tls.certificateRefs[{i}]", namespace) for i, ref in enumerate(_list(tls.get("certificateRefs"), f"{path}.tls.certificateRefs")))
    allowed = _mapping(item.get("allowedRoutes"), f"{path}.allowedRoutes")
    namespaces = _mapping(allowed.get("namespaces"), f"{path}.allowedRoutes.namespaces")
    selector = namespaces.get("selector")
    kinds = tuple(
        RouteKind(_str(k.get("group"), f"{path}.allowedRoutes.kinds.group", GATEWAY_GROUP), _str(k.get("kind"), f"{path}.allowedRoutes.kinds.kind"))
        for k in (_mapping(k, f"{path}.allowedRoutes.kinds") for k in _list(allowed.get("kinds"), f"{path}.allowedRoutes.kinds"))
    )
    return Listener(
        name=name,
        port=_port_number(item.get("port"), f"{path}.port"),
        protocol=protocol,
        hostname=parse_host(item.get("hostname"), f"{path}.hostname"),
        tls_mode=(_str(tls.get("mode"), f"{path}.tls.mode", "Terminate") if protocol in ("HTTPS", "TLS") else ""),
        certificate_refs=refs,
        allowed_from=_str(namespaces.get("from"), f"{path}.allowedRoutes.namespaces.from", FROM_SAME),
        allowed_selector=_selector(selector, f"{path}.allowedRoutes.namespaces.selector") if selector is not None else None,
        allowed_kinds=kinds,
    )


def _secret_ref(value: Any, path: str, namespace: str) -> SecretRef:
    ref = _mapping(value, path)
    name = _str(ref.get("name"), f"{path}.name")
    if not name:
        raise _required(f"{path}.name")
    return SecretRef(
        name=name,
        namespace=_str(ref.get("namespace"), f"{path}.namespace") or namespace,
        group=_str(ref.get("group"), f"{path}.group"),
        kind=_str(ref.get("kind"), f"{path}.kind", "Secret"),
    )


def _selector(value: Any, path: str) -> LabelSelector:
    item = _mapping(value, path)
    labels = tuple(sorted((_str(k, path), _str(v, f"{path}.matchLabels[{k}]")) for k, v in _mapping(item.get("matchLabels"), f"{path}.matchLabels").items()))
    expressions = []
    for i, raw in enumerate(_list(item.get("matchExpressions"), f"{path}.matchExpressions")):
        expression = _mapping(raw, f"{path}.matchExpressions[{i}]")
        operator = _str(expression.get("operator"), f"{path}.matchExpressions[{i}].operator")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise _invalid(f"{path}.matchExpressions[{i}].operator", operator, "must be In, NotIn, Exists or DoesNotExist")
        values = tuple(_str(v, f"{path}.matchExpressions[{i}].values") for v in _list(expression.get("values"), f"{path}.matchExpressions[{i}].values"))
        expressions.append((_str(expression.get("key"), f"{path}.matchExpressions[{i}].key"), operator, values))
    return LabelSelector(labels, tuple(expressions))


def _parents_and_hostnames(spec: Mapping[str, Any], meta: ObjectMeta) -> tuple[tuple[ParentRef, ...], tuple[str, ...]]:
    """What every route kind has: parentRefs (namespace defaulted to the route's) and hostnames."""
    parents = tuple(_parent_ref(p, f"spec.parentRefs[{i}]", meta.namespace) for i, p in enumerate(_list(spec.get("parentRefs"), "spec.parentRefs")))
    hostnames = tuple(parse_host(h, f"spec.hostnames[{i}]") for i, h in enumerate(_list(spec.get("hostnames"), "spec.hostnames")))
    return parents, hostnames


def parse_http_route(obj: Mapping[str, Any], meta: ObjectMeta) -> HTTPRoute:
    """An HTTPRoute, with the CRD's defaults applied."""
    spec = _mapping(obj.get("spec"), "spec")
    parents, hostnames = _parents_and_hostnames(spec, meta)
    rules = tuple(_rule(r, f"spec.rules[{i}]", meta.namespace) for i, r in enumerate(_list(spec.get("rules"), "spec.rules")))
    status_parents, raw = _status_parents(obj, meta.namespace)
    return HTTPRoute(meta, parents, hostnames, rules or (RouteRule(),), status_parents, raw)


def parse_grpc_route(obj: Mapping[str, Any], meta: ObjectMeta) -> GRPCRoute:
    """A GRPCRoute, with the CRD's defaults applied (a rule without matches matches every call)."""
    spec = _mapping(obj.get("spec"), "spec")
    parents, hostnames = _parents_and_hostnames(spec, meta)
    rules = tuple(_grpc_rule(r, f"spec.rules[{i}]", meta.namespace) for i, r in enumerate(_list(spec.get("rules"), "spec.rules")))
    status_parents, raw = _status_parents(obj, meta.namespace)
    return GRPCRoute(meta, parents, hostnames, rules or (GRPCRouteRule(),), status_parents, raw)


def parse_l4_route(obj: Mapping[str, Any], meta: ObjectMeta) -> L4Route:
    """A TLSRoute, TCPRoute or UDPRoute: parents, hostnames and the backendRefs of its first rule."""
    spec = _mapping(obj.get("spec"), "spec")
    kind = _str(obj.get("kind"), "kind")
    parents, hostnames = _parents_and_hostnames(spec, meta)
    rules = [_mapping(r, f"spec.rules[{i}]") for i, r in enumerate(_list(spec.get("rules"), "spec.rules"))]
    if not rules:
        raise _required("spec.rules")
    backends = tuple(backend_ref(b, f"spec.rules[0].backendRefs[{i}]", meta.namespace) for i, b in enumerate(_list(rules[0].get("backendRefs"), "spec.rules[0].backendRefs")))
    status_parents, raw = _status_parents(obj, meta.namespace)
    return L4Route(meta, kind, parents, hostnames, backends, len(rules) - 1, status_parents, raw)


def _grpc_rule(value: Any, path: str, namespace: str) -> GRPCRouteRule:
    item = _mapping(value, path)
    matches = []
    for i, raw in enumerate(_list(item.get("matches"), f"{path}.matches")):
        match = _mapping(raw, f"{path}.matches[{i}]")
        method = match.get("method")
        method_match = None
        if method is not None:
            found = _mapping(method, f"{path}.matches[{i}].method")
            kind = _str(found.get("type"), f"{path}.matches[{i}].method.type", VALUE_MATCH_EXACT)
            if kind not in (VALUE_MATCH_EXACT, VALUE_MATCH_REGEX):
                raise _invalid(f"{path}.matches[{i}].method.type", kind, "must be Exact or RegularExpression")
            service = _str(found.get("service"), f"{path}.matches[{i}].method.service")
            name = _str(found.get("method"), f"{path}.matches[{i}].method.method")
            if not service and not name:
                raise _required(f"{path}.matches[{i}].method", "one of service and method is required")
            method_match = GRPCMethodMatch(service, name, kind)
        headers = tuple(value_match(h, f"{path}.matches[{i}].headers[{j}]", lower=True) for j, h in enumerate(_list(match.get("headers"), f"{path}.matches[{i}].headers")))
        matches.append(GRPCRouteMatch(method_match, headers))
    return GRPCRouteRule(
        matches=tuple(matches) or (GRPCRouteMatch(),),
        filters=tuple(route_filter(f, f"{path}.filters[{i}]", namespace) for i, f in enumerate(_list(item.get("filters"), f"{path}.filters"))),
        backend_refs=tuple(backend_ref(b, f"{path}.backendRefs[{i}]", namespace) for i, b in enumerate(_list(item.get("backendRefs"), f"{path}.backendRefs"))),
        name=_str(item.get("name"), f"{path}.name"),
    )


def _status_parents(obj: Mapping[str, Any], namespace: str) -> tuple[tuple[tuple[ParentRef, str, tuple[Condition, ...]], ...], tuple[str, ...]]:
    """A route's status.parents: parsed (ours are compared with what we would write) and as JSON text (others' are written back)."""
    status = _mapping(obj.get("status"), "status")
    entries = [_mapping(p, "status.parents") for p in _list(status.get("parents"), "status.parents")]
    parsed = tuple(
        (
            _parent_ref(entry.get("parentRef"), "status.parents.parentRef", namespace),
            _str(entry.get("controllerName"), "status.parents.controllerName"),
            tuple(_condition(c) for c in _list(entry.get("conditions"), "status.parents.conditions")),
        )
        for entry in entries
    )
    return parsed, tuple(json.dumps(entry, sort_keys=True) for entry in entries)


def _parent_ref(value: Any, path: str, namespace: str) -> ParentRef:
    item = _mapping(value, path)
    name = _str(item.get("name"), f"{path}.name")
    if not name:
        raise _required(f"{path}.name")
    port = item.get("port")
    return ParentRef(
        name=name,
        namespace=_str(item.get("namespace"), f"{path}.namespace") or namespace,
        group=_str(item.get("group"), f"{path}.group", GATEWAY_GROUP),
        kind=_str(item.get("kind"), f"{path}.kind", "Gateway"),
        section_name=_str(item.get("sectionName"), f"{path}.sectionName"),
        port=_port_number(port, f"{path}.port") if port is not None else None,
    )


def _rule(value: Any, path: str, namespace: str) -> RouteRule:
    item = _mapping(value, path)
    matches = tuple(route_match(m, f"{path}.matches[{i}]") for i, m in enumerate(_list(item.get("matches"), f"{path}.matches")))
    timeouts = _mapping(item.get("timeouts"), f"{path}.timeouts")
    request = duration(timeouts.get("request"), f"{path}.timeouts.request")
    backend = duration(timeouts.get("backendRequest"), f"{path}.timeouts.backendRequest")
    if request and backend is not None and backend > request:  # the CRD's CEL rule on HTTPRouteTimeouts
        raise _invalid(f"{path}.timeouts.backendRequest", timeouts.get("backendRequest"), "backendRequest timeout cannot be longer than request timeout")
    return RouteRule(
        matches=matches or (RouteMatch(),),
        filters=tuple(route_filter(f, f"{path}.filters[{i}]", namespace) for i, f in enumerate(_list(item.get("filters"), f"{path}.filters"))),
        backend_refs=tuple(backend_ref(b, f"{path}.backendRefs[{i}]", namespace) for i, b in enumerate(_list(item.get("backendRefs"), f"{path}.backendRefs"))),
        request_timeout=request,
        backend_request_timeout=backend,
        name=_str(item.get("name"), f"{path}.name"),
        retry=rule_retry(item.get("retry"), f"{path}.retry"),
    )


def parse_reference_grant(obj: Mapping[str, Any], meta: ObjectMeta) -> ReferenceGrant:
    """A ReferenceGrant: who (group, kind, namespace) may refer to what (group, kind, name) here."""
    spec = _mapping(obj.get("spec"), "spec")
    sources = tuple(
        (_str(f.get("group"), "spec.from.group"), _str(f.get("kind"), "spec.from.kind"), _str(f.get("namespace"), "spec.from.namespace"))
        for f in (_mapping(f, "spec.from") for f in _list(spec.get("from"), "spec.from"))
    )
    targets = tuple(
        (_str(t.get("group"), "spec.to.group"), _str(t.get("kind"), "spec.to.kind"), _str(t.get("name"), "spec.to.name"))
        for t in (_mapping(t, "spec.to") for t in _list(spec.get("to"), "spec.to"))
    )
    return ReferenceGrant(meta, sources, targets)


def _conditions(obj: Mapping[str, Any]) -> tuple[Condition, ...]:
    return tuple(_condition(c) for c in _list(_mapping(obj.get("status"), "status").get("conditions"), "status.conditions"))


def _condition(value: Any) -> Condition:
    item = _mapping(value, "status.conditions")
    try:
        generation = _int(item.get("observedGeneration"), "status.conditions.observedGeneration") or 0
    except ParseError:
        generation = 0
    return Condition(
        type=_str(item.get("type"), "status.conditions.type"),
        status=_str(item.get("status"), "status.conditions.status"),
        reason=_str(item.get("reason"), "status.conditions.reason"),
        message=_str(item.get("message"), "status.conditions.message"),
        observed_generation=generation,
        last_transition_time=_str(item.get("lastTransitionTime"), "status.conditions.lastTransitionTime"),
    )
