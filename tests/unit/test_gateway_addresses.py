"""
Gateways told apart by address (--gateway-addresses): HTTPRouteMultipleGateways (sigs.k8s.io/gateway-api
conformance v1.6.3, tests/httproute-multiple-gateways.go: two Gateways with HTTP listeners on one port,
each with a catch-all route of its own, each answering at its own address with its own route, a shared
route at both) and the spec's Gateway.spec.addresses / status.addresses (apis/v1/gateway_types.go:
"addresses requested for this Gateway"; status "addresses bound to the Gateway").
"""

from __future__ import annotations

from typing import Any

from ingress.model import ObjectMeta, ObjectRef
from ingress.model.gateway import Gateway
from ingress.routing import build
from ingress.routing.build_options import BuildOptions
from ingress.routing.gateway.addresses import assign_addresses
from tests.unit.objects import T0, T1, T2, state_from_objects
from tests.unit.test_gateway_routing import PORTS, backend, gateway, gateway_class, http_route, listener, serve, services, to

POOL = ("10.0.9.1", "10.0.9.2", "10.0.9.3")


def _gateway(name: str, created: str, requested: tuple[str, ...] = (), shown: tuple[str, ...] = ()) -> Gateway:
    return Gateway(ObjectMeta("default", name, creation_timestamp=created), "twingress", (), status_addresses=shown, addresses=requested)


def test_requested_then_shown_then_free_oldest_first() -> None:
    old, middle, new = _gateway("old", T0), _gateway("middle", T1, shown=("10.0.9.1",)), _gateway("new", T2, requested=("10.0.9.1",))
    problems: list = []
    assigned = assign_addresses([old, middle, new], POOL, problems)
    assert assigned == {new.ref: "10.0.9.1", old.ref: "10.0.9.2", middle.ref: "10.0.9.3"}  # asked for wins over shown
    assert problems == []


def test_an_address_outside_the_pool_or_none_left_is_reported() -> None:
    outside, a, b = _gateway("outside", T0, requested=("192.0.2.1",)), _gateway("a", T1), _gateway("b", T2)
    problems: list = []
    assigned = assign_addresses([outside, a, b], POOL[:1], problems)
    assert assigned == {a.ref: "10.0.9.1"}
    assert sorted((p.ref.name, p.reason) for p in problems) == [("b", "AddressNotAssigned"), ("outside", "UnusableAddress")]
    assert assign_addresses([a], (), []) == {}  # no pool: every Gateway shares the node's addresses


def _two_gateways(pool: tuple[str, ...]) -> Any:
    objects: list[dict[str, Any]] = [
        gateway_class(), *services("v1", "v2", "v3"),
        gateway("one", listener("http", 80)), gateway("two", listener("http", 80)),
        http_route("shared", to(backend("v1"), matches=[{"path": {"type": "PathPrefix", "value": "/shared"}}]), parents=({"name": "one"}, {"name": "two"})),
        http_route("one-only", to(backend("v2")), parents=({"name": "one"},)),
        http_route("two-only", to(backend("v3")), parents=({"name": "two"},)),
    ]
    return build(state_from_objects(objects), BuildOptions(reserved_ports=PORTS, gateway_addresses=pool))


def test_each_gateway_answers_at_its_own_address_with_its_own_routes() -> None:
    table = _two_gateways(POOL[:2])
    one, two = table.table.addresses["10.0.9.1"], table.table.addresses["10.0.9.2"]
    assert serve(one, "any.example", "/") == "default/v2:80"
    assert serve(two, "any.example", "/") == "default/v3:80"
    assert serve(one, "any.example", "/shared") == serve(two, "any.example", "/shared") == "default/v1:80"
    assert table.report.gateway_status is not None
    assert table.report.gateway_status.gateways[ObjectRef("Gateway", "default", "one")].addresses == ("10.0.9.1",)
    assert table.report.gateway_status.gateways[ObjectRef("Gateway", "default", "two")].addresses == ("10.0.9.2",)


def test_without_a_pool_the_gateways_share_one_table() -> None:
    table = _two_gateways(())
    assert table.table.addresses == {}
    assert serve(table.table, "any.example", "/shared") == "default/v1:80"
