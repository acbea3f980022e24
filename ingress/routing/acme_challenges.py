# -*- test-case-name: tests.proxy.test_acme -*-
"""
HTTP-01 challenge routes (RFC 8555, section 8.3): C{/.well-known/acme-challenge/TOKEN} of a pending
order's host, answered by the issuer's responder on loopback.

The pending tokens arrive as a ConfigMap (L{CHALLENGES}: data C{TOKEN: HOST}, and C{responder}: the
responder's C{ip:port}), so they reach every worker with the table.  Each becomes an Exact route of
its host with no policies and no HTTPS redirect, to the responder: the exact path is matched before
any prefix, and a route carries its own redirect, auth and guards, so nothing of the host's other
routes applies to it.  A regex host gets the path as its first pattern.  Hosts without a token pay nothing.

The tokens are keyed by host alone: a host no Ingress and no HTTPRoute serves (a Gateway listener's
hostname whose certificate is being ordered, with no HTTPRoute on --http) gets a host of its own with
that one route.  A host an HTTPRoute serves and no Ingress does gets the route among the Gateway's
paths (C{gateway_hosts}): made an Ingress host, it would take the host from its HTTPRoutes for as long
as the order lasts (one owner per host, L{ingress.routing.gateway.merge}), a renewal's outage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Mapping, MutableMapping
from dataclasses import replace
from typing import Optional

from ingress.model import PATH_EXACT, ConfigMap, ObjectRef
from ingress.routing.hostpaths import HostPaths
from ingress.routing.route import Route
from ingress.routing.table import HostRoutes
from ingress.routing.upstream import Upstream

CHALLENGES = ("twingress-acme", "acme-challenges")  # namespace, name
RESPONDER_KEY = "responder"
CHALLENGE_PATH = "/.well-known/acme-challenge/"


def add_challenge_routes(
    config_maps: Mapping[tuple[str, str], ConfigMap], paths_of: Callable[[str], HostPaths],
    ingress_hosts: Container[str] = (), gateway_hosts: Optional[MutableMapping[str, HostRoutes]] = None,
) -> None:
    """
    Give each pending token's host its exact challenge route: among the Gateway API's paths of the host
    (C{gateway_hosts}, replaced) when HTTPRoutes serve it and no Ingress does (C{ingress_hosts}), else
    among the Ingresses' (C{paths_of}: the host's paths, made if new).
    """
    found = config_maps.get(CHALLENGES)
    if found is None:
        return
    data = dict(found.data)
    host_part, _, port = data.pop(RESPONDER_KEY, "").rpartition(":")
    if not host_part or not port.isdigit():
        return
    upstream = Upstream("acme-challenge-responder", ((host_part, int(port)),))
    source = ObjectRef("ConfigMap", *CHALLENGES)
    for token, host in data.items():
        path = CHALLENGE_PATH + token
        route = Route(name="/".join(CHALLENGES), source=source, upstream=upstream, path=path, path_type=PATH_EXACT)
        host = host.lower()
        if gateway_hosts is not None and host in gateway_hosts and host not in ingress_hosts:
            gateway_hosts[host] = replace(gateway_hosts[host], exact={**gateway_hosts[host].exact, path: route})
            continue
        paths = paths_of(host)
        paths.exact[path] = route
        if paths.regex:
            paths.regex = {path: (re.compile(re.escape(path) + "$"), route), **paths.regex}
