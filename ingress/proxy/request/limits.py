# -*- test-case-name: tests.proxy.test_policies -*-
"""
A request's limits and the waits its exchange sets on its client side's timer: L{RequestLimits}.

The body limit, the connect, read (the upstream's answer), send (the upstream taking the
request) and client-body timeouts.  A client connection makes one from its settings, which
every request on a route without limits shares (nothing allocated per request); a route's
limits make one of the request's own (L{RequestLimits.with_route}), an
L{ingress.proxy.request.exchange.Exchange}'s collaborator that decides which wait runs.
"""

from __future__ import annotations

from ingress.proxy.idle import Deadline
from ingress.proxy.request.settings import ProxySettings
from ingress.routing.policies import Limits


class RequestLimits:
    """The limits of a request, and the wait each of its phases puts on a timer (body, upstream, send)."""

    __slots__ = ("max_body", "connect_timeout", "read_timeout", "send_timeout", "body_timeout")

    def __init__(self, max_body: int, connect_timeout: float, read_timeout: float, send_timeout: float, body_timeout: float) -> None:
        self.max_body = max_body
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.send_timeout = send_timeout
        self.body_timeout = body_timeout  # between two reads of a request body, as nginx's client_body_timeout

    @staticmethod
    def of(settings: ProxySettings) -> RequestLimits:
        """A listener's limits, from its settings (once per client connection)."""
        timeout = settings.upstream_timeout
        return RequestLimits(settings.max_body_bytes, settings.connect_timeout, timeout, timeout, settings.client_body_timeout)

    def with_route(self, limits: Limits) -> RequestLimits:
        """
        A route's limits where it sets them, these elsewhere.  The waits for the backend are raised to the
        route's longest deadline where they are shorter, so that --upstream-timeout does not end a request
        sooner than the route allows (the deadlines end it).
        """
        read = self.read_timeout if limits.read_timeout is None else limits.read_timeout
        send = self.send_timeout if limits.send_timeout is None else limits.send_timeout
        if limits.deadlines is not None:
            longest = limits.deadlines.longest
            read, send = max(read, longest), max(send, longest)
        return RequestLimits(
            self.max_body if limits.max_body_bytes is None else limits.max_body_bytes,
            self.connect_timeout if limits.connect_timeout is None else limits.connect_timeout,
            read,
            send,
            self.body_timeout,
        )

    def touch(self, timer: Deadline) -> None:
        """Progress was made: the body or upstream wait is pushed out by its full length again."""
        kind = timer.kind
        if kind == "upstream":
            timer.push(self.read_timeout)
        elif kind == "body":
            timer.push(self.body_timeout)

    def write_paused(self, timer: Deadline, paused: bool, reading_body: bool) -> None:
        """While the upstream takes none of the request, the send timeout runs (nginx's proxy_send_timeout)."""
        if paused:
            timer.set(self.send_timeout, "send")
        elif reading_body:
            timer.set(self.body_timeout, "body")
        elif timer.kind == "send":
            timer.set(self.read_timeout, "upstream")
