# -*- test-case-name: tests.proxy.test_policies -*-
"""
A route's policies applied to one request, in the fixed order of L{ingress.routing.policies}.

Only requests whose route has policies come here (the connection checks
C{route.policies is None} once), so a route without any pays nothing.
"""

from __future__ import annotations

import random
from typing import Optional

from ingress.proxy.message import h1
from ingress.proxy.message.fields import cookie_value, field_value
from ingress.proxy.message.target import origin_form
from ingress.proxy.request.affinity import sticky_endpoint
from ingress.proxy.request.forwarding import ForwardedFor, request_head_bytes
from ingress.proxy.request.shared import Shared
from ingress.proxy.request.upstream import Address, UpstreamPool
from ingress.proxy.request.variables import expand
from ingress.routing.policies import EWMA, Affinity
from ingress.routing.policies.affinity import rendezvous, rendezvous_top, upstream_tag
from ingress.routing.policies.hashing import HashBy
from ingress.routing.route import Canary, Policies, Route
from ingress.routing.upstream import Upstream


def local_answer(policies: Policies, scheme: bytes, host: str, path: str, target: bytes = b"/") -> Optional[tuple[int, bytes]]:
    """
    The status and Location the proxy answers itself, or None to forward the request.

    A relative redirect is made absolute with the request's host without its
    port (nginx's C{return} with C{port_in_redirect off}, as ingress-nginx runs
    it); C{app-root} answers C{/} alone with 302 to the same host as sent
    (ingress-nginx: C{return 302 $scheme://$http_host<app-root>}).
    """
    if policies.deny is not None:
        return policies.deny.status, b""
    if policies.redirect is not None:
        bare_host = h1.host_without_port(host.encode("latin-1")).decode("latin-1")
        return policies.redirect.code, policies.redirect.location_for(scheme, bare_host, origin_form(target), path)
    if policies.app_root and path == "/":
        return 302, b"%s://%s%s" % (scheme, host.encode("latin-1"), policies.app_root.encode("latin-1"))
    return None


def https_location(port: Optional[int], host: str, target: bytes, route: Route) -> bytes:
    """
    The same resource on the HTTPS listener (C{port}: --https-redirect-port; 443 is left out), the
    path as the client spelled it, less one trailing "/" with C{preserve-trailing-slash: "false"}.
    """
    authority = h1.host_without_port(host.encode("latin-1"))
    if port is not None and port != 443:
        authority += b":%d" % port
    resource = origin_form(target)
    if route.policies is not None and route.policies.strip_trailing_slash and resource.endswith(b"/"):
        resource = resource[:-1]  # ingress-nginx drops the last byte of $request_uri if it is "/"
    return b"https://%s%s" % (authority, resource)


def canary_route(canary: Canary, request: h1.Head, affinity: Optional[Affinity] = None) -> Optional[Route]:
    """
    The canary's route when this request goes to the canary (header, then cookie, then weight), else None.

    A client that carries the main route's sticky cookie (C{affinity}) stays on the main route, and
    one that carries the canary's stays on the canary, before any rule is asked (ingress-nginx's
    balancer checks both affinities first; C{affinity-canary-behavior: legacy} turns the canary's off).
    """
    if affinity is not None:
        value = cookie_value(request.block, affinity.cookie)
        if value is not None and value.partition("|")[2] == canary.main_tag:
            return None
    canary_policies = canary.route.policies
    own = canary_policies.affinity if canary_policies is not None else None
    if own is not None and canary.sticky:
        value = cookie_value(request.block, own.cookie)
        if value is not None and value.partition("|")[2] == upstream_tag(canary.route.upstream.key):
            return canary.route
    header = field_value(request.block, canary.by_header) if canary.by_header else None
    cookie = cookie_value(request.block, canary.by_cookie) if canary.by_cookie else None
    roll = random.randint(1, canary.weight_total) if canary.weight else canary.weight_total + 1
    return canary.route if canary.chosen(header, cookie, roll) else None


def upstream_head(policies: Policies, request: h1.Head, forwarded: ForwardedFor, host: str, path: str) -> bytes:
    """The head the upstream receives, with the route's rewrite, Host and X-Forwarded-Prefix."""
    rewrite = policies.rewrite
    if rewrite is None:
        return request_head_bytes(request, forwarded, host, None, policies.upstream_host, policies.forwarded_prefix, policies.request_headers)
    query = origin_form(request.target).partition(b"?")[2]
    target = rewrite.target_for(path, query)
    return request_head_bytes(request, forwarded, host, target, policies.upstream_host, rewrite.prefix, policies.request_headers)


def hash_key(hash_by: HashBy, request: h1.Head, client_ip: str) -> str:
    """The key of C{upstream-hash-by} for a request: its text and nginx variables, filled in."""
    return expand(hash_by.parts, request, client_ip)


def hashed_endpoint(hash_by: HashBy, upstream: Upstream, request: h1.Head, client_ip: str, pool: UpstreamPool, exclude: Optional[Address]) -> Optional[Address]:
    """The endpoint of the request's key among those not failing (consistent while the endpoints stay)."""
    usable = [target for target in upstream.targets if target != exclude and not pool.is_down(target)]
    key = hash_key(hash_by, request, client_ip)
    if hash_by.subset_size:
        subset = rendezvous_top(key, usable, hash_by.subset_size)
        return random.choice(subset) if subset else pool.choose(upstream, exclude)
    return rendezvous(key, usable) or pool.choose(upstream, exclude)


def endpoint_for(
    route: Route, request: Optional[h1.Head], client_ip: str, shared: Shared, tried: Optional[Address], error_code: int
) -> tuple[Optional[Address], Optional[bytes]]:
    """
    The endpoint of C{route} for a request (never C{tried}), and a sticky cookie to send (else None): the error
    backend's for an error page (C{error_code}: custom-http-errors), else the one its policies pick (L{chosen_endpoint}).
    """
    if error_code:
        pages = route.policies.error_pages if route.policies is not None else None
        assert pages is not None and pages.backend is not None
        return shared.pool.choose(pages.backend, exclude=tried), None
    return chosen_endpoint(route, request, client_ip, shared.pool, tried, shared.scheme == b"https")


def chosen_endpoint(
    route: Route, request: Optional[h1.Head], client_ip: str, pool: UpstreamPool, tried: Optional[Address], https: bool
) -> tuple[Optional[Address], Optional[bytes]]:
    """
    The endpoint a route's policies pick (cookie affinity, then upstream-hash-by, then ewma, else
    round robin), never C{tried}; and, with affinity, the Set-Cookie field to send (else None).
    """
    policies = route.policies
    if policies is not None and policies.affinity is not None and request is not None:
        return sticky_endpoint(policies.affinity, route.upstream, request, pool, tried, https)
    if policies is not None and policies.hash_by is not None and request is not None:
        return hashed_endpoint(policies.hash_by, route.upstream, request, client_ip, pool, tried), None
    if policies is not None and policies.load_balance == EWMA:
        address = pool.ewma.choose(route.upstream.targets, lambda target: target != tried and not pool.is_down(target))
        return address or pool.choose(route.upstream, exclude=tried), None
    return pool.choose(route.upstream, exclude=tried), None
