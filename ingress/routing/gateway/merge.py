# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
The Gateway API's hosts and certificates joined to the Ingresses' in one table.

One owner per host: a host (or wildcard suffix, or the host-less rules) that an
Ingress serves stays the Ingress's, and the HTTPRoutes that would serve it there
are reported.  Both specifications order their own paths precisely; mixing the
two orders on one host would make neither hold.  Certificates: an Ingress's
claim on a host's certificate comes first, then the Gateways' listeners.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Optional

from ingress.model import ObjectRef, Problem, TLSSecret
from ingress.routing.certs import CertificateTable
from ingress.routing.gateway import GatewayRoutes
from ingress.routing.streams import StreamRoute
from ingress.routing.table import HostRoutes
from ingress.routing.upstream import Upstream

HOST_CONFLICT = "HostServedByIngress"


@dataclass(frozen=True, slots=True)
class Merged:
    hosts: dict[str, HostRoutes]
    deep_wildcards: dict[str, HostRoutes]
    any_host: Optional[HostRoutes]
    certificates: CertificateTable
    problems: list[Problem]
    passthrough: dict[str, Upstream]
    streams: dict[tuple[str, int], StreamRoute]
    deep_passthrough: dict[str, Upstream]
    tls_terminated: dict[str, Upstream]


def merge_gateway(
    gateway: GatewayRoutes,
    hosts: Mapping[str, HostRoutes],
    wildcards: Mapping[str, HostRoutes],
    any_host: Optional[HostRoutes],
    certificates: CertificateTable,
    secrets: Mapping[tuple[str, str], TLSSecret],
    passthrough: Mapping[str, Upstream] = {},
    streams: Mapping[tuple[str, int], StreamRoute] = {},
) -> Merged:
    """
    The table's hosts, Gateway API wildcards, host-less paths, certificates, passthrough hosts and
    stream listeners with the Gateway API's added (an Ingress's passthrough host and a
    StreamIngress's port stay theirs).
    """
    problems = list(gateway.problems)
    joined = dict(hosts)
    for host, paths in gateway.hosts.items():
        if host in hosts:
            problems.extend(_conflicts(paths, f'host "{host}"'))
        else:
            joined[host] = paths
    deep = {}
    for suffix, paths in gateway.wildcards.items():
        if suffix in wildcards:
            problems.extend(_conflicts(paths, f'host "*.{suffix}"'))
        else:
            deep[suffix] = paths
    if gateway.any_host is not None and any_host is not None:
        problems.extend(_conflicts(gateway.any_host, "every host (no hostname)"))
    elif gateway.any_host is not None:
        any_host = gateway.any_host
    joined_passthrough = dict(passthrough)
    deep_passthrough: dict[str, Upstream] = {}
    for host, upstream in gateway.l4.passthrough.items():
        if host in passthrough:
            problems.append(Problem(gateway.l4.passed_by[host], HOST_CONFLICT, f'TLS host "{host}" is passed through by an Ingress: this route is not served there'))
        elif host.startswith("*."):
            deep_passthrough[host[2:]] = upstream  # a Gateway wildcard covers any number of labels
        else:
            joined_passthrough[host] = upstream
    terminated: dict[str, Upstream] = {}
    for host, upstream in gateway.l4.terminated.items():
        if host in passthrough or host in hosts or (host.startswith("*.") and host[2:] in wildcards):
            problems.append(Problem(gateway.l4.terminated_by[host], HOST_CONFLICT, f'TLS host "{host}" is served by an Ingress: this route is not served there'))
        else:
            terminated[host] = upstream
    joined_streams = dict(streams)
    for key, stream in gateway.l4.streams.items():
        if key in streams:
            problems.append(Problem(stream.source, "PortConflict", f"{key[0]} port {key[1]} is {streams[key].name}'s (older): this route is not served there"))
        else:
            joined_streams[key] = stream
    certs = with_listener_certificates(certificates, gateway.certificates, secrets)
    return Merged(joined, deep, any_host, certs, problems, joined_passthrough, joined_streams, deep_passthrough, terminated)


def _conflicts(paths: HostRoutes, where: str) -> list[Problem]:
    """One problem for each HTTPRoute of C{paths}: an Ingress serves that host."""
    sources: set[ObjectRef] = set()
    for route in (*paths.exact.values(), *paths.prefixes.values(), *(route for _, route in paths.regex)):
        sources.add(route.source)
        sources.update(choice.source for _, choice in route.choices)
    message = f"{where} is served by an Ingress: this HTTPRoute is not served there"
    return [Problem(source, HOST_CONFLICT, message) for source in sorted(sources)]


def with_listener_certificates(table: CertificateTable, added: Mapping[str, tuple[str, str]], secrets: Mapping[tuple[str, str], TLSSecret]) -> CertificateTable:
    """C{table} with the Gateway listeners' certificates where no Ingress named one ("" : the default)."""
    if not added:
        return table
    exact, wildcards, known = dict(table.exact), dict(table.wildcards), dict(table.secrets)
    default = table.default
    for host, key in added.items():
        known[key] = secrets[key]
        if not host:
            default = default or key
        elif host.startswith("*."):
            wildcards.setdefault(host[2:], key)
        else:
            exact.setdefault(host, key)
    return replace(table, exact=exact, wildcards=wildcards, secrets=known, default=default)
