# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
One HTTPRoute rule compiled into the route every match of it leads to: its filters as policies,
its backendRefs as an upstream or a weighted set.

The filters become the policies an Ingress's annotations become (DESIGN "Routes carry
policies"): RequestHeaderModifier and ResponseHeaderModifier are header changes,
RequestRedirect is answered by the proxy, URLRewrite is the upstream's Host and path,
RequestMirror copies the requests to other backends (a mirror whose backend cannot be
used is dropped and reported in ResolvedRefs, as the spec asks; the rule is served).
CORS is the route's CORS policy, as GEP-1767 reads it where it differs from ingress-nginx
(L{ingress.routing.policies.cors}).  A filter twingress does not implement (ExtensionRef;
RequestMirror and CORS on a GRPCRoute) makes its rule answer 500: a rule is never served
without what it asks for.  A backendRef's own header modifiers apply to the requests (and
responses) of that backend alone, after the rule's (HTTPBackendRef.filters).

The rule's timeouts are the route's deadlines (L{rule_limits}); its C{retry} is the route's retry
policy (L{Retry.from_gateway}).

A backendRef that cannot be used (another kind than a core Service, a Service that
does not exist, another namespace without a ReferenceGrant, no port) answers its
share of the requests 500, with the reason the route's ResolvedRefs condition gives
(Gateway API "BackendRefs").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Optional

from ingress.model import ClusterState, IngressBackend, Problem, ServiceBackendPort
from ingress.model.gateway import GATEWAY_GROUP, PATH_MATCH_PREFIX, BackendRef, CorsFilter, HeaderModifier, HTTPRoute, L4Route, RouteRule
from ingress.routing.backends import Backends
from ingress.routing.gateway.grpc import GRPC_ROUTE
from ingress.routing.policies.cors import Cors
from ingress.routing.policies.headers import HeaderChanges, header_changes, merged, valid_field
from ingress.routing.policies.limits import Deadlines, Limits
from ingress.routing.policies.mirror import Mirror, MirrorTarget
from ingress.routing.policies.pathreplace import REPLACE_PREFIX_MATCH, PathReplace
from ingress.routing.policies.redirect import Deny, GatewayRedirect
from ingress.routing.policies.retry import Retry
from ingress.routing.route import Policies, Route, WeightedBackends
from ingress.routing.upstream import Upstream

UNSUPPORTED_FILTER = "UnsupportedFilter"
_ORIGIN = re.compile(r"https?://(?:\*\.)?[A-Za-z0-9.-]+(?::[0-9]{1,5})?")  # HTTPCORSFilter's CORSOrigin (its "*" one left-most label at most)


@dataclass
class RuleContext:
    """What compiling a route's rules needs and reports: the snapshot, the Services, our ports, problems, unresolved refs."""

    state: ClusterState
    backends: Backends
    http_port: int = 80
    https_port: int = 443
    problems: list[Problem] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)  # ResolvedRefs reason → first message, per route


H2C_APP_PROTOCOL = "kubernetes.io/h2c"
"""A Service port's appProtocol for HTTP/2 with prior knowledge (KEP-3726; HTTPRouteBackendProtocolH2C)."""


def compile_rule(route: HTTPRoute, rule: RouteRule, context: RuleContext) -> Route:
    """The route a match of C{rule} leads to (C{context} collects its problems and unresolved references)."""
    name = f"{route.meta.namespace}/{route.meta.name}"
    empty = Upstream(f"{name}#rule", ())
    base = Route(name=name, source=route.ref, upstream=empty)
    grpc = route.kind == GRPC_ROUTE
    unusable = 503 if grpc else 500  # gRPC clients read 503 as UNAVAILABLE, what GRPCRoute asks for
    policies, refused = _filter_policies(route, rule, context)
    if refused:
        return Route(name=name, source=route.ref, upstream=empty, policies=Policies(deny=Deny(unusable, refused)))
    if grpc:
        policies = replace(policies, backend_http2=True)
    limits = rule_limits(rule)
    if limits is not None:
        policies = replace(policies, limits=limits)
    if rule.retry is not None:  # GEP-1731, in the retry policy ingress-nginx's proxy-next-upstream compiles to
        policies = replace(policies, retry=Retry.from_gateway(rule.retry.codes, rule.retry.attempts, rule.retry.backoff))
    if policies.redirect is not None:
        return Route(name=name, source=route.ref, upstream=empty, policies=policies)
    weighted = [(ref.weight, _backend_route(route, ref, base, context)) for ref in rule.backend_refs]
    usable = [(weight, target) for weight, target in weighted if weight > 0]
    if not usable:
        why = "the rule has no backendRefs" if not rule.backend_refs else "every backendRef has weight 0"
        return Route(name=name, source=route.ref, upstream=empty, policies=Policies(deny=Deny(unusable, why)))
    plain = policies if policies != Policies() else None

    def to_backend(target: Route) -> Route:
        return Route(name=name, source=route.ref, upstream=target.upstream, policies=_with_backend_own(policies, target.policies) or plain)

    if len(usable) == 1 and usable[0][1] is not None:
        return to_backend(usable[0][1])
    routes = tuple(to_backend(t) if t is not None else None for _, t in usable)
    split = WeightedBackends(routes, tuple(weight for weight, _ in usable), unusable)
    return Route(name=name, source=route.ref, upstream=empty, policies=replace(policies, backends=split))


def rule_limits(rule: RouteRule) -> Optional[Limits]:
    """A rule's timeouts (HTTPRouteTimeouts) as the route's deadlines; None without any ("0s" disables one, as the spec asks)."""
    request = rule.request_timeout or None
    backend = rule.backend_request_timeout or None
    if request is None and backend is None:
        return None
    return Limits(deadlines=Deadlines(request, backend))


def _filter_policies(route: HTTPRoute, rule: RouteRule, context: RuleContext) -> tuple[Policies, str]:
    """The rule's filters as policies, or the reason the rule cannot be served as asked."""
    request: Optional[HeaderChanges] = None
    response: Optional[HeaderChanges] = None
    redirect: Optional[GatewayRedirect] = None
    rewrite: Optional[PathReplace] = None
    upstream_host = ""
    mirrors: list[MirrorTarget] = []
    cors: Optional[Cors] = None
    for item in rule.filters:
        if item.type == "RequestHeaderModifier" and item.request_headers is not None:
            request = _changes(item.request_headers)
            if request is None:
                return Policies(), _refuse(route, context, "RequestHeaderModifier: a name or value that cannot be sent")
        elif item.type == "ResponseHeaderModifier" and item.response_headers is not None:
            response = _changes(item.response_headers)
            if response is None:
                return Policies(), _refuse(route, context, "ResponseHeaderModifier: a name or value that cannot be sent")
        elif item.type == "RequestRedirect" and item.redirect is not None:
            given = item.redirect
            path = _path(rule, given.path.type, given.path.value) if given.path is not None else None
            redirect = GatewayRedirect(given.status_code, given.scheme, given.hostname, given.port, path, context.http_port, context.https_port)
        elif item.type == "URLRewrite" and item.rewrite is not None:
            upstream_host = item.rewrite.hostname
            rewrite = _path(rule, item.rewrite.path.type, item.rewrite.path.value) if item.rewrite.path is not None else None
        elif item.type == "CORS" and item.cors is not None and route.kind != GRPC_ROUTE:
            cors = gateway_cors(item.cors)
            if cors is None:
                return Policies(), _refuse(route, context, "CORS: an origin, method or header name that cannot be sent")
        elif item.type == "RequestMirror" and item.mirror is not None and route.kind != GRPC_ROUTE:
            target = _mirror_target(route, item.mirror.backend, item.mirror.percent, context)
            if target is not None:
                mirrors.append(target)
        else:
            grpc_only = " on a GRPCRoute" if item.type in ("RequestMirror", "CORS") else ""
            return Policies(), _refuse(route, context, f"filter {item.type} is not supported by twingress{grpc_only}")
    mirror = Mirror(tuple(mirrors)) if mirrors else None
    return Policies(redirect=redirect, rewrite=rewrite, upstream_host=upstream_host, request_headers=request, response_headers=response, mirror=mirror, cors=cors), ""


def gateway_cors(given: CorsFilter) -> Optional[Cors]:
    """
    The CORS filter as the route's CORS policy, read as GEP-1767 reads it (L{Cors.gateway}); None when
    an origin is not C{scheme://host[:port]} in ASCII, or a method or header name is not a token.
    """
    if not all(origin == "*" or _ORIGIN.fullmatch(origin) for origin in given.allow_origins):
        return None
    if not all(valid_field(name, "") for name in (*given.allow_methods, *given.allow_headers, *given.expose_headers)):
        return None
    return Cors(
        origins=given.allow_origins,
        methods=", ".join(given.allow_methods),
        headers=", ".join(given.allow_headers),
        expose=", ".join(given.expose_headers),
        credentials=given.allow_credentials,
        max_age=given.max_age,
        gateway=True,
    )


def _mirror_target(route: HTTPRoute, ref: BackendRef, percent: float, context: RuleContext) -> Optional[MirrorTarget]:
    """A RequestMirror's backend, or None (the mirror dropped, ResolvedRefs says why; a share of 0 copies nothing)."""
    if not usable_backend(route, ref, context) or percent <= 0:
        return None
    assert ref.port is not None  # usable_backend checked it
    upstream, issue = context.backends.upstream(ref.namespace, IngressBackend(ref.name, ServiceBackendPort(number=ref.port)))
    if issue is not None:
        context.problems.append(Problem(route.ref, *issue))
    return MirrorTarget(upstream, percent)


def _refuse(route: HTTPRoute, context: RuleContext, why: str) -> str:
    """A rule that cannot be served as asked answers 500, reported."""
    context.problems.append(Problem(route.ref, UNSUPPORTED_FILTER, f"{why}: its rule answers 500"))
    return why


def _changes(modifier: HeaderModifier) -> Optional[HeaderChanges]:
    """A header modifier as header changes; None when a name or value could not be sent (reported by the caller)."""
    pairs = modifier.set + modifier.add
    if not all(valid_field(name, value) for name, value in pairs) or not all(valid_field(name, "") for name in modifier.remove):
        return None
    return header_changes(modifier.set, modifier.add, modifier.remove)


def _path(rule: RouteRule, kind: str, value: str) -> PathReplace:
    """A path modifier; ReplacePrefixMatch replaces the prefix of the rule's one PathPrefix match (the CRD allows no other)."""
    if kind != REPLACE_PREFIX_MATCH:
        return PathReplace(kind, value)
    prefixes = [m.path for m in rule.matches if m.path_type == PATH_MATCH_PREFIX]
    return PathReplace(kind, value, prefixes[0] if prefixes else "/")


def _backend_route(route: HTTPRoute, ref: BackendRef, base: Route, context: RuleContext) -> Optional[Route]:
    """The route to one backendRef, or None (answered 500) with the reason recorded for ResolvedRefs."""
    if not usable_backend(route, ref, context):
        return None
    own, refused = _backend_filters(ref)
    if refused:
        return _unresolved(route, context, "", f"backendRef {ref.name}: {refused}: its share answers 500")
    assert ref.port is not None  # usable_backend checked it
    upstream, issue = context.backends.upstream(ref.namespace, IngressBackend(ref.name, ServiceBackendPort(number=ref.port)))
    if issue is not None:
        context.problems.append(Problem(route.ref, *issue))
    service = context.state.services.get((ref.namespace, ref.name))
    port = next((p for p in service.ports if p.port == ref.port), None) if service is not None else None
    if port is not None and port.app_protocol == H2C_APP_PROTOCOL:  # HTTP/2 with prior knowledge to its endpoints
        own = replace(own or Policies(), backend_http2=True)
    return Route(name=base.name, source=base.source, upstream=upstream, policies=own)


def _backend_filters(ref: BackendRef) -> tuple[Optional[Policies], str]:
    """A backendRef's own header modifiers as policies (None: it has none), or why they cannot be served."""
    request: Optional[HeaderChanges] = None
    response: Optional[HeaderChanges] = None
    for item in ref.filters:
        if item.type == "RequestHeaderModifier" and item.request_headers is not None:
            request = changes = _changes(item.request_headers)
        elif item.type == "ResponseHeaderModifier" and item.response_headers is not None:
            response = changes = _changes(item.response_headers)
        else:
            return None, f"filter {item.type} on a backendRef is not supported by twingress"
        if changes is None:
            return None, f"{item.type}: a name or value that cannot be sent"
    if request is None and response is None:
        return None, ""
    return Policies(request_headers=request, response_headers=response), ""


def _with_backend_own(rule: Policies, own: Optional[Policies]) -> Optional[Policies]:
    """The rule's policies with a backend's own on top (its h2c, its header changes after the rule's); None: the rule's alone."""
    if own is None:
        return None
    return replace(
        rule,
        backend_http2=rule.backend_http2 or own.backend_http2,
        request_headers=merged(rule.request_headers, own.request_headers),
        response_headers=merged(rule.response_headers, own.response_headers),
    )


def usable_backend(route: HTTPRoute | L4Route, ref: BackendRef, context: RuleContext) -> bool:
    """Whether a backendRef names a Service the route may use; if not, why is recorded (problems, ResolvedRefs)."""
    fault = _backend_fault(route, ref, context.state)
    if fault is not None:
        _unresolved(route, context, *fault)
    return fault is None


def _backend_fault(route: HTTPRoute | L4Route, ref: BackendRef, state: ClusterState) -> Optional[tuple[str, str]]:
    """The ResolvedRefs reason and message of a backendRef that cannot be used, or None."""
    if ref.group or ref.kind != "Service":
        return "InvalidKind", f"backendRef {ref.group or 'core'}/{ref.kind} {ref.name}: only core Services are supported"
    if ref.namespace != route.meta.namespace and not _granted(state, route, ref):
        return "RefNotPermitted", f"no ReferenceGrant in namespace {ref.namespace} allows this route to use Service {ref.name}"
    if ref.port is None:
        return "BackendNotFound", f"backendRef Service {ref.namespace}/{ref.name} needs a port"
    if (ref.namespace, ref.name) not in state.services:
        return "BackendNotFound", f"Service {ref.namespace}/{ref.name} not found"
    return None


def _granted(state: ClusterState, route: HTTPRoute | L4Route, ref: BackendRef) -> bool:
    return any(
        grant.meta.namespace == ref.namespace and grant.allows(GATEWAY_GROUP, route.kind, route.meta.namespace, "", "Service", ref.name)
        for grant in state.reference_grants
    )


def _unresolved(route: HTTPRoute | L4Route, context: RuleContext, reason: str, message: str) -> Optional[Route]:
    """Report a backendRef that cannot be used (C{reason} for ResolvedRefs, "" when it is ours to refuse); None: its share answers 500."""
    context.problems.append(Problem(route.ref, reason or UNSUPPORTED_FILTER, message))
    if reason:
        context.unresolved.setdefault(reason, message)
    return None
