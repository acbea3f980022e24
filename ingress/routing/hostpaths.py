# -*- test-case-name: tests.unit.test_routing -*-
"""
The paths of one host while a routing table is built (L{ingress.routing.build}): mutable while
Ingresses claim their (host, path) slots, frozen into the table's L{HostRoutes} at the end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ingress.routing.table import HostRoutes, Route


@dataclass
class HostPaths:
    """The mutable paths of one host while building; frozen into a L{HostRoutes} at the end."""

    exact: dict[str, Route] = field(default_factory=dict)
    prefixes: dict[str, Route] = field(default_factory=dict)
    regex: dict[str, tuple[re.Pattern[str], Route]] = field(default_factory=dict)

    @property
    def routes(self) -> bool:
        return bool(self.exact or self.prefixes or self.regex)

    def freeze(self) -> HostRoutes:
        """Regex paths longest first (ingress-nginx orders its regex locations so; ties keep claim order)."""
        ordered = sorted(self.regex.items(), key=lambda item: -len(item[0]))
        return HostRoutes(exact=self.exact, prefixes=self.prefixes, regex=tuple(found for _, found in ordered))


class RegexRoutes(dict[str, Route]):
    """The regex paths of a host seen as path → route, writing through to the (pattern, route) pairs."""

    def __init__(self, regex: dict[str, tuple[re.Pattern[str], Route]]) -> None:
        super().__init__({path: route for path, (_, route) in regex.items()})
        self._regex = regex

    def __setitem__(self, path: str, route: Route) -> None:
        super().__setitem__(path, route)
        self._regex[path] = (self._regex[path][0], route)


def freeze_hosts(paths: Mapping[str, HostPaths]) -> dict[str, HostRoutes]:
    """Every host's paths, frozen for the table."""
    return {host: host_paths.freeze() for host, host_paths in paths.items()}
