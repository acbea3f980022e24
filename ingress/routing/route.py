# -*- test-case-name: tests.unit.test_routing, tests.unit.test_canary, tests.unit.test_annotation_policies, tests.unit.test_gateway_routing -*-
"""
What a request is routed to: a L{Route} (the Ingress that said so, its options, its L{Upstream}),
and L{Policies}, what it does to a request besides choosing its upstream.

The two are one module because they contain each other: a route carries its policies, and two kinds
of policy carry routes (a L{Canary}'s route, a Gateway API rule's L{WeightedBackends}).  Declared
together, nothing under C{routing/policies/} refers back to a route, and the policies' own modules
stay below this one.

Each other kind is a frozen value in a module of its own under C{routing/policies/}, built in
C{routing/} from whatever described it (Ingress annotations, Gateway API filters) and applied by the
proxy in one fixed order, the order of L{Policies}' fields:

  1. C{deny}: the route is closed (an access guard twingress cannot enforce); C{client_auth}: the
     host's client certificate must verify (400, or a redirect to its error page; 403 when the
     subject does not match);
  2. C{redirect}, C{app_root}, C{cors}: answered by the proxy, no upstream (a CORS preflight:
     204), or fields added (nginx's rewrite phase comes before its access phase);
  3. C{rate_limit}: how often a client may ask (503 by default; counted over all workers);
     C{source_ranges}: who may pass (403); C{basic_auth}: who may pass (401; checked by the
     proxy off the reactor thread); C{external_auth}: what an auth service says (401, 403, a
     sign-in redirect, or 500 when it cannot say), after the basic auth; all of them must let a
     request pass, or with C{satisfy_any} one of them (nginx's C{satisfy any});
  4. C{canary}, C{backends}, C{affinity}: which backend (the route's own, its canary's, or one
     of a Gateway API rule's weighted backendRefs) and which endpoint;
  5. C{rewrite}, C{forwarded_prefix}, C{upstream_host}, C{request_headers}: the request the upstream receives,
     and C{response_headers} the response the client receives;
  6. C{limits}, C{backend_tls}: timeouts, the body size limit, and TLS to the endpoints;
     C{mirror}: copies of the request to other backends, their answers ignored;
  7. C{retry}, C{error_pages}: what an error does: another endpoint, or a page from the
     error backend instead of the response.

A route without any has C{policies=None}, so the proxy pays one attribute
test for all of them.  A struct of optional fields rather than a list of
policy objects: the order is fixed by the type, and the proxy reads what it
needs without searching a list.
"""

from __future__ import annotations

import bisect
import random
import re
from dataclasses import dataclass
from typing import Optional

from ingress.model import ObjectRef
from ingress.routing.policies.access import SourceRanges
from ingress.routing.policies.affinity import Affinity
from ingress.routing.policies.auth import BasicAuth
from ingress.routing.policies.backend import BackendTLS
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.policies.cors import Cors
from ingress.routing.policies.errorpages import ErrorPages
from ingress.routing.policies.extauth import ExternalAuth
from ingress.routing.policies.hashing import HashBy
from ingress.routing.policies.headers import HeaderChanges
from ingress.routing.policies.limits import Limits
from ingress.routing.policies.matching import FieldLookup, RequestMatch
from ingress.routing.policies.mirror import Mirror
from ingress.routing.policies.pathreplace import PathReplace
from ingress.routing.policies.ratelimit import RateLimit
from ingress.routing.policies.redirect import Deny, GatewayRedirect, Redirect
from ingress.routing.policies.retry import Retry
from ingress.routing.policies.rewrite import Rewrite
from ingress.routing.upstream import Upstream


@dataclass(frozen=True, slots=True)
class Route:
    """What a matched request is sent to, and the Ingress that said so (the metrics label)."""

    name: str  # "namespace/ingress"
    source: ObjectRef
    upstream: Upstream
    path: str = ""
    path_type: str = ""
    redirect_https: bool = False  # plain HTTP gets https_redirect_code to https (the host has TLS)
    https_redirect_code: int = 308
    hsts: str = ""  # Strict-Transport-Security value for HTTPS answers
    policies: Optional[Policies] = None  # what the proxy does besides forwarding (None: nothing)
    # Gateway API: the routes of this path in precedence order, each with what else the request must
    # carry; the first that accepts it serves it (none: 404).  Empty for every Ingress route.
    choices: tuple[tuple[RequestMatch, Route], ...] = ()

    def choose(self, scheme: bytes, method: bytes, field: FieldLookup, target: bytes) -> Optional[Route]:
        """The route of C{choices} that serves a request, or None (404)."""
        for match, route in self.choices:
            if match.accepts(scheme, method, field, target):
                return route
        return None



@dataclass(frozen=True, slots=True)
class Policies:
    """Every policy a route may carry; None (or "") where it carries none of that kind."""

    deny: Optional[Deny] = None
    client_auth: Optional[ClientAuth] = None
    redirect: Optional[Redirect | GatewayRedirect] = None
    app_root: str = ""  # "/" alone is redirected (302) to this path
    source_ranges: Optional[SourceRanges] = None
    cors: Optional[Cors] = None
    rate_limit: Optional[RateLimit] = None
    basic_auth: Optional[BasicAuth] = None
    external_auth: Optional[ExternalAuth] = None
    satisfy_any: bool = False  # satisfy: "any": the source range, the password or the auth service, any one suffices
    canary: Optional[Canary] = None
    backends: Optional[WeightedBackends] = None  # Gateway API backendRefs with weights (the route's own upstream unused)
    affinity: Optional[Affinity] = None
    hash_by: Optional[HashBy] = None
    load_balance: str = ""  # "" (round robin) or EWMA
    rewrite: Optional[Rewrite | PathReplace] = None
    forwarded_prefix: str = ""  # x-forwarded-prefix without a rewrite (a rewrite carries its own)
    upstream_host: str = ""  # the Host field the upstream receives instead of the client's
    request_headers: Optional[HeaderChanges] = None
    response_headers: Optional[HeaderChanges] = None
    limits: Optional[Limits] = None
    backend_tls: Optional[BackendTLS] = None
    backend_http2: bool = False  # HTTP/2 to the endpoints (backend-protocol GRPC, GRPCS, H2C): HTTP/2 clients only
    mirror: Optional[Mirror] = None  # Gateway API RequestMirror
    retry: Optional[Retry] = None
    error_pages: Optional[ErrorPages] = None
    strip_trailing_slash: bool = False  # the HTTP to HTTPS redirect drops one trailing "/" (ingress-nginx's default)

    def to_json(self) -> dict[str, object]:
        """For /debug/routes: only the kinds this route has."""
        shown: dict[str, object] = {}
        if self.deny is not None:
            shown["deny"] = {"status": self.deny.status, "reason": self.deny.reason}
        if self.client_auth is not None:
            shown["clientAuth"] = self.client_auth.to_json()
        if self.redirect is not None:
            shown["redirect"] = self.redirect.to_json()
        if self.app_root:
            shown["appRoot"] = self.app_root
        if self.source_ranges is not None:
            shown["sourceRanges"] = self.source_ranges.to_json()
        if self.cors is not None:
            shown["cors"] = self.cors.to_json()
        if self.rate_limit is not None:
            shown["rateLimit"] = self.rate_limit.to_json()
        if self.basic_auth is not None:
            shown["basicAuth"] = self.basic_auth.to_json()
        if self.external_auth is not None:
            shown["externalAuth"] = self.external_auth.to_json()
        if self.satisfy_any:
            shown["satisfy"] = "any"
        if self.canary is not None:
            shown["canary"] = self.canary.to_json()
        if self.backends is not None:
            shown["backends"] = self.backends.to_json()
        if self.affinity is not None:
            shown["affinity"] = self.affinity.to_json()
        if self.hash_by is not None:
            shown["hashBy"] = self.hash_by.source
        if self.load_balance:
            shown["loadBalance"] = self.load_balance
        if self.rewrite is not None:
            shown["rewrite"] = self.rewrite.to_json()
        if self.forwarded_prefix:
            shown["forwardedPrefix"] = self.forwarded_prefix
        if self.upstream_host:
            shown["upstreamHost"] = self.upstream_host
        if self.request_headers is not None:
            shown["requestHeaders"] = self.request_headers.to_json()
        if self.response_headers is not None:
            shown["responseHeaders"] = self.response_headers.to_json()
        if self.limits is not None:
            shown["limits"] = self.limits.to_json()
        if self.backend_tls is not None:
            shown["backendTLS"] = self.backend_tls.to_json()
        if self.backend_http2:
            shown["backendHTTP2"] = True
        if self.mirror is not None:
            shown["mirror"] = self.mirror.to_json()
        if self.retry is not None:
            shown["retry"] = self.retry.to_json()
        if self.error_pages is not None:
            shown["errorPages"] = self.error_pages.to_json()
        if self.strip_trailing_slash:
            shown["stripTrailingSlash"] = True
        return shown


@dataclass(frozen=True, slots=True)
class Canary:
    """
    A canary: another Ingress's backend that takes some of a route's requests; its route and how
    requests are chosen for it.

    The decision is ingress-nginx's (its balancer's C{route_to_alternative_balancer},
    documented under "Canary" on its annotations page), in its order of precedence:

      1. the header C{by_header}: equal to C{header_value} when one is set, else
         matching C{header_pattern} (searched, not anchored) when one is set, else
         C{always} → canary, C{never} → main; any other value falls through;
      2. the cookie C{by_cookie}: C{always} → canary, C{never} → main;
      3. the weight: a roll from 1 to C{weight_total} at or below C{weight} → canary.

    A canary route is its main route with the canary's name and upstream: every
    other policy of the main route applies to it ("all the other non-canary
    annotations will be ignored (inherited from the corresponding main ingress)
    except load-balance, upstream-hash-by, and annotations related to session
    affinity", which are the canary's own).  With session affinity a client stays
    with the side whose sticky cookie it carries (C{affinity-canary-behavior:
    sticky}, the default): the main's cookie keeps it on the main route, the
    canary's on the canary.
    """

    route: Route
    by_header: bytes = b""  # lower-case field name
    header_value: bytes = b""
    header_pattern: Optional[re.Pattern[bytes]] = None
    by_cookie: str = ""
    weight: int = 0
    weight_total: int = 100
    main_tag: str = ""  # the main upstream's tag in sticky cookies (see L{ingress.routing.policies.affinity})
    sticky: bool = True  # affinity-canary-behavior: sticky (the default) or legacy (affinity ignored)

    def chosen(self, header: Optional[bytes], cookie: Optional[str], roll: int) -> bool:
        """
        Whether a request goes to the canary: C{header} and C{cookie} are the
        request's values of C{by_header} and C{by_cookie} (None when absent),
        C{roll} a uniform integer from 1 to C{weight_total}.
        """
        if header is not None:
            if self.header_value:
                if header == self.header_value:
                    return True
            elif self.header_pattern is not None:
                if self.header_pattern.search(header):
                    return True
            elif header == b"always":
                return True
            elif header == b"never":
                return False
        if cookie is not None:
            if cookie == "always":
                return True
            if cookie == "never":
                return False
        return roll <= self.weight

    def to_json(self) -> dict[str, object]:
        """The canary, for /debug/routes."""
        shown: dict[str, object] = {"route": self.route.name, "upstream": self.route.upstream.key, "weight": f"{self.weight}/{self.weight_total}"}
        if self.by_header:
            shown["header"] = self.by_header.decode("latin-1")
            if self.header_value:
                shown["headerValue"] = self.header_value.decode("latin-1")
            elif self.header_pattern is not None:
                shown["headerPattern"] = self.header_pattern.pattern.decode("latin-1")
        if self.by_cookie:
            shown["cookie"] = self.by_cookie
        return shown


@dataclass(frozen=True, slots=True)
class WeightedBackends:
    """
    A rule's backends with weights (Gateway API backendRefs): each request goes to one of them, in
    proportion to its weight; C{routes[i]} (None: answered 500) takes C{weights[i]} of
    C{sum(weights)} requests.

    A backend that cannot be used (a Service that does not exist, a reference no
    ReferenceGrant allows, an unsupported kind) keeps its share of the requests and
    answers them 500, as the Gateway API asks ("requests that would have been sent to
    that backend MUST receive a 500 status code"); a rule whose every weight is 0
    answers everything 500.  The choice is one random draw against the running sums.
    """

    routes: tuple[Optional[Route], ...]
    weights: tuple[int, ...]
    unusable_status: int = 500  # what a share without a usable backend answers (GRPCRoute: 503, UNAVAILABLE to gRPC)
    running: tuple[int, ...] = ()  # the running sums of the weights, made once

    def __post_init__(self) -> None:
        total, running = 0, []
        for weight in self.weights:
            total += weight
            running.append(total)
        object.__setattr__(self, "running", tuple(running))

    def pick(self, draw: Optional[int] = None) -> Optional[Route]:
        """The route for one request (C{draw}: a number in [0, total), random when not given); None: answer 500."""
        total = self.running[-1] if self.running else 0
        if total <= 0:
            return None
        if draw is None:
            draw = random.randrange(total)
        return self.routes[bisect.bisect_right(self.running, draw)]

    def to_json(self) -> list[dict[str, object]]:
        """For /debug/routes."""
        return [
            {"upstream": route.upstream.key if route is not None else None, "weight": weight}
            for route, weight in zip(self.routes, self.weights, strict=True)
        ]
