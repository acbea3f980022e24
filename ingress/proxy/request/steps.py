# -*- test-case-name: tests.proxy.test_policies -*-
"""
What a request's policies add between routing and the upstream exchange: the fields a
response gets (a sticky cookie, CORS, an auth service's cookie), an auth service's
limit-connections place, and the client certificate's check (auth-tls-*).

L{ResponseFields} is the state of one request's policies: an
L{ingress.proxy.request.exchange.Exchange} makes one only when its route has policies or
fields to add, so a request without them carries none.
"""

from __future__ import annotations

from typing import Any, Optional

from ingress.proxy.request.extauth import Verdict
from ingress.proxy.request.guards import Guards
from ingress.proxy.tls.clientcerts import peer_certificate, with_client_fields
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.policies.extauth import ADD_HEADER_CODES
from ingress.routing.table import Route


class ResponseFields:
    """A request's fields for its response, and the limit-connections place it holds."""

    __slots__ = ("set_cookie", "always", "auth_cookies", "hold")

    def __init__(self, always: bytes) -> None:
        self.set_cookie = b""  # the sticky-session cookie of a newly chosen endpoint
        self.always = always  # fields routing adds to every response (CORS)
        self.auth_cookies = b""  # an auth service's Set-Cookie fields, for the responses nginx's add_header reaches
        self.hold: Optional[tuple[str, str]] = None  # limit-connections: the place this request holds

    def added(self, status: int) -> bytes:
        """The fields a response of C{status} gets."""
        added = self.set_cookie + self.always if self.always else self.set_cookie
        if self.auth_cookies and status in ADD_HEADER_CODES:
            added += self.auth_cookies  # nginx's add_header: on these statuses only
        return added

    def take_verdict(self, verdict: Verdict, route: Optional[Route]) -> None:
        """An auth service let the request through: its cookie goes to the client, its place is held."""
        self.hold = verdict.hold
        if verdict.cookies:
            external = route.policies.external_auth if route is not None and route.policies is not None else None
            if external is not None and external.always_set_cookie:
                self.always += verdict.cookies  # nginx's add_header ... always: on every response
            else:
                self.auth_cookies = verdict.cookies

    def release(self, guards: Guards) -> None:
        """The request is over: its place under limit-connections is free again."""
        hold, self.hold = self.hold, None
        if hold is not None:
            guards.leave(hold)


def certificate_check(auth: ClientAuth, transport: Any, head_bytes: bytes) -> tuple[int, bytes]:
    """
    auth-tls-*: (0, the upstream head with the certificate's fields) when the client's
    certificate lets the request on, else (the status to answer, b"").
    """
    peer = peer_certificate(transport)
    status = peer.refusal(auth.verify)
    if not status and auth.match_cn is not None and not auth.match_cn.search(peer.subject):
        status = 403  # ingress-nginx: return 403 "client certificate unauthorized"
    if status:
        return status, b""
    return 0, with_client_fields(head_bytes, peer.fields(auth))
