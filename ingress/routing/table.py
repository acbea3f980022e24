# -*- test-case-name: tests.unit.test_routing -*-
"""
The immutable routing table the proxy reads on every request.

Lookups are dictionary probes: a host probe (exact, then one-label wildcard,
then the host-less rules), then one probe per path element, so their cost does
not grow with the number of Ingresses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, cast

import ingress.routing.lookup as lookup
from ingress.model import Problem
from ingress.routing.certs import EMPTY_CERTIFICATES, CertificateTable
from ingress.routing.listener_names import ListenerNames
from ingress.routing.nginx_config import ListenerSettings
from ingress.routing.policies.block import GlobalBlock
from ingress.routing.policies.trust import ForwardedTrust
from ingress.routing.route import Route
from ingress.routing.streams import StreamRoute, streams_json
from ingress.routing.upstream import Upstream

__all__ = ["EMPTY_TABLE", "HostRoutes", "Route", "RoutingTable", "Upstream", "normalize_host"]

@dataclass(frozen=True, slots=True)
class HostRoutes:
    """
    The paths of one host.

    C{exact} maps a whole path to its route; C{prefixes} maps a normalised
    prefix (path elements joined by "/", no leading or trailing slash, "" for
    "/") to its route.  A host whose paths are regular expressions (see
    L{ingress.routing.build.regex_hosts}) has only C{regex}: patterns tried in
    order, the first that matches wins.  A Gateway API host with RegularExpression
    path matches is a L{ingress.routing.gateway.regex.RegexPaths}, which has all three.
    """

    exact: Mapping[str, Route] = field(default_factory=dict)
    prefixes: Mapping[str, Route] = field(default_factory=dict)
    regex: tuple[tuple[re.Pattern[str], Route], ...] = ()

    plain: ClassVar[bool] = True  # matched by L{lookup.paths_match}: a subclass with a match of its own is not

    def __init_subclass__(cls) -> None:
        cls.plain = cls.match is HostRoutes.match

    def match(self, path: str) -> Optional[Route]:
        """Exact first (it is always the longest match), then prefixes from the longest (L{lookup.paths_match})."""
        return lookup.paths_match(self, path)


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """
    One generation of routing: built by L{ingress.routing.build}, swapped whole.

    Only what requests and connections are routed by: it is what the workers receive.  What the
    build says about the objects (problems, skipped Ingresses, status) is its
    L{ingress.routing.report.BuildReport}, which stays in the primary.

    C{hosts} holds exact host names, C{wildcards} the suffix after "*." of
    wildcard hosts, C{any_host} the rules without a host.
    """

    generation: int = 0
    hosts: Mapping[str, HostRoutes] = field(default_factory=dict)
    wildcards: Mapping[str, HostRoutes] = field(default_factory=dict)
    any_host: Optional[HostRoutes] = None
    default_route: Optional[Route] = None
    certificates: CertificateTable = field(default_factory=lambda: EMPTY_CERTIFICATES)
    passthrough: Mapping[str, Upstream] = field(default_factory=dict)
    streams: Mapping[tuple[str, int], StreamRoute] = field(default_factory=dict)  # (protocol, port) → route
    trust: Optional[ForwardedTrust] = None  # forwarding headers believed (ingress-nginx ConfigMap); None: none
    listener: Optional[ListenerSettings] = None  # connection settings of the ingress-nginx ConfigMap; None: the command line's
    blocked: Optional[GlobalBlock] = None  # the ConfigMap's block-cidrs, -user-agents, -referers: refused (403) before anything else
    request_ids: bool = True  # X-Request-ID made for requests without one (ingress-nginx's generate-request-id)
    # Gateway API: wildcard hostnames cover any number of labels (Ingress wildcards: exactly one), longest suffix first.
    deep_wildcards: Mapping[str, HostRoutes] = field(default_factory=dict)
    # Gateway API TLSRoute wildcards passed through: the suffix after "*." → upstream; any number of labels
    deep_passthrough: Mapping[str, Upstream] = field(default_factory=dict)
    # Gateway API TLSRoutes on TLS listeners that terminate: host (or "*.suffix", any number of labels) → TCP upstream
    tls_terminated: Mapping[str, Upstream] = field(default_factory=dict)
    # Gateway API listeners on ports of their own (not --http/--https): port → the table of that port alone
    # (its hosts, certificates; everything else as here).  Their stream route (C{serves}) opens the port.
    gateway_ports: Mapping[int, RoutingTable] = field(default_factory=dict)
    # A Gateway TLS listener is served on this port: a TLS name that no route, listener or certificate serves
    # is refused (the connection reset), not answered with another host's certificate.
    rejects_unknown_tls_names: bool = False
    # Gateways with addresses of their own (--gateway-addresses): a request that reached one of them is routed by
    # that address's table (its Gateway's routes alone); any other address by this one.
    addresses: Mapping[str, RoutingTable] = field(default_factory=dict)
    # Gateway HTTPS listeners' hostnames: on a TLS connection, a request whose host belongs to another listener than
    # its SNI name's is misdirected (421; L{ingress.routing.listener_names}).  None: no Gateway HTTPS listener here.
    https_listeners: Optional[ListenerNames] = None
    # TLS-ALPN-01 (RFC 8737): host → the pending order's challenge certificate and key (PEM), answered on a
    # ClientHello offering acme-tls/1 for it (L{ingress.routing.tls_alpn_challenges}); empty when none is pending.
    acme_tls_alpn: Mapping[str, bytes] = field(default_factory=dict)

    def passthrough_for(self, host: str) -> Optional[Upstream]:
        """
        The upstream that gets this SNI name's raw TLS, if its host is passed through: an exact name,
        an Ingress wildcard (one label), a Gateway API wildcard (any number of labels, longest suffix).
        """
        upstream = self.passthrough.get(host)
        if upstream is None and "." in host:
            upstream = self.passthrough.get("*." + host.split(".", 1)[1])
        if upstream is None and self.deep_passthrough:
            upstream = lookup.longest_suffix(self.deep_passthrough, host, "")
        return upstream

    def terminated_for(self, host: str) -> Optional[Upstream]:
        """The TCP upstream of this SNI name's TLS, terminated here (a Gateway TLS listener with tls.mode Terminate)."""
        upstream = self.tls_terminated.get(host)
        return upstream if upstream is not None else lookup.longest_suffix(self.tls_terminated, host, "*.")

    @property
    def reads_server_name(self) -> bool:
        """Whether a TLS connection's SNI name may mean more than a certificate (passthrough, or TLS to a TCP backend)."""
        return bool(self.passthrough or self.deep_passthrough or self.tls_terminated)

    def serves_tls_name(self, name: str) -> bool:
        """
        Whether a TLS connection for SNI C{name} has anything here: passed through, terminated to a TCP
        backend, a certificate for it (a hostless HTTPS listener's, or --default-certificate, covers every
        name), or HTTP routes of its host.
        """
        if self.passthrough_for(name) is not None or self.terminated_for(name) is not None:
            return True
        certificates = self.certificates
        if certificates.default is not None or certificates.secret_for(name) is not None:
            return True
        routes = self.host_routes(name)
        return routes is not None and routes is not self.any_host

    def host_routes(self, host: str) -> Optional[HostRoutes]:
        """The rules that own C{host} (already normalised): exact beats wildcard beats host-less."""
        return cast(Optional[HostRoutes], lookup.host_routes(self, host))

    def match(self, host: str, path: str) -> Optional[Route]:
        """
        The route for a request, or None for 404 (L{lookup.match}: the request path calls it directly).

        C{host} must be normalised with L{normalize_host}; C{path} is the path
        part of the request target (no query).  A host that owns rules but
        none of whose paths match falls to the default backend, as in the
        Ingress specification.
        """
        return lookup.match(self, host, path)

    def to_json(self) -> dict[str, Any]:
        """The table for /debug/routes: plain JSON types only."""

        def dump_host(routes: HostRoutes) -> dict[str, Any]:
            def dump(route: Route) -> dict[str, Any]:
                shown: dict[str, Any] = {
                    "route": route.name,
                    "upstream": route.upstream.key,
                    "endpoints": [f"{h}:{p}" for h, p in route.upstream.targets],
                }
                if route.policies is not None:
                    shown["policies"] = route.policies.to_json()
                if route.choices:
                    shown["choices"] = [{"match": match.to_json(), **dump(choice)} for match, choice in route.choices]
                return shown

            shown: dict[str, Any] = {
                "exact": {p: dump(r) for p, r in sorted(routes.exact.items())},
                "prefix": {"/" + p: dump(r) for p, r in sorted(routes.prefixes.items())},
            }
            if routes.regex:
                shown["regex"] = [{"pattern": pattern.pattern, **dump(route)} for pattern, route in routes.regex]
            return shown

        return {
            "generation": self.generation,
            "hosts": {h: dump_host(r) for h, r in sorted(self.hosts.items())},
            "wildcards": {"*." + h: dump_host(r) for h, r in sorted({**self.deep_wildcards, **self.wildcards}.items())},
            "anyHost": dump_host(self.any_host) if self.any_host else None,
            "defaultBackend": (
                {"route": self.default_route.name, "upstream": self.default_route.upstream.key}
                if self.default_route
                else None
            ),
            "certificates": {
                **{h: "/".join(k) for h, k in sorted(self.certificates.exact.items())},
                **{"*." + h: "/".join(k) for h, k in sorted(self.certificates.wildcards.items())},
            },
            "passthrough": {h: u.key for h, u in sorted({**{"*." + s: u for s, u in self.deep_passthrough.items()}, **self.passthrough}.items())},
            **({"tlsTerminated": {h: u.key for h, u in sorted(self.tls_terminated.items())}} if self.tls_terminated else {}),
            "streams": streams_json(self.streams, {})["streams"],
            **({"globalBlock": self.blocked.to_json()} if self.blocked is not None else {}),
            **({"httpsListeners": self.https_listeners.to_json()} if self.https_listeners is not None else {}),
            **({"acmeTlsAlpn01": sorted(self.acme_tls_alpn)} if self.acme_tls_alpn else {}),
            **({"gatewayPorts": {str(port): _port_json(table.to_json()) for port, table in sorted(self.gateway_ports.items())}} if self.gateway_ports else {}),
        }


def _port_json(shown: dict[str, Any]) -> dict[str, Any]:
    """A Gateway port's table for /debug/routes: its routes and certificates (the rest is the main table's)."""
    return {key: shown[key] for key in ("hosts", "wildcards", "anyHost", "certificates")}


def problem_json(problem: Problem) -> dict[str, str]:
    """A problem as /debug/routes lists it."""
    return {"object": str(problem.ref), "reason": problem.reason, "message": problem.message}


def normalize_host(host: str) -> str:
    """
    Lower-case, without port and trailing dot: the form every host key takes.

    Handles bracketed IPv6 literals ("[::1]:80").
    """
    if host.startswith("["):
        end = host.find("]")
        host = host[: end + 1] if end > 0 else host
    else:
        colon = host.rfind(":")
        if colon >= 0:
            host = host[:colon]
    return host.rstrip(".").lower()


EMPTY_TABLE = RoutingTable()
