# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
A rule's backends with weights (Gateway API backendRefs): each request goes to one of them, in
proportion to its weight.

A backend that cannot be used (a Service that does not exist, a reference no
ReferenceGrant allows, an unsupported kind) keeps its share of the requests and
answers them 500, as the Gateway API asks ("requests that would have been sent to
that backend MUST receive a 500 status code"); a rule whose every weight is 0
answers everything 500.  The choice is one random draw against the running sums.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ingress.routing.route import Route


@dataclass(frozen=True, slots=True)
class WeightedBackends:
    """C{routes[i]} (None: answered 500) takes C{weights[i]} of C{sum(weights)} requests."""

    routes: tuple[Optional[Route], ...]
    weights: tuple[int, ...]
    unusable_status: int = 500  # what a share without a usable backend answers (GRPCRoute: 503, UNAVAILABLE to gRPC)
    running: tuple[int, ...] = ()  # the running sums of the weights, made once

    def __post_init__(self) -> None:
        total, running = 0, []
        for weight in self.weights:
            total += weight
            running.append(total)
        object.__setattr__(self, "running", tuple(running))

    def pick(self, draw: Optional[int] = None) -> Optional[Route]:
        """The route for one request (C{draw}: a number in [0, total), random when not given); None: answer 500."""
        total = self.running[-1] if self.running else 0
        if total <= 0:
            return None
        if draw is None:
            draw = random.randrange(total)
        return self.routes[bisect.bisect_right(self.running, draw)]

    def to_json(self) -> list[dict[str, object]]:
        """For /debug/routes."""
        return [
            {"upstream": route.upstream.key if route is not None else None, "weight": weight}
            for route, weight in zip(self.routes, self.weights, strict=True)
        ]
