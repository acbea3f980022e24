# -*- test-case-name: tests.proxy.test_policies -*-
"""
The policy steps of a request that sit between routing and the upstream exchange, shared by
HTTP/1.1 connections and HTTP/2 streams: the client certificate (auth-tls-*), what an auth service's
verdict changes (its fields upstream, its cookie back, a limit-connections place held), the fields a
response gets, and error pages (custom-http-errors) in place of a response.

L{PolicySteps} is the base of L{ingress.proxy.http.relay.UpstreamRelay}; like it, it names the
request state it shares as annotations and the methods of the other halves it calls as stubs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ingress.proxy.http import h1
from ingress.proxy.http.errorpages import error_request_head
from ingress.proxy.http.extauth import Verdict
from ingress.proxy.http.forwarding import ForwardedFor
from ingress.proxy.tls.clientcerts import peer_certificate, with_client_fields
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.policies.extauth import ADD_HEADER_CODES

if TYPE_CHECKING:
    from ingress.proxy.http.factory import HTTPProxyFactory
    from ingress.proxy.http.upstream import Address
    from ingress.routing.table import Route


class PolicySteps:
    """Client certificates, auth verdicts, response fields and error pages for the request being served."""

    factory: HTTPProxyFactory
    _request: Optional[h1.Head]
    _route: Optional[Route]
    _head_bytes: bytes
    _responded: bool
    _request_complete: bool
    _pending: list[bytes]
    _pending_size: int
    _tried: Optional[Address]
    _set_cookie: bytes
    _response_fields: bytes
    _auth_cookies: bytes
    _conn_hold: Optional[tuple[str, str]]
    _error_code: int  # the status an error backend is being asked to answer for (custom-http-errors), else 0
    _forwarded: ForwardedFor

    def _answer_locally(self, status: int, close: bool = False, location: bytes = b"", fields: bytes = b"") -> None: ...

    def _route_name(self) -> str:
        raise NotImplementedError

    def _client_transport(self) -> Any: ...

    def _drop_upstream(self) -> None: ...

    def _dispatch(self) -> None: ...

    def _error_page_taken(self, status: int, upstream_sent: bool) -> bool:
        """
        custom-http-errors: a response of C{status} is replaced by the error backend's answer (or,
        without one, by this proxy's page for an upstream's response; True), else left alone (False).
        A request whose body has not all been sent upstream gets this proxy's page, and the connection closes.
        """
        route, request = self._route, self._request
        policies = route.policies if route is not None else None
        pages = policies.error_pages if policies is not None and not policies.backend_http2 else None  # gRPC keeps its statuses
        if pages is None or request is None or self._error_code or self._responded or not pages.replaces(status, upstream_sent):
            return False
        if pages.backend is None or not self._request_complete:
            if not upstream_sent:
                return False  # this proxy's own page is what the caller answers anyway
            self._drop_upstream()
            self._answer_locally(status, close=not self._request_complete)
            return True
        self._drop_upstream()
        self._error_code = status
        self._head_bytes = error_request_head(pages, status, request, self._forwarded.ip)
        self._pending, self._pending_size, self._tried = [], 0, None
        self._dispatch()
        return True

    def _take_verdict(self, verdict: Verdict) -> None:
        """An auth service let the request through: its fields go upstream, its cookie to the client."""
        self._head_bytes = verdict.applied_to(self._head_bytes)
        self._conn_hold = verdict.hold
        if verdict.cookies:
            external = self._route.policies.external_auth if self._route is not None and self._route.policies is not None else None
            if external is not None and external.always_set_cookie:
                self._response_fields += verdict.cookies  # nginx's add_header ... always: on every response
            else:
                self._auth_cookies = verdict.cookies

    def _client_certificate_passes(self, auth: ClientAuth) -> bool:
        """auth-tls-*: whether the connection's certificate lets the request on (else it was answered here)."""
        peer = peer_certificate(self._client_transport())
        status = peer.refusal(auth.verify)
        if not status and auth.match_cn is not None and not auth.match_cn.search(peer.subject):
            status = 403  # ingress-nginx: return 403 "client certificate unauthorized"
        if status:
            self.factory.metrics.denied.labels("client-certificate", self._route_name()).inc()
            if status == 400 and auth.error_page:
                self._answer_locally(302, location=auth.error_page.encode("latin-1"))  # error_page 495 496 = URL
            else:
                self._answer_locally(status)
            return False
        self._head_bytes = with_client_fields(self._head_bytes, peer.fields(auth))
        return True

    def _release_hold(self) -> None:
        """The request is over: its place under limit-connections is free again."""
        hold, self._conn_hold = self._conn_hold, None
        if hold is not None:
            self.factory.guards.leave(hold)

    def _added_fields(self, status: int) -> bytes:
        """The fields the route's policies add to a response of C{status}: a sticky cookie, CORS, an auth service's cookie."""
        added = self._set_cookie + self._response_fields if self._response_fields else self._set_cookie
        if self._auth_cookies and status in ADD_HEADER_CODES:
            added += self._auth_cookies  # nginx's add_header: on these statuses only
        return added
