# -*- test-case-name: tests.unit.test_exchange_direct -*-
"""
What routing decided, made final for one request before its exchange applies it: the client
certificate's check (auth-tls-*) and the denials counted; and a route's limits over the defaults.

L{ingress.proxy.http.exchange.Exchange.run} asks L{admitted} once a request's head is read, and
applies what it returns (a L{Routed}: answer it, or go on with its route, head and limits): these
are values, the exchange's state is the exchange's to write.
"""

from __future__ import annotations

from typing import Any

from ingress.observe.metrics import NO_ROUTE, Metrics
from ingress.proxy.http import h1
from ingress.proxy.http.forwarding import ForwardedFor
from ingress.proxy.http.routed import Routed, route_request
from ingress.proxy.http.settings import ProxySettings
from ingress.proxy.http.steps import certificate_check
from ingress.proxy.tls.sni import tls_server_name
from ingress.routing.policies import Limits
from ingress.routing.table import RoutingTable


def admitted(table: RoutingTable, head: h1.Head, forwarded: ForwardedFor, settings: ProxySettings, transport: Any, metrics: Metrics) -> Routed:
    """C{head} routed for C{forwarded} (over C{transport}: its SNI name, its client certificate), denials counted."""
    server_name = tls_server_name(transport) if table.https_listeners is not None else None
    routed = route_request(table, head, forwarded, settings.https_redirect_port, server_name)
    route = routed.route
    if routed.status:
        if routed.denied:
            metrics.denied.labels(routed.denied, route.name if route is not None else NO_ROUTE).inc()
        return routed
    auth = route.policies.client_auth if route is not None and route.policies is not None else None
    if auth is not None:
        status, head_bytes = certificate_check(auth, transport, routed.head_bytes)
        if status:
            assert route is not None
            metrics.denied.labels("client-certificate", route.name).inc()
            page = auth.error_page
            refused = Routed(302, page.encode("latin-1"), route) if status == 400 and page else Routed(status, route=route)  # error_page 495 496 = URL
            return refused
        routed.head_bytes = head_bytes
    return routed


def limited(limits: Limits, max_body: int, connect: float, read: float, send: float) -> tuple[int, float, float, float]:
    """
    The request's body limit and timeouts (body, connect, read, send): its route's where the route
    sets them.  With deadlines, the waits for the backend are raised to the longest deadline where
    they are shorter, so that --upstream-timeout does not end a request sooner than the route
    allows (the deadlines end it).
    """
    max_body = limits.max_body_bytes if limits.max_body_bytes is not None else max_body
    connect = limits.connect_timeout if limits.connect_timeout is not None else connect
    read = limits.read_timeout if limits.read_timeout is not None else read
    send = limits.send_timeout if limits.send_timeout is not None else send
    deadlines = limits.deadlines
    if deadlines is not None:
        read, send = max(read, deadlines.longest), max(send, deadlines.longest)
    return max_body, connect, read, send
