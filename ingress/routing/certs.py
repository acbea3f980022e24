# -*- test-case-name: tests.unit.test_routing_certs -*-
"""
Which certificate serves which host: C{spec.tls} of our Ingresses, resolved to Secrets.

Pure like the rest of routing: it only pairs names.  Whether a Secret holds
a usable certificate (parsable, key matching, not expired, covering the
host) is the TLS layer's business when it builds a context; a host whose
certificate it rejects falls back to the default certificate there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ingress.model import ClusterState, Ingress, ObjectRef, Problem, TLSSecret
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.nginx_config import TWINGRESS_DEFAULTS, NginxConfig
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.route import Route
from ingress.routing.upstream import Upstream

SecretKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class CertificateTable:
    """
    Host → Secret for TLS termination.

    C{exact} maps a host, C{wildcards} the suffix after "*." of a wildcard
    host; C{secrets} holds every Secret named, so the TLS layer never looks
    anything up elsewhere.
    """

    exact: Mapping[str, SecretKey] = field(default_factory=dict)
    wildcards: Mapping[str, SecretKey] = field(default_factory=dict)
    secrets: Mapping[SecretKey, TLSSecret] = field(default_factory=dict)
    default: Optional[SecretKey] = None
    client_auth: Mapping[str, ClientAuth] = field(default_factory=dict)  # hosts ("*.suffix" too) whose handshake asks for a certificate

    def secret_for(self, host: str) -> Optional[SecretKey]:
        """Exact host first, then a wildcard covering exactly one more label, else None (default)."""
        key = self.exact.get(host)
        if key is not None:
            return key
        dot = host.find(".")
        if dot > 0:
            return self.wildcards.get(host[dot + 1 :])
        return None

    def hosts_of(self, key: SecretKey) -> list[str]:
        """The hosts a Secret is named for (wildcards as "*.suffix"): what its certificate must cover."""
        hosts = [h for h, k in self.exact.items() if k == key]
        return hosts + ["*." + s for s, k in self.wildcards.items() if k == key]


EMPTY_CERTIFICATES = CertificateTable()


def build_certificates(
    state: ClusterState, ingresses: Iterable[Ingress], default: Optional[SecretKey] = None
) -> tuple[CertificateTable, list[Problem]]:
    """
    Pair the hosts of C{spec.tls} with Secrets of the Ingress's own namespace.

    C{ingresses} come oldest first: the oldest Ingress naming a host wins it;
    a missing Secret is a problem and its hosts keep the default certificate.
    """
    exact: dict[str, SecretKey] = {}
    wildcards: dict[str, SecretKey] = {}
    secrets: dict[SecretKey, TLSSecret] = {}
    problems: list[Problem] = []
    for ingress in ingresses:
        namespace = ingress.meta.namespace
        for tls in ingress.tls:
            if not tls.secret_name:
                continue
            key = (namespace, tls.secret_name)
            secret = state.secrets.get(key)
            if secret is None:
                problems.append(Problem(ingress.ref, "SecretNotFound", f"TLS secret {namespace}/{tls.secret_name} not found"))
                continue
            secrets[key] = secret
            for host in tls.hosts:
                if host.startswith("*."):
                    wildcards.setdefault(host[2:], key)
                else:
                    exact.setdefault(host, key)
    if default is not None:
        if default in state.secrets:
            secrets[default] = state.secrets[default]
        else:
            problems.append(
                Problem(ObjectRef("Secret", default[0], default[1]), "SecretNotFound", "--default-certificate Secret not found")
            )
    return CertificateTable(exact, wildcards, secrets, default if default in secrets else None), problems


def tls_hosts(ingresses: Iterable[Ingress]) -> frozenset[str]:
    """Every host (or "*.suffix") that some Ingress of ours configures TLS for."""
    return frozenset(host for ingress in ingresses for tls in ingress.tls for host in tls.hosts)


def with_tls_options(route: Route, annotations: IngressAnnotations, host: str, secured: frozenset[str], config: NginxConfig = TWINGRESS_DEFAULTS) -> Route:
    """
    The route with its Ingress's TLS behaviour: a host with TLS redirects
    plain HTTP to HTTPS (308) unless C{ssl-redirect: "false"}, and every host
    does with C{force-ssl-redirect: "true"} (ingress-nginx "Server-side HTTPS
    enforcement through redirect"); the defaults of both, the redirect's code
    and HSTS on a TLS host come from the ingress-nginx ConfigMap when there is
    one; C{twingress.io/hsts-max-age} sets HSTS for the Ingress.  A route whose Ingress path starts
    with an entry of the ConfigMap's C{no-tls-redirect-locations} (default C{/.well-known/acme-challenge})
    is never redirected (cert-manager's HTTP-01 solver answers there over plain HTTP).
    """
    tls = bool(host) and host in secured
    redirect = (tls and annotations.flag("ssl-redirect", config.ssl_redirect)) or annotations.flag("force-ssl-redirect", config.force_ssl_redirect)
    if redirect and any(route.path.startswith(location) for location in config.no_tls_redirect_locations):
        redirect = False  # no-tls-redirect-locations (ingress-nginx: force_no_ssl_redirect wins over both redirects)
    max_age = annotations.number("hsts-max-age")
    hsts = f"max-age={int(max_age)}" if max_age is not None else (config.hsts if tls else "")
    if not redirect and not hsts:
        return route
    return replace(route, redirect_https=redirect, hsts=hsts, https_redirect_code=config.redirect_code)


def passthrough_upstreams(
    ingresses: Iterable[Ingress], annotations: Mapping[Any, IngressAnnotations], hosts: Mapping[str, Any], wildcards: Mapping[str, Any]
) -> dict[str, Upstream]:
    """
    Hosts whose TLS is passed through raw: C{ssl-passthrough: "true"}
    sends the host's connections to the backend of its C{/} rule, chosen by the
    SNI name alone (nothing of HTTP is visible).  Keys are hosts or "*.suffix".
    """
    passthrough: dict[str, Upstream] = {}
    for ingress in ingresses:
        if not annotations[ingress.ref].flag("ssl-passthrough"):
            continue
        for rule in ingress.rules:
            if not rule.host or rule.host in passthrough:
                continue
            routes = wildcards.get(rule.host[2:]) if rule.host.startswith("*.") else hosts.get(rule.host)
            route = routes.match("/") if routes is not None else None
            if route is not None and route.source == ingress.ref:
                passthrough[rule.host] = route.upstream
    return passthrough
