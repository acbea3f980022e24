"""
Pure routing: C{build(state) -> RoutingTable}, with host, path and backend matching.

No I/O and no Twisted imports here: everything a build needs is in the
L{ingress.model.ClusterState} snapshot.
"""

from ingress.routing.build import build
from ingress.routing.table import EMPTY_TABLE, HostRoutes, Route, RoutingTable, Upstream, normalize_host

__all__ = ["EMPTY_TABLE", "HostRoutes", "Route", "RoutingTable", "Upstream", "build", "normalize_host"]
