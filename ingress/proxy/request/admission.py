# -*- test-case-name: tests.proxy.test_policies -*-
"""
Admission: a request's head routed against the table its client reached, and checked for its
client certificate where the route asks for one.

L{ingress.proxy.request.exchange.Exchange.run} asks L{route_for} once a request's head is read, and
takes the L{Routed} decision it returns (an answer of its own, a refusal, or the route with its
upstream head and limits).  Pure of the exchange: what it decides, the exchange applies to itself.
"""

from __future__ import annotations

from typing import Any

from ingress.proxy.message import h1
from ingress.proxy.request.forwarding import ForwardedFor
from ingress.proxy.request.routed import Routed, route_request
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.steps import certificate_check
from ingress.proxy.tls.sni import tls_server_name
from ingress.routing.table import RoutingTable


def route_for(table: RoutingTable, head: h1.Head, forwarded: ForwardedFor, settings: ProxySettings, transport: Any) -> Routed:
    """The request routed for C{forwarded}, and refused (403, or a redirect to an error page) if its client certificate does not pass."""
    server_name = tls_server_name(transport) if table.https_listeners is not None else None
    routed = route_request(table, head, forwarded, settings.https_redirect_port, server_name)
    route = routed.route
    client_auth = route.policies.client_auth if not routed.status and route is not None and route.policies is not None else None
    if client_auth is not None:
        status, head_bytes = certificate_check(client_auth, transport, routed.head_bytes)
        routed.head_bytes = head_bytes
        if status:
            routed.status, routed.denied, routed.fields = status, "client-certificate", b""
            if status == 400 and client_auth.error_page:
                routed.status, routed.location = 302, client_auth.error_page.encode("latin-1")  # error_page 495 496 = URL
    return routed
