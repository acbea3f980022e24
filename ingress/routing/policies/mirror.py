# -*- test-case-name: tests.unit.test_gateway_mirror -*-
"""
Copies of a route's requests sent to other backends whose answers are ignored (Gateway API
RequestMirror: "Requests are sent to the specified destination, but responses from that
destination are ignored"), each for a share of the requests (its C{percent} or C{fraction}).

A copy never holds the request up: it is written as the original is, and a mirror that cannot
take the bytes as fast as the client sends them, has no endpoint, or is down loses its copy
(counted), not the client its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingress.routing.route import Upstream


@dataclass(frozen=True, slots=True)
class MirrorTarget:
    """One mirror: where the copies go, and the share of requests copied (0 < percent <= 100)."""

    upstream: Upstream
    percent: float = 100.0


@dataclass(frozen=True, slots=True)
class Mirror:
    """Every mirror of a route (Gateway API allows several RequestMirror filters on a rule)."""

    targets: tuple[MirrorTarget, ...]

    def to_json(self) -> list[dict[str, object]]:
        return [{"upstream": t.upstream.key, "endpoints": [f"{h}:{p}" for h, p in t.upstream.targets], "percent": t.percent} for t in self.targets]
