# -*- test-case-name: tests.unit.test_gateway_parse -*-
"""
Gateway API (gateway.networking.k8s.io) objects as frozen snapshot values.

Only what routing and status need is kept: a GatewayClass's controller, a
Gateway's listeners, an HTTPRoute's parents, hostnames and rules, and the
ReferenceGrants that allow references across namespaces.  The parsers are in
L{ingress.model._gateway}; routing compiles these values into the same routes
and policies as Ingresses (L{ingress.routing.gateway}).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

from ingress.model.meta import Condition, ObjectMeta, ObjectRef

GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_CONTROLLER_NAME = "twingress.io/gateway-controller"

PATH_MATCH_EXACT = "Exact"
PATH_MATCH_PREFIX = "PathPrefix"
PATH_MATCH_REGEX = "RegularExpression"
VALUE_MATCH_EXACT = "Exact"
VALUE_MATCH_REGEX = "RegularExpression"

FROM_ALL = "All"
FROM_SAME = "Same"
FROM_SELECTOR = "Selector"


@dataclass(frozen=True, slots=True)
class GatewayClass:
    meta: ObjectMeta
    controller_name: str
    status_conditions: tuple[Condition, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A listener's certificateRef (a core Secret unless C{group}/C{kind} say otherwise)."""

    name: str
    namespace: str  # already defaulted to the Gateway's own
    group: str = ""
    kind: str = "Secret"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """C{matchLabels} and C{matchExpressions} (key, operator, values) of a metav1.LabelSelector."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, found: Mapping[str, str]) -> bool:
        """Whether an object with the labels C{found} is selected (the API's rules: In, NotIn, Exists, DoesNotExist)."""
        if any(found.get(key) != value for key, value in self.match_labels):
            return False
        for key, operator, values in self.match_expressions:
            present = key in found
            if operator == "In" and not (present and found[key] in values):
                return False
            if operator == "NotIn" and present and found[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True, slots=True)
class RouteKind:
    group: str
    kind: str


@dataclass(frozen=True, slots=True)
class Listener:
    """
    One Gateway listener.  C{hostname} is lower-case, "" for any; C{tls_mode} is
    "Terminate" or "Passthrough" for HTTPS and TLS listeners, "" otherwise.
    """

    name: str
    port: int
    protocol: str
    hostname: str = ""
    tls_mode: str = ""
    certificate_refs: tuple[SecretRef, ...] = ()
    allowed_from: str = FROM_SAME
    allowed_selector: Optional[LabelSelector] = None
    allowed_kinds: tuple[RouteKind, ...] = ()  # empty: the kinds the protocol supports


@dataclass(frozen=True, slots=True)
class ListenerSeen:
    """A listener's status as the object shows it (what the status writer compares with)."""

    name: str
    supported_kinds: tuple[str, ...]
    attached_routes: int
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Gateway:
    meta: ObjectMeta
    gateway_class_name: str
    listeners: tuple[Listener, ...]
    status_conditions: tuple[Condition, ...] = field(default=(), compare=False)
    status_listeners: tuple[ListenerSeen, ...] = field(default=(), compare=False)
    status_addresses: tuple[str, ...] = field(default=(), compare=False)
    addresses: tuple[str, ...] = ()  # spec.addresses of type IPAddress: the addresses asked for

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("Gateway", self.meta.namespace, self.meta.name)


@dataclass(frozen=True, slots=True)
class ParentRef:
    """An HTTPRoute's parentRef; C{namespace} is already defaulted to the route's own."""

    name: str
    namespace: str
    group: str = GATEWAY_GROUP
    kind: str = "Gateway"
    section_name: str = ""
    port: Optional[int] = None


@dataclass(frozen=True, slots=True)
class ValueMatch:
    """A header or query parameter match: C{name} (headers: lower-case), its C{value}, Exact or RegularExpression."""

    name: str
    value: str
    type: str = VALUE_MATCH_EXACT


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """
    One HTTPRouteMatch.  The API defaults a match without a path to PathPrefix "/";
    C{method} is "" for any method.
    """

    path_type: str = PATH_MATCH_PREFIX
    path: str = "/"
    headers: tuple[ValueMatch, ...] = ()
    query_params: tuple[ValueMatch, ...] = ()
    method: str = ""


@dataclass(frozen=True, slots=True)
class HeaderModifier:
    """RequestHeaderModifier / ResponseHeaderModifier: C{set} replaces, C{add} appends, C{remove} drops (names as given)."""

    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PathModifier:
    """An HTTPPathModifier: C{type} ReplaceFullPath (C{value} is the path) or ReplacePrefixMatch."""

    type: str
    value: str


@dataclass(frozen=True, slots=True)
class RedirectFilter:
    """RequestRedirect: every unset field keeps the request's (the port as the spec defaults it)."""

    scheme: str = ""
    hostname: str = ""
    path: Optional[PathModifier] = None
    port: Optional[int] = None
    status_code: int = 302


@dataclass(frozen=True, slots=True)
class RewriteFilter:
    """URLRewrite: the upstream's Host and path."""

    hostname: str = ""
    path: Optional[PathModifier] = None


@dataclass(frozen=True, slots=True)
class MirrorFilter:
    """RequestMirror: where copies of the requests go (a BackendObjectReference: no weight) and the share copied, in percent."""

    backend: BackendRef
    percent: float = 100.0


@dataclass(frozen=True, slots=True)
class CorsFilter:
    """CORS (HTTPCORSFilter, GEP-1767): lists as given; C{max_age} defaulted to the API's 5 seconds."""

    allow_origins: tuple[str, ...] = ()
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    allow_credentials: bool = False
    max_age: int = 5


@dataclass(frozen=True, slots=True)
class RouteFilter:
    """
    One HTTPRouteFilter.  C{type} names it; the field of that type is set.  A filter
    type twingress does not implement keeps only its C{type} (routing reports it).
    """

    type: str
    request_headers: Optional[HeaderModifier] = None
    response_headers: Optional[HeaderModifier] = None
    redirect: Optional[RedirectFilter] = None
    rewrite: Optional[RewriteFilter] = None
    mirror: Optional[MirrorFilter] = None
    cors: Optional[CorsFilter] = None


@dataclass(frozen=True, slots=True)
class BackendRef:
    """An HTTPBackendRef; C{namespace} is already defaulted to the route's own, C{weight} to 1."""

    name: str
    namespace: str
    port: Optional[int] = None
    group: str = ""
    kind: str = "Service"
    weight: int = 1
    filters: tuple[RouteFilter, ...] = ()


@dataclass(frozen=True, slots=True)
class RuleRetry:
    """HTTPRouteRetry (GEP-1731): the statuses retried, how many retries (None: unset), the least wait between them (seconds)."""

    codes: tuple[int, ...] = ()
    attempts: Optional[int] = None
    backoff: Optional[float] = None


@dataclass(frozen=True, slots=True)
class RouteRule:
    """One HTTPRouteRule; the API defaults C{matches} to one PathPrefix "/" match."""

    matches: tuple[RouteMatch, ...] = (RouteMatch(),)
    filters: tuple[RouteFilter, ...] = ()
    backend_refs: tuple[BackendRef, ...] = ()
    request_timeout: Optional[float] = None
    backend_request_timeout: Optional[float] = None
    name: str = ""
    retry: Optional[RuleRetry] = None


@dataclass(frozen=True, slots=True)
class HTTPRoute:
    """An HTTPRoute; routing also reads a GRPCRoute in this shape (C{kind} "GRPCRoute", its matches as paths)."""

    meta: ObjectMeta
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...]  # lower-case; may start with "*."
    rules: tuple[RouteRule, ...]
    status_parents: tuple[tuple[ParentRef, str, tuple[Condition, ...]], ...] = field(default=(), compare=False)
    # Each status.parents entry as JSON text: another controller's entries are written back exactly as they were.
    status_parents_raw: tuple[str, ...] = field(default=(), compare=False)
    kind: str = "HTTPRoute"

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.kind, self.meta.namespace, self.meta.name)


@dataclass(frozen=True, slots=True)
class GRPCMethodMatch:
    """A GRPCRoute method match: C{service} ("package.Service") and C{method}, at least one set; Exact or RegularExpression."""

    service: str = ""
    method: str = ""
    type: str = VALUE_MATCH_EXACT


@dataclass(frozen=True, slots=True)
class GRPCRouteMatch:
    method: Optional[GRPCMethodMatch] = None
    headers: tuple[ValueMatch, ...] = ()


@dataclass(frozen=True, slots=True)
class GRPCRouteRule:
    """One GRPCRouteRule; the API's default is one match of every call."""

    matches: tuple[GRPCRouteMatch, ...] = (GRPCRouteMatch(),)
    filters: tuple[RouteFilter, ...] = ()
    backend_refs: tuple[BackendRef, ...] = ()
    name: str = ""


@dataclass(frozen=True, slots=True)
class GRPCRoute:
    meta: ObjectMeta
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...]
    rules: tuple[GRPCRouteRule, ...]
    status_parents: tuple[tuple[ParentRef, str, tuple[Condition, ...]], ...] = field(default=(), compare=False)
    status_parents_raw: tuple[str, ...] = field(default=(), compare=False)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("GRPCRoute", self.meta.namespace, self.meta.name)


@dataclass(frozen=True, slots=True)
class ReferenceGrant:
    """
    Allows references from C{from_} (group, kind, namespace) to C{to} (group, kind, name or
    "" for any) in the grant's own namespace.
    """

    meta: ObjectMeta
    from_: tuple[tuple[str, str, str], ...]
    to: tuple[tuple[str, str, str], ...]

    def allows(self, group: str, kind: str, namespace: str, to_group: str, to_kind: str, to_name: str) -> bool:
        """Whether a C{kind} of C{namespace} may refer to C{to_kind} C{to_name} of this grant's namespace."""
        return any(f == (group, kind, namespace) for f in self.from_) and any(
            t[0] == to_group and t[1] == to_kind and t[2] in ("", to_name) for t in self.to
        )


@dataclass(frozen=True, slots=True)
class L4Route:
    """
    A TLSRoute, TCPRoute or UDPRoute (C{kind}), an "L4" route: parents, hostnames (TLSRoute: the SNI names) and
    the backendRefs of its rule.  The API allows exactly one rule for TLSRoute; TCP and UDP routes
    may list more, of which the first is used (reported when there are more).
    """

    meta: ObjectMeta
    kind: str
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...]
    backend_refs: tuple[BackendRef, ...]
    extra_rules: int = 0  # rules after the first, not served
    status_parents: tuple[tuple[ParentRef, str, tuple[Condition, ...]], ...] = field(default=(), compare=False)
    status_parents_raw: tuple[str, ...] = field(default=(), compare=False)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.kind, self.meta.namespace, self.meta.name)
