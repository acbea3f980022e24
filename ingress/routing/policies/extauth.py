# -*- test-case-name: tests.unit.test_external_auth -*-
"""
External authentication of a route (ingress-nginx's "External Authentication": auth-url).

Before a request goes upstream the proxy asks another HTTP service whether it may
(nginx's auth_request, as ingress-nginx configures it): a 2xx lets it through, with
the fields C{auth-response-headers} names copied from the answer onto the request;
401 and 403 go back to the client (a 401 as a redirect to C{auth-signin} when the
route has one); any other answer, or none in time, is a 500.  The URL, the sign-in
URL, the cache key and the values of C{auth-proxy-set-headers} are nginx strings
(L{ingress.routing.policies.variables}), filled in per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ingress.routing.policies.variables import Part

ADD_HEADER_CODES = frozenset({200, 201, 204, 206, 301, 302, 303, 304, 307, 308})
"""The responses nginx's C{add_header} adds to without C{always}: where the auth service's cookie goes by default."""

CacheRule = tuple[Optional[frozenset[int]], float]
"""The statuses (None: any) whose answers are kept, and for how many seconds (nginx's proxy_cache_valid)."""


@dataclass(frozen=True, slots=True)
class ExternalAuth:
    """One route's auth service and what crosses between it, the client and the upstream."""

    url: tuple[Part, ...]
    source: str  # auth-url as written (for /debug/routes and the logs)
    method: str = ""  # auth-method; "" sends GET (nginx's subrequests are GETs) without X-Original-URI and X-Scheme
    signin: tuple[Part, ...] = ()  # auth-signin with its redirect parameter; () answers 401 itself
    response_headers: tuple[str, ...] = ()  # copied from a 2xx answer onto the request (the client's own dropped)
    request_redirect: str = ""  # X-Auth-Request-Redirect; "" sends the request's URI
    proxy_set_headers: tuple[tuple[str, tuple[Part, ...]], ...] = ()  # auth-proxy-set-headers' ConfigMap
    cache_key: tuple[Part, ...] = ()  # () caches nothing
    cache_rules: tuple[CacheRule, ...] = ()
    always_set_cookie: bool = False

    def cache_seconds(self, status: int) -> float:
        """How long an answer with C{status} is kept (0: not kept); the first rule naming it wins, as in nginx."""
        for statuses, seconds in self.cache_rules:
            if statuses is None or status in statuses:
                return seconds
        return 0.0

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"url": self.source, "method": self.method or "GET"}
        if self.signin:
            shown["signin"] = "".join(value if kind == "text" else f"${value}" for kind, value in self.signin)
        if self.response_headers:
            shown["responseHeaders"] = list(self.response_headers)
        if self.cache_key:
            shown["cached"] = True
        return shown
