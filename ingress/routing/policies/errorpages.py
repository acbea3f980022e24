# -*- test-case-name: tests.unit.test_error_pages -*-
"""
Error pages from a Service: ingress-nginx's C{custom-http-errors} with C{default-backend}.

ingress-nginx turns C{custom-http-errors} into nginx's C{proxy_intercept_errors on}
and one C{error_page CODE = @custom_...} per code: a response of one of those
codes (the upstream's, or one nginx made itself, such as a 502 or 504) is
replaced by the answer of the error backend to C{GET /} with the fields of
ingress-nginx's "Custom errors" page (C{X-Code}, C{X-Format}, C{X-Original-URI},
C{X-Namespace}, C{X-Ingress-Name}, C{X-Service-Name}, C{X-Service-Port},
C{X-Request-ID}).  The error backend's status and body reach the client as
they are ("NGINX does not change the response from the custom default backend").

C{default-backend} alone sends the route's requests to that Service while the
route's own has no ready endpoint, with C{X-Code: 503} (ingress-nginx's
"custom-default-backend" upstream); the builder swaps the upstream and sets
C{fallback}.  Without an error backend with endpoints, intercepted codes get
twingress's own page for the same status (ingress-nginx would ask its global
default backend, which twingress does not have; reported when read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ingress.routing.upstream import Upstream


@dataclass(frozen=True, slots=True)
class ErrorPages:
    """Which statuses a route replaces, and who answers them instead."""

    codes: frozenset[int]
    backend: Optional[Upstream]  # the default-backend Service's first port (None: twingress's own page)
    fields: bytes  # X-Namespace, X-Ingress-Name, X-Service-Name, X-Service-Port: CRLF-terminated lines
    intercept: bool = True  # the upstream's responses too (disable-proxy-intercept-errors: only twingress's)
    fallback: bool = False  # the route's Service has no endpoint: its requests go to the default backend

    def replaces(self, status: int, upstream_sent: bool) -> bool:
        """Whether a response of C{status} (sent by the upstream, or made here) is replaced."""
        return status in self.codes and (self.intercept or not upstream_sent)

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"codes": sorted(self.codes), "backend": self.backend.key if self.backend is not None else None}
        if not self.intercept:
            shown["intercept"] = False
        if self.fallback:
            shown["fallback"] = True
        return shown


def static_fields(namespace: str, ingress: str, service: str, port: str) -> bytes:
    """The fields of every error request of a route (ingress-nginx's $namespace, $ingress_name, $service_name, $service_port)."""
    return (f"X-Namespace: {namespace}\r\nX-Ingress-Name: {ingress}\r\nX-Service-Name: {service}\r\nX-Service-Port: {port}\r\n").encode("latin-1")
