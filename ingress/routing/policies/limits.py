# -*- test-case-name: tests.unit.test_rate_limits -*-
"""A route's own timeouts and body size limit, in place of the listener's settings; its deadlines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

UNLIMITED = 1 << 62
"""The body size limit of a route whose limit is off (ingress-nginx's C{proxy-body-size: 0})."""


@dataclass(frozen=True, slots=True)
class Deadlines:
    """
    A Gateway API rule's timeouts (apis/v1/httproute_types.go HTTPRouteTimeouts), in seconds;
    None where the rule sets none of that kind ("0s" disables one, so it is None here too).

    C{request} bounds one request from its routed head to the end of the backend's response,
    retries included; C{backend} each attempt at a backend (BackendRequest), from the attempt's
    start to the backend's whole response.  Either passing answers 504 when no response has
    begun; a response under way is cut (its length was announced or is chunked: a client must
    see it incomplete).
    """

    request: Optional[float] = None
    backend: Optional[float] = None

    @property
    def longest(self) -> float:
        """The proxy's waits (between two reads from the backend, for it to take the body) are raised to this: never shorter than the route allows."""
        return max(self.request or 0.0, self.backend or 0.0)

    def to_json(self) -> dict[str, float]:
        names = (("request", self.request), ("backendRequest", self.backend))
        return {name: value for name, value in names if value is not None}


@dataclass(frozen=True, slots=True)
class Limits:
    """
    Seconds and bytes; None keeps the listener's setting (C{--connect-timeout}, C{--upstream-timeout},
    C{--max-body-size}).

    C{read_timeout} bounds the wait between two reads from the upstream (nginx's
    C{proxy_read_timeout}); C{send_timeout} the wait while the upstream does not
    take the request body we send it (C{proxy_send_timeout}).  C{deadlines}: totals of
    their own, besides these waits (Gateway API timeouts).
    """

    connect_timeout: Optional[float] = None
    read_timeout: Optional[float] = None
    send_timeout: Optional[float] = None
    max_body_bytes: Optional[int] = None
    deadlines: Optional[Deadlines] = None

    def to_json(self) -> dict[str, object]:
        """The limits this route sets, for /debug/routes."""
        names = (
            ("connectTimeout", self.connect_timeout),
            ("readTimeout", self.read_timeout),
            ("sendTimeout", self.send_timeout),
            ("maxBodyBytes", self.max_body_bytes),
        )
        shown: dict[str, object] = {name: value for name, value in names if value is not None}
        if self.deadlines is not None:
            shown["deadlines"] = self.deadlines.to_json()
        return shown
