# -*- test-case-name: tests.unit.test_client_auth -*-
"""
Which hosts ask for client certificates, and their routes carrying it (ingress-nginx applies auth-tls-* per host).

The oldest Ingress that sets C{auth-tls-secret} for a host decides for the whole host
(every path of every Ingress on it, as nginx's server-level ssl_verify_client does); a
later one that sets it differently is told so.  A host whose CA bundle cannot be read
answers 403 on every path (ingress-nginx's AuthTLSError: the server returns 403).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Union

from ingress.model import ClusterState, Ingress, ObjectRef, Problem
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.annotations.clientauth import ClientAuthProblem, client_auth
from ingress.routing.policies import Deny
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.route import Policies, Route
from ingress.routing.table import HostRoutes

HostAuth = Union[ClientAuth, Deny]


def client_auth_hosts(
    ingresses: Iterable[Ingress], annotations: Mapping[ObjectRef, IngressAnnotations], state: ClusterState
) -> tuple[dict[str, HostAuth], list[Problem]]:
    """Host → its client-certificate settings (or the 403 that closes it), and what was reported."""
    hosts: dict[str, HostAuth] = {}
    deciding: dict[str, ObjectRef] = {}
    problems: list[Problem] = []
    for ingress in ingresses:
        read = annotations[ingress.ref]
        if not read.text("auth-tls-secret"):
            continue
        settings: HostAuth
        try:
            found = client_auth(ingress, read, state.opaque_secrets, state.secrets)
            assert found is not None  # auth-tls-secret is set
            settings = found
        except ClientAuthProblem as error:
            settings = Deny(403, str(error))
            problems.append(Problem(ingress.ref, "InvalidClientAuth", f"{error}: its hosts answer 403"))
        for host in {rule.host for rule in ingress.rules if rule.host}:
            if host not in hosts:
                hosts[host], deciding[host] = settings, ingress.ref
            elif hosts[host] != settings:
                problems.append(Problem(ingress.ref, "Conflict", f"auth-tls-* for {host} ignored: {deciding[host].namespace}/{deciding[host].name} set it first"))
    return hosts, problems


def with_client_auth(hosts: Mapping[str, HostRoutes], settings: Mapping[str, HostAuth]) -> dict[str, HostRoutes]:
    """The hosts with every route of a host that asks for certificates carrying that (or closed)."""
    if not settings:
        return dict(hosts)
    changed = dict(hosts)
    for host, auth in settings.items():
        routes = hosts.get(host)
        if routes is not None:
            changed[host] = HostRoutes(
                exact={path: _carrying(route, auth) for path, route in routes.exact.items()},
                prefixes={path: _carrying(route, auth) for path, route in routes.prefixes.items()},
                regex=tuple((pattern, _carrying(route, auth)) for pattern, route in routes.regex),
            )
    return changed


def _carrying(route: Route, auth: HostAuth) -> Route:
    policies = route.policies or Policies()
    if isinstance(auth, Deny):
        return replace(route, policies=replace(policies, deny=policies.deny or auth))
    return replace(route, policies=replace(policies, client_auth=auth))
