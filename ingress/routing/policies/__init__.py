# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""
What a route does to a request besides choosing its upstream: the route's policies.

Each kind is a frozen value in a module of its own, built in C{routing/} from
whatever described it (Ingress annotations today, Gateway API filters next) and
applied by the proxy in one fixed order, the order of L{Policies}' fields:

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

from dataclasses import dataclass
from typing import Optional

from ingress.routing.policies.access import SourceRanges
from ingress.routing.policies.affinity import Affinity
from ingress.routing.policies.auth import BasicAuth
from ingress.routing.policies.backend import BackendTLS
from ingress.routing.policies.canary import Canary
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.policies.cors import Cors
from ingress.routing.policies.errorpages import ErrorPages
from ingress.routing.policies.extauth import ExternalAuth
from ingress.routing.policies.hashing import HashBy
from ingress.routing.policies.headers import HeaderChanges
from ingress.routing.policies.limits import Limits
from ingress.routing.policies.mirror import Mirror
from ingress.routing.policies.pathreplace import PathReplace
from ingress.routing.policies.ratelimit import RateLimit
from ingress.routing.policies.redirect import Deny, GatewayRedirect, Redirect
from ingress.routing.policies.retry import Retry
from ingress.routing.policies.rewrite import Rewrite
from ingress.routing.policies.weighted import WeightedBackends

EWMA = "ewma"  # load_balance: two endpoints at random, the faster answering wins (else round robin)

__all__ = [
    "EWMA", "BasicAuth", "Cors", "ErrorPages", "ExternalAuth", "SourceRanges", "Affinity", "BackendTLS", "Canary", "Deny", "HashBy", "HeaderChanges", "Limits", "Mirror",
    "Policies", "RateLimit",
    "Redirect", "Retry", "Rewrite", "WeightedBackends",
]


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
