# -*- test-case-name: tests.unit.test_build_report -*-
"""
What a routing build says about the objects it read, beside the table it made: the problems, the
Ingresses of other classes, the Gateway API status and the StreamIngress conditions.

No worker routes by any of it: the report goes to the controllers (status, Events), the metrics,
the log, /debug/routes and the audit; only the L{RoutingTable} goes to the workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ingress.model import ObjectRef, Problem
from ingress.routing.gateway.status import GatewayAPIStatus
from ingress.routing.streams import StreamCondition
from ingress.routing.table import EMPTY_TABLE, RoutingTable, problem_json

__all__ = ["EMPTY_BUILT", "EMPTY_REPORT", "BuildReport", "Built", "problem_json"]

SKIPPED_NAMES = 100  # Ingresses named per reason in /debug/routes' skippedIngresses (all are counted)


@dataclass(frozen=True, slots=True)
class BuildReport:
    """One build's findings about its objects: what the controllers write, the metrics count, the log tells."""

    problems: tuple[Problem, ...] = ()  # objects (or parts of one) not served as written, sorted
    # Ingresses of other classes or controllers: why each is not served (reason, message), for the log, metric and /debug/routes
    class_skipped: Mapping[ObjectRef, tuple[str, str]] = field(default_factory=dict)
    gateway_status: Optional[GatewayAPIStatus] = None  # what the Lease holder writes to Gateway API objects
    stream_conditions: Mapping[ObjectRef, tuple[StreamCondition, ...]] = field(default_factory=dict)  # StreamIngress status

    def skipped_summary(self) -> dict[tuple[str, str], int]:
        """How many Ingresses are skipped for each (reason, message)."""
        counts: dict[tuple[str, str], int] = {}
        for why in self.class_skipped.values():
            counts[why] = counts.get(why, 0) + 1
        return counts

    def _skipped_json(self) -> dict[str, Any]:
        """
        Each (reason, message) with its Ingresses, "namespace/name" sorted: at most L{SKIPPED_NAMES} of
        them (a cluster may hold thousands of another controller's), C{ingresses} counts them all.
        """
        names: dict[tuple[str, str], list[str]] = {}
        for ref, why in self.class_skipped.items():
            names.setdefault(why, []).append(f"{ref.namespace}/{ref.name}")
        reasons = []
        for (reason, message), found in sorted(names.items()):
            found.sort()
            shown = {"names": found[:SKIPPED_NAMES], **({"namesLeftOut": len(found) - SKIPPED_NAMES} if len(found) > SKIPPED_NAMES else {})}
            reasons.append({"reason": reason, "message": message, "ingresses": len(found), **shown})
        return {"count": len(self.class_skipped), "reasons": reasons}

    def to_json(self) -> dict[str, Any]:
        """The report's part of /debug/routes: plain JSON types only."""
        return {
            "streamConditions": {
                f"{ref.namespace}/{ref.name}": [c.to_json() for c in found] for ref, found in sorted(self.stream_conditions.items())
            },
            "problems": [problem_json(p) for p in self.problems],
            "skippedIngresses": self._skipped_json(),
            **({"gatewayAPI": self.gateway_status.to_json()} if self.gateway_status is not None else {}),
        }


@dataclass(frozen=True, slots=True)
class Built:
    """What a build returns: the table the workers route by, and the report that stays in the primary."""

    table: RoutingTable
    report: BuildReport

    def to_json(self) -> dict[str, Any]:
        """/debug/routes: the table, then the report's sections."""
        return {**self.table.to_json(), **self.report.to_json()}


EMPTY_REPORT = BuildReport()
EMPTY_BUILT = Built(EMPTY_TABLE, EMPTY_REPORT)
