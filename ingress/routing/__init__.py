"""
Pure routing: C{build(state, options) -> Built}, the table (host, path and backend matching) and
the build's report beside it.

No I/O and no Twisted imports here: everything a build needs is in the
L{ingress.model.ClusterState} snapshot and its L{BuildOptions}.
"""

from ingress.routing.build import build
from ingress.routing.build_options import DEFAULT_BUILD_OPTIONS, BuildOptions
from ingress.routing.report import EMPTY_BUILT, EMPTY_REPORT, BuildReport, Built
from ingress.routing.table import EMPTY_TABLE, HostRoutes, Route, RoutingTable, Upstream, normalize_host

__all__ = [
    "DEFAULT_BUILD_OPTIONS", "EMPTY_BUILT", "EMPTY_REPORT", "EMPTY_TABLE", "BuildOptions", "BuildReport", "Built", "HostRoutes", "Route",
    "RoutingTable", "Upstream", "build", "normalize_host",
]
