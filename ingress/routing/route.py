# -*- test-case-name: tests.unit.test_routing -*-
"""What a request is routed to: a L{Route} (the Ingress that said so, its options, its L{Upstream})."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ingress.model import ObjectRef
from ingress.routing.policies import Policies
from ingress.routing.policies.matching import FieldLookup, RequestMatch
from ingress.routing.upstream import Upstream


@dataclass(frozen=True, slots=True)
class Route:
    """What a matched request is sent to, and the Ingress that said so (the metrics label)."""

    name: str  # "namespace/ingress"
    source: ObjectRef
    upstream: Upstream
    path: str = ""
    path_type: str = ""
    redirect_https: bool = False  # plain HTTP gets https_redirect_code to https (the host has TLS)
    https_redirect_code: int = 308
    hsts: str = ""  # Strict-Transport-Security value for HTTPS answers
    policies: Optional[Policies] = None  # what the proxy does besides forwarding (None: nothing)
    # Gateway API: the routes of this path in precedence order, each with what else the request must
    # carry; the first that accepts it serves it (none: 404).  Empty for every Ingress route.
    choices: tuple[tuple[RequestMatch, Route], ...] = ()

    def choose(self, scheme: bytes, method: bytes, field: FieldLookup, target: bytes) -> Optional[Route]:
        """The route of C{choices} that serves a request, or None (404)."""
        for match, route in self.choices:
            if match.accepts(scheme, method, field, target):
                return route
        return None
