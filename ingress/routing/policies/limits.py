# -*- test-case-name: tests.unit.test_policies -*-
"""A route's own timeouts and body size limit, in place of the listener's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

UNLIMITED = 1 << 62
"""The body size limit of a route whose limit is off (ingress-nginx's C{proxy-body-size: 0})."""


@dataclass(frozen=True, slots=True)
class Limits:
    """
    Seconds and bytes; None keeps the listener's setting (C{--connect-timeout}, C{--upstream-timeout},
    C{--max-body-size}).

    C{read_timeout} bounds the wait between two reads from the upstream (nginx's
    C{proxy_read_timeout}); C{send_timeout} the wait while the upstream does not
    take the request body we send it (C{proxy_send_timeout}).
    """

    connect_timeout: Optional[float] = None
    read_timeout: Optional[float] = None
    send_timeout: Optional[float] = None
    max_body_bytes: Optional[int] = None

    def to_json(self) -> dict[str, object]:
        """The limits this route sets, for /debug/routes."""
        names = (
            ("connectTimeout", self.connect_timeout),
            ("readTimeout", self.read_timeout),
            ("sendTimeout", self.send_timeout),
            ("maxBodyBytes", self.max_body_bytes),
        )
        return {name: value for name, value in names if value is not None}
