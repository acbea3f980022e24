# -*- test-case-name: tests.proxy.test_policies -*-
"""
One request's routing decision, shared by HTTP/1.1 and HTTP/2.

Both framings turn a request into an L{h1.Head} and ask L{route_request}:
the table's match, the HTTPS redirect, the policies that answer locally
(deny, redirects, app-root), the canary, the route's limits and the head
that goes upstream.  Only what they do with the answer differs (an HTTP/1.1
response and maybe a close, or a response on one HTTP/2 stream).
"""

from __future__ import annotations

import re
from functools import partial
from typing import Final, Optional

from ingress.proxy.message import h1
from ingress.proxy.message.fields import field_value
from ingress.proxy.message.target import host_and_path, routing_host
from ingress.proxy.request import requestid
from ingress.proxy.request.errorpages import fallback_head
from ingress.proxy.request.forwarding import ForwardedFor, request_head_bytes
from ingress.proxy.request.policy import canary_route, https_location, local_answer, upstream_head
from ingress.routing.lookup import match as match_route
from ingress.routing.policies import Limits
from ingress.routing.policies.block import GlobalBlock
from ingress.routing.route import Route
from ingress.routing.table import RoutingTable

HTTP2: Final = (2, 0)
_AUTHORIZATION: Final = re.compile(rb"^authorization:[^\r\n]*\r\n", re.MULTILINE | re.IGNORECASE)


class Routed:
    """
    What routing decided: forward (C{status} 0: C{route}, C{head_bytes}, C{limits}),
    answer here (C{status}, maybe a C{location}; C{denied} names the access guard that
    refused it), or refuse a request that cannot mean anything (C{refused}: a 4xx counted
    as malformed, C{detail} for the log).
    """

    __slots__ = ("status", "location", "refused", "detail", "route", "head_bytes", "limits", "denied", "fields")

    def __init__(self, status: int = 0, location: bytes = b"", route: Optional[Route] = None, refused: bool = False, detail: str = "") -> None:
        self.status = status
        self.location = location
        self.refused = refused
        self.detail = detail
        self.route = route
        self.head_bytes = b""
        self.limits: Optional[Limits] = None
        self.denied = ""  # the reason an access guard refused the request (twingress_http_denied_total)
        self.fields = b""  # response fields the policies add (CORS), CRLF-terminated lines


def route_request(table: RoutingTable, head: h1.Head, forwarded: ForwardedFor, redirect_port: Optional[int], server_name: Optional[str] = None) -> Routed:
    """
    Route C{head} against C{table} and apply its route's policies, in their fixed order.  C{server_name}:
    the TLS connection's SNI name, read by the caller where the table has Gateway HTTPS listeners.
    """
    if table.blocked is not None:  # ingress-nginx's global filters: block-cidrs, block-user-agents, block-referers
        refused = _blocked(table.blocked, head, forwarded.ip)
        if refused:
            blocked = Routed(403)
            blocked.denied = refused
            return blocked
    if head.method == b"CONNECT":
        return Routed(405, refused=True, detail="CONNECT is not proxied")
    if table.request_ids:
        requestid.tag(head)
    try:
        host, path = host_and_path(head)
    except h1.HTTPError as error:
        return Routed(error.status, refused=True, detail=error.detail)
    if server_name is not None and table.https_listeners is not None and table.https_listeners.misdirected(server_name, routing_host(host)):
        return Routed(421)  # another HTTPS listener's host on this connection (a coalesced HTTP/2 connection)
    route = match_route(table, routing_host(host), path)
    if route is None:
        return Routed(404)
    if route.choices:  # Gateway API: the first candidate whose method, headers and query match
        route = route.choose(forwarded.scheme, head.method, partial(field_value, head.block), head.target)
        if route is None:
            return Routed(404)
    if route.redirect_https and forwarded.scheme == b"http":
        return Routed(route.https_redirect_code, https_location(redirect_port, host, head.target, route), route)
    policies = route.policies
    if policies is None:
        routed = Routed(route=route)
        routed.head_bytes = request_head_bytes(head, forwarded, host)
        return routed
    answer = local_answer(policies, forwarded.scheme, host, path, head.target)
    if answer is not None:
        local = Routed(answer[0], answer[1], route)
        if policies.deny is not None:
            local.denied = "closed"  # a guard twingress cannot enforce closed the route
        return local
    fields = b""
    if policies.cors is not None:
        lookup = partial(field_value, head.block)
        fields = policies.cors.fields_for(lookup(b"origin"), lookup)
        if policies.cors.answers_preflight(head.method, lookup, fields):
            preflight = Routed(204, route=route)  # ingress-nginx's "return 204": nginx's rewrite phase, before access
            preflight.fields = fields
            return preflight
    if policies.source_ranges is not None and not policies.satisfy_any and not policies.source_ranges.permits(forwarded.ip):
        denied = Routed(403, route=route)
        denied.denied = "source-range"
        return denied
    if policies.canary is not None:
        route = canary_route(policies.canary, head, policies.affinity) or route
    upstream_policies = policies
    if policies.backends is not None:  # Gateway API backendRefs with weights; an unusable one answers 500
        picked = policies.backends.pick()
        if picked is None:
            return Routed(policies.backends.unusable_status, route=route)
        route = picked
        upstream_policies = picked.policies or policies  # a backendRef's own header changes are on its route
    if route.policies is not None and route.policies.backend_http2 and head.version < HTTP2:
        return Routed(426, route=route)  # HTTP/2 to the endpoints (gRPC) needs an HTTP/2 client
    routed = Routed(route=route)
    routed.fields = fields
    routed.limits = policies.limits
    routed.head_bytes = upstream_head(upstream_policies, head, forwarded, host, path)
    if policies.basic_auth is not None:  # the credentials stay here (ingress-nginx: proxy_set_header Authorization "")
        routed.head_bytes = _AUTHORIZATION.sub(b"", routed.head_bytes)
    if policies.error_pages is not None and policies.error_pages.fallback:  # ingress-nginx's custom-default-backend upstream
        routed.head_bytes = fallback_head(policies.error_pages, routed.head_bytes, head)
    return routed


def _blocked(block: GlobalBlock, head: h1.Head, ip: str) -> str:
    """Which global filter refuses the request, or ""; the fields are read only when a filter needs them."""
    user_agent = field_value(head.block, b"user-agent") if block.user_agents else None
    referer = field_value(head.block, b"referer") if block.referers else None
    return block.refuses(
        ip,
        user_agent.decode("latin-1") if user_agent is not None else None,
        referer.decode("latin-1") if referer is not None else None,
    )
