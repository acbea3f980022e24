"""
Weighted backendRefs of TCPRoutes and UDPRoutes: TCPRouteWeightedRouting and UDPRouteWeightedRouting
(sigs.k8s.io/gateway-api/conformance v1.6.3, tests/tcproute-weighted-routing.go,
tests/udproute-weighted-routing.go): each backend gets its weight's share of the connections (UDP:
sessions), within the suite's tolerance; the stream balancer takes the upstream's endpoints in turn.
"""

from __future__ import annotations

from collections import Counter

from ingress.model import ObjectMeta
from ingress.model.gateway import L4Route
from ingress.routing.gateway.l4 import WEIGHT_SLOTS, weighted_upstream
from ingress.routing.upstream import Upstream

ROUTE = L4Route(ObjectMeta("default", "weighted"), "TCPRoute", (), (), ())


def test_shares_follow_the_weights_spread_evenly() -> None:
    """70/20/10 over three Services (two endpoints for the first): every hundred turns give 70, 20, 10."""
    a = Upstream("ns/a:80", (("10.0.0.1", 80), ("10.0.0.2", 80)))
    b = Upstream("ns/b:80", (("10.0.1.1", 80),))
    c = Upstream("ns/c:80", (("10.0.2.1", 80),))
    upstream = weighted_upstream("ns/weighted", [(a, 70), (b, 20), (c, 10)], ROUTE, [])
    assert len(upstream.endpoints) == WEIGHT_SLOTS
    counts = Counter(upstream.endpoints)
    assert counts == {("10.0.0.1", 80): 35, ("10.0.0.2", 80): 35, ("10.0.1.1", 80): 20, ("10.0.2.1", 80): 10}
    first_ten = Counter(upstream.endpoints[:10])  # spread, not in runs: any ten turns are close to the shares
    assert first_ten[("10.0.1.1", 80)] == 2 and first_ten[("10.0.2.1", 80)] == 1


def test_a_service_without_endpoints_gets_no_turn_and_an_external_name_is_reported() -> None:
    ready = Upstream("ns/a:80", (("10.0.0.1", 80),))
    empty = Upstream("ns/b:80", ())
    external = Upstream("ns/c:80", (), external_name="example.com", external_port=80)
    problems: list = []
    upstream = weighted_upstream("ns/weighted", [(ready, 1), (empty, 1), (external, 1)], ROUTE, problems)
    assert set(upstream.endpoints) == {("10.0.0.1", 80)}
    assert [p.reason for p in problems] == ["UnsupportedValue"]
