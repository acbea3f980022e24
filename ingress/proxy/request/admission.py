# -*- test-case-name: tests.proxy.test_policies -*-
"""
What routing decided, applied to one exchange: answered here, refused, or admitted with its
route's limits and past the client-certificate check.

Both framings call L{route_and_admit} once a request's head is read, and go on to the guards
with what it returns: the last step before a request can wait for a verdict or go upstream.
Kept apart from L{ingress.proxy.request.exchange}, whose code is what every admitted request runs
after it.
"""

from __future__ import annotations

from typing import Any, Optional

from ingress.proxy.message import h1
from ingress.proxy.request.deadlines import RequestDeadlines
from ingress.proxy.request.exchange import Exchange
from ingress.proxy.request.routed import Routed, route_request
from ingress.proxy.request.steps import ResponseFields, certificate_check
from ingress.proxy.tls.sni import tls_server_name
from ingress.routing.policies import Limits
from ingress.routing.table import RoutingTable


def route_and_admit(exchange: Exchange, table: RoutingTable, head: h1.Head, transport: Any) -> Optional[Routed]:
    """The request routed (for C{exchange.forwarded}) and the decision applied: what to go on with, None if answered here."""
    server_name = tls_server_name(transport) if table.https_listeners is not None else None
    routed = route_request(table, head, exchange.forwarded, exchange.settings.https_redirect_port, server_name)
    return routed if admit(exchange, routed) else None


def admit(exchange: Exchange, routed: Routed) -> bool:
    """False when the request was answered (or refused) here: by routing, or for its client certificate."""
    route = exchange.route = routed.route
    if routed.status:
        if routed.denied:
            exchange.shared.metrics.denied.labels(routed.denied, exchange.route_name()).inc()
        if routed.refused:
            exchange.client.refuse(routed.status, routed.detail)
        else:
            exchange.answer(routed.status, location=routed.location, fields=routed.fields)
        return False
    if routed.limits is not None:
        apply_limits(exchange, routed.limits)
    exchange.head_bytes = routed.head_bytes
    exchange.fields = ResponseFields(routed.fields) if routed.fields else None
    policies = route.policies if route is not None else None
    if policies is not None and policies.client_auth is not None:
        status, head_bytes = certificate_check(policies.client_auth, exchange.client.transport, exchange.head_bytes)
        if status:
            exchange.shared.metrics.denied.labels("client-certificate", exchange.route_name()).inc()
            page = policies.client_auth.error_page
            if status == 400 and page:
                exchange.answer(302, location=page.encode("latin-1"))  # error_page 495 496 = URL
            else:
                exchange.answer(status)
            return False
        exchange.head_bytes = head_bytes
    return True


def apply_limits(exchange: Exchange, limits: Limits) -> None:
    """The request's timeouts and body limit are its route's where the route sets them."""
    if limits.max_body_bytes is not None:
        exchange.max_body = limits.max_body_bytes
    if limits.connect_timeout is not None:
        exchange.connect_timeout = limits.connect_timeout
    if limits.read_timeout is not None:
        exchange.read_timeout = limits.read_timeout
    if limits.send_timeout is not None:
        exchange.send_timeout = limits.send_timeout
    deadlines = limits.deadlines
    if deadlines is not None:
        # The waits for the backend are raised to the longest deadline where they are shorter, so that
        # --upstream-timeout does not end a request sooner than the route allows (the deadlines end it).
        exchange.read_timeout = max(exchange.read_timeout, deadlines.longest)
        exchange.send_timeout = max(exchange.send_timeout, deadlines.longest)
        exchange.deadlines = RequestDeadlines(exchange.shared.reactor, exchange.deadline_passed)
        exchange.deadlines.start(deadlines)
