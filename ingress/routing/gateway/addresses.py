# -*- test-case-name: tests.unit.test_gateway_addresses -*-
"""
Gateways told apart by address: each Gateway of ours gets an address of its own from the pool
twingress is given (C{--gateway-addresses}), so that two Gateways with listeners on one port are
two places a client can reach, as the spec has them (conformance tests/httproute-multiple-gateways.go:
each Gateway's catch-all route answers at its own address).

The address is the one C{spec.addresses} asks for when it is in the pool and no older Gateway has
it; else the one the Gateway's status shows (kept across restarts and leader changes); else the
first free one.  A Gateway that asks for an address outside the pool, or finds none free, gets
none: it is served at every address, as all Gateways are without a pool (its status says which
addresses those are), and the routing build reports it.  Oldest Gateway first, so a newer Gateway
never takes an older one's address.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from ingress.model import ClusterState, ObjectRef, Problem
from ingress.model.gateway import Gateway
from ingress.routing.backends import Backends
from ingress.routing.build_options import BuildOptions
from ingress.routing.gateway import build_gateway_routes, has_gateway_api
from ingress.routing.gateway.listeners import our_gateways
from ingress.routing.gateway.ports import port_table
from ingress.routing.nginx_config import NginxConfig
from ingress.routing.table import EMPTY_TABLE, RoutingTable


def assign_addresses(gateways: Iterable[Gateway], pool: tuple[str, ...], problems: list[Problem]) -> dict[ObjectRef, str]:
    """Each Gateway's own address (C{gateways} oldest first); those without one are absent and reported."""
    if not pool:
        return {}
    ordered = list(gateways)
    taken: dict[str, ObjectRef] = {}
    assigned: dict[ObjectRef, str] = {}
    for gateway in ordered:  # the addresses asked for first, then those already shown
        wanted = gateway.addresses[0] if gateway.addresses else None
        if wanted is not None:
            if wanted not in pool:
                problems.append(Problem(gateway.ref, "UnusableAddress", f"spec.addresses {wanted} is not in the pool twingress serves (--gateway-addresses)"))
                continue
            if wanted in taken:
                problems.append(Problem(gateway.ref, "AddressNotAssigned", f"address {wanted} is already used by Gateway {taken[wanted].namespace}/{taken[wanted].name}"))
                continue
            taken[wanted] = gateway.ref
            assigned[gateway.ref] = wanted
    for gateway in ordered:
        if gateway.ref in assigned or gateway.addresses:
            continue
        shown = next((a for a in gateway.status_addresses if a in pool and a not in taken), None)
        if shown is not None:
            taken[shown] = gateway.ref
            assigned[gateway.ref] = shown
    for gateway in ordered:
        if gateway.ref in assigned or gateway.addresses:
            continue
        free = next((a for a in pool if a not in taken), None)
        if free is None:
            problems.append(Problem(gateway.ref, "AddressNotAssigned", f"every address of the pool ({len(pool)}) is taken: the Gateway is served at every address"))
            continue
        taken[free] = gateway.ref
        assigned[gateway.ref] = free
    return assigned


def address_tables(
    state: ClusterState,
    backends: Backends,
    options: BuildOptions,
    generation: int,
    config: NginxConfig,
) -> tuple[dict[ObjectRef, tuple[str, RoutingTable]], list[Problem]]:
    """
    Each Gateway with an address of its own (L{assign_addresses}): the address and the table a request
    to it is routed by, made of that Gateway's routes alone (its ports of their own too).  The TLS
    handshake, passthrough and streams stay the whole table's.  C{options.gateway_addresses} is the pool.
    """
    problems: list[Problem] = []
    pool, controller_name, default_certificate = options.gateway_addresses, options.gateway_controller_name, options.default_certificate
    if not pool or not has_gateway_api(state):
        return {}, problems
    assigned = assign_addresses(our_gateways(state, controller_name), pool, problems)
    tables = {}
    for ref, address in assigned.items():
        routes = build_gateway_routes(state, backends, options.reserved_ports, controller_name, options.cleartext_http2, only=ref)
        ports = {port: port_table(own, generation, state.secrets, config, default_certificate) for port, own in routes.own_ports.items()}
        tables[ref] = (address, replace(port_table(routes, generation, state.secrets, config, default_certificate), gateway_ports=ports))
    return tables, problems


def with_address_views(table: RoutingTable, by_address: Mapping[ObjectRef, tuple[str, RoutingTable]], port: int) -> RoutingTable:
    """A Gateway port's table, with what each Gateway address serves on that port (nothing, when its Gateway has no listener there)."""
    if not by_address:
        return table
    return replace(table, addresses={address: own.gateway_ports.get(port, EMPTY_TABLE) for address, own in by_address.values()})
