# -*- test-case-name: tests.unit.test_routing -*-
"""
Where a route's traffic goes: an L{Upstream}.  A module of its own, below L{ingress.routing.route},
because policies name upstreams too (error pages, mirrors) and a route holds its policies.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Upstream:
    """
    Where a backend's traffic goes: ready pod addresses, or an ExternalName.

    C{key} ("namespace/service:port") names the upstream across tables, so the
    proxy can keep its balancer position when a new table arrives.
    """

    key: str
    endpoints: tuple[tuple[str, int], ...]
    external_name: str = ""
    external_port: int = 0

    @property
    def targets(self) -> tuple[tuple[str, int], ...]:
        """Addresses to connect to: pod endpoints, or the ExternalName host."""
        if self.external_name:
            return ((self.external_name, self.external_port),)
        return self.endpoints
