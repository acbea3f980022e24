# -*- test-case-name: tests.unit.test_routing -*-
"""
C{build(state, options) -> Built}: networking.k8s.io/v1 Ingress semantics, as a pure function.

Every decision that depends on more than one object (which Ingresses are
ours, who wins a conflicting path or default backend, which addresses a
backend has) is made here, once per snapshot, so that a request only does
dictionary probes.  Ingresses are processed oldest first and every index is
built once per call, which keeps the result independent of input order and
the cost linear in the size of the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Optional

from ingress.model import (
    PATH_EXACT,
    ClusterState,
    ConfigMap,
    Ingress,
    IngressBackend,
    ObjectRef,
    OpaqueSecret,
    Problem,
    TLSSecret,
)
from ingress.routing.acme_challenges import add_challenge_routes
from ingress.routing.annotations import CANARY_WITHOUT_MAIN, INVALID_PATH, IngressAnnotations, read_annotations
from ingress.routing.annotations.backend import MissingSecret, backend_tls
from ingress.routing.annotations.errorpages import error_pages
from ingress.routing.annotations.policies import BadPath, compile_path, route_policies, route_rate_limit
from ingress.routing.backends import Backends
from ingress.routing.build_options import DEFAULT_BUILD_OPTIONS, BuildOptions
from ingress.routing.certs import build_certificates, passthrough_upstreams, tls_hosts, with_tls_options
from ingress.routing.clienthosts import client_auth_hosts, with_client_auth
from ingress.routing.gateway import build_gateway_routes
from ingress.routing.gateway.addresses import address_tables, with_address_views
from ingress.routing.gateway.merge import merge_gateway
from ingress.routing.gateway.ports import port_table
from ingress.routing.gateway.status import with_addresses
from ingress.routing.hostpaths import HostPaths, RegexRoutes, freeze_hosts
from ingress.routing.nginx_config import TWINGRESS_DEFAULTS, NginxConfig, read_nginx_config
from ingress.routing.paths import prefix_key
from ingress.routing.policies import Redirect
from ingress.routing.policies.affinity import upstream_tag
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.report import BuildReport, Built
from ingress.routing.resolutions import IngressResolutions
from ingress.routing.route import Canary, Policies
from ingress.routing.selection import select_and_skip
from ingress.routing.streams import build_streams
from ingress.routing.table import Route, RoutingTable, Upstream
from ingress.routing.tls_alpn_challenges import tls_alpn_certificates
from ingress.routing.trailing_slash import add_slash_redirects, ingress_nginx_class


def build(state: ClusterState, options: BuildOptions = DEFAULT_BUILD_OPTIONS, generation: int = 0) -> Built:
    """
    The routing table for C{state} (our Ingresses' rules, merged across Ingresses, and the streams),
    with the build's report beside it (L{Built}: the table goes to the workers, the report does not).

    Nothing in C{state} makes this raise: a missing Service or a conflicting
    path is reported in the report's C{problems} and the rest of the table is built.
    C{options} (L{BuildOptions}) are the command line's: which class is ours, the
    ConfigMaps read, the ports the listeners hold, the Gateway address pool.
    C{generation} numbers the table (the builder's count of builds).
    """
    class_name, controller_name, reserved_ports = options.class_name, options.controller_name, options.reserved_ports
    default_certificate, nginx_configmap = options.default_certificate, options.nginx_configmap
    config, config_problems = read_nginx_config(state.config_maps, nginx_configmap) if nginx_configmap else (TWINGRESS_DEFAULTS, [])
    ingresses, skipped = select_and_skip(state, class_name=class_name, controller_name=controller_name)
    annotations = {ingress.ref: read_annotations(ingress, options.nginx_annotations) for ingress in ingresses}
    valid = tuple(ingress for ingress in ingresses if not annotations[ingress.ref].invalid)
    served = tuple(ingress for ingress in valid if not annotations[ingress.ref].canary)
    backends = Backends(state)
    streams = build_streams(
        state, backends.upstream, tcp_services=options.tcp_services, udp_services=options.udp_services, reserved_ports=reserved_ports
    )
    routes = _RouteBuilder(backends, annotations, tls_hosts(served), regex_hosts(served, annotations), state.secrets, config, state.opaque_secrets, state.config_maps)
    for ingress in served:
        routes.add_rules(ingress)
    for ingress in valid:
        if annotations[ingress.ref].canary:
            routes.add_canary(ingress)
    routes.add_host_aliases(served)
    if ingress_nginx_class(class_name, controller_name):  # nginx's 301 from /p to /p/, for ingress-nginx's class only
        add_slash_redirects((*routes.hosts.values(), *routes.wildcards.values(), routes.any_host))
    gateway = build_gateway_routes(state, backends, reserved_ports, options.gateway_controller_name, options.cleartext_http2)
    if options.acme_challenges:  # after the slash redirects: a token's exact route wins over anything they add
        add_challenge_routes(state.config_maps, routes.paths_of, frozenset(routes.hosts), gateway.hosts)
    default_route = routes.default_route(served)
    certificates, tls_problems = build_certificates(state, served, default_certificate)
    client_hosts, client_problems = client_auth_hosts(served, annotations, state)
    certificates = replace(certificates, client_auth={host: auth for host, auth in client_hosts.items() if isinstance(auth, ClientAuth) and auth.asks})
    annotation_problems = [problem for found in annotations.values() for problem in found.problems] + client_problems
    hosts = with_client_auth(freeze_hosts(routes.hosts), client_hosts)
    wildcards = with_client_auth(freeze_hosts(routes.wildcards), {host[2:]: auth for host, auth in client_hosts.items() if host.startswith("*.")})
    by_address, address_problems = address_tables(state, backends, options, generation, config)
    if by_address:
        gateway.status = with_addresses(gateway.status, {ref: address for ref, (address, _) in by_address.items()})
    any_host = routes.any_host.freeze() if routes.any_host.routes else None
    passthrough = passthrough_upstreams(served, annotations, hosts, wildcards)
    merged = merge_gateway(gateway, hosts, wildcards, any_host, certificates, state.secrets, passthrough, streams.streams)
    problems = set(routes.problems) | set(tls_problems) | set(streams.problems) | set(annotation_problems) | set(config_problems)
    table = RoutingTable(
        generation=generation,
        hosts=merged.hosts,
        wildcards=wildcards,
        deep_wildcards=merged.deep_wildcards,
        passthrough=merged.passthrough,
        deep_passthrough=merged.deep_passthrough,
        tls_terminated=merged.tls_terminated,
        any_host=merged.any_host,
        default_route=default_route,
        certificates=merged.certificates,
        streams=merged.streams,
        trust=config.trust,
        listener=config.listener,
        blocked=config.guards.block,
        rejects_unknown_tls_names=gateway.tls_listeners, https_listeners=gateway.https_names,
        gateway_ports={
            port: with_address_views(port_table(routes, generation, state.secrets, config, default_certificate), by_address, port)
            for port, routes in gateway.own_ports.items()
        },
        addresses={address: table for address, table in by_address.values()},
        request_ids=config.generate_request_id,
        acme_tls_alpn=tls_alpn_certificates(state.config_maps) if options.acme_challenges else {},
    )
    report = BuildReport(
        problems=_sorted_problems(state.problems) + _sorted_problems(problems | set(merged.problems) | set(address_problems)),
        class_skipped=skipped,
        gateway_status=gateway.status if gateway.status.classes or gateway.status.gateways else None,
        stream_conditions=streams.conditions,
    )
    return Built(table, report)



def regex_hosts(ingresses: Iterable[Ingress], annotations: Mapping[ObjectRef, IngressAnnotations]) -> frozenset[str]:
    """
    The hosts whose paths are all regular expressions (ingress-nginx "Use Regex"): use-regex or
    rewrite-target on any Ingress of a host makes every path of that host, of every Ingress, a
    case-insensitive regex anchored at the start, tried longest path first.
    """
    return frozenset(rule.host for ingress in ingresses if annotations[ingress.ref].regex_paths for rule in ingress.rules)


class _RouteBuilder:
    """Claims (host, path) slots for Ingresses given oldest first: the first claim wins."""

    def __init__(
        self,
        backends: Backends,
        annotations: Mapping[ObjectRef, IngressAnnotations],
        tls_hosts: frozenset[str] = frozenset(),
        regex_hosts: frozenset[str] = frozenset(),
        secrets: Mapping[tuple[str, str], TLSSecret] = {},
        config: NginxConfig = TWINGRESS_DEFAULTS,
        opaque_secrets: Mapping[tuple[str, str], OpaqueSecret] = {},
        config_maps: Mapping[tuple[str, str], ConfigMap] = {},
    ) -> None:
        self.secrets = secrets
        self.config = config
        self.backends = backends
        self.annotations = annotations
        self.tls_hosts = tls_hosts
        self.regex_hosts = regex_hosts
        self.hosts: dict[str, HostPaths] = {}
        self.wildcards: dict[str, HostPaths] = {}
        self.any_host = HostPaths()
        self.problems: list[Problem] = []
        self.resolved = IngressResolutions(backends, opaque_secrets, config_maps, self.problems)

    def paths_of(self, host: str) -> HostPaths:
        if not host:
            return self.any_host
        if host.startswith("*."):
            return self.wildcards.setdefault(host[2:], HostPaths())
        return self.hosts.setdefault(host, HostPaths())

    def add_rules(self, ingress: Ingress) -> None:
        """Every path of every rule; a rule without paths adds nothing (and claims no host)."""
        for rule in ingress.rules:
            if not rule.paths:
                continue
            paths = self.paths_of(rule.host)
            regex = rule.host in self.regex_hosts
            for http_path in rule.paths:
                if regex:
                    self._add_regex(ingress, paths, rule.host, http_path.path, http_path.backend, http_path.path_type)
                    continue
                if http_path.path_type == PATH_EXACT:
                    slots, key = paths.exact, http_path.path
                else:  # Prefix, and ImplementationSpecific which we define as Prefix
                    slots, key = paths.prefixes, prefix_key(http_path.path)
                winner = slots.get(key)
                if winner is None:
                    route = self.route(ingress, http_path.backend, http_path.path, http_path.path_type)
                    slots[key] = with_tls_options(route, self.annotations[ingress.ref], rule.host, self.tls_hosts, self.config)
                else:
                    where = f'host "{rule.host or "*"}" {http_path.path_type} path "{http_path.path}"'
                    self._conflict(ingress, winner, where)

    def _add_regex(self, ingress: Ingress, paths: HostPaths, host: str, path: str, backend: IngressBackend, path_type: str) -> None:
        """A path of a regex host: any path type is the regex "^path", and the first claim of a path wins."""
        winner = paths.regex.get(path)
        if winner is not None:
            self._conflict(ingress, winner[1], f'host "{host or "*"}" regex path "{path}"')
            return
        try:
            pattern = compile_path(path)
            route = self.route(ingress, backend, path, path_type, regex=True)
        except BadPath as error:
            self.problems.append(Problem(ingress.ref, INVALID_PATH, f"{error}; the path is not served"))
            return
        paths.regex[path] = (pattern, with_tls_options(route, self.annotations[ingress.ref], host, self.tls_hosts, self.config))

    def add_host_aliases(self, ingresses: Iterable[Ingress]) -> None:
        """
        ingress-nginx "Server Alias" and "Redirect from/to www", once every rule has claimed its host:
        an alias (or the www/apex counterpart) that some Ingress names as a host is left alone, as
        ingress-nginx ignores it then; two Ingresses aliasing one name: the oldest wins.
        """
        named = set(self.hosts)
        claimed: dict[str, Ingress] = {}
        for ingress in ingresses:
            read = self.annotations[ingress.ref]
            hosts = [rule.host for rule in ingress.rules if rule.host and not rule.host.startswith("*.") and rule.host in self.hosts]
            if not hosts:
                continue
            aliases = read.value("server-alias")
            for alias in aliases if isinstance(aliases, tuple) else ():
                if self._claim_alias(ingress, alias, named, claimed, "server-alias"):
                    self.hosts[alias] = self.hosts[hosts[0]]
            if read.flag("from-to-www-redirect"):
                for host in hosts:
                    other = host[4:] if host.startswith("www.") else "www." + host
                    if self._claim_alias(ingress, other, named, claimed, "from-to-www-redirect"):
                        self.hosts[other] = self._redirect_host(ingress, host)

    def _claim_alias(self, ingress: Ingress, alias: str, named: set[str], claimed: dict[str, Ingress], what: str) -> bool:
        if alias in named:
            return False  # a host of its own: ingress-nginx ignores the alias
        if alias in claimed:
            message = f'{what} "{alias}" ignored: Ingress {claimed[alias].meta.namespace}/{claimed[alias].meta.name} claimed it first'
            self.problems.append(Problem(ingress.ref, "Conflict", message))
            return False
        claimed[alias] = ingress
        return True

    def _redirect_host(self, ingress: Ingress, to_host: str) -> HostPaths:
        """Every request to the counterpart host: 308 to the same URI on C{to_host} (ingress-nginx's http-redirect-code)."""
        name = f"{ingress.meta.namespace}/{ingress.meta.name}"
        empty = Upstream(f"{name}#redirect", ())
        route = Route(name=name, source=ingress.ref, upstream=empty, policies=Policies(redirect=Redirect(self.config.redirect_code, to_host=to_host)))
        return HostPaths(prefixes={"": route})

    def add_canary(self, ingress: Ingress) -> None:
        """
        A canary Ingress's paths join the main routes of the same host and path
        (ingress-nginx "Canary"); one canary per route, the oldest; a path no main
        Ingress serves is not served by the canary alone.
        """
        for rule in ingress.rules:
            paths = self.paths_of(rule.host)
            for http_path in rule.paths:
                slots, key = self._slot(paths, rule.host, http_path.path, http_path.path_type)
                main = slots.get(key)
                where = f'host "{rule.host or "*"}" path "{http_path.path}"'
                if main is None:
                    message = f"canary for {where}, which no main Ingress serves: a canary only adds to the main Ingress of its host and path"
                    self.problems.append(Problem(ingress.ref, CANARY_WITHOUT_MAIN, message))
                elif main.policies is not None and main.policies.canary is not None:
                    self._conflict(ingress, main.policies.canary.route, f"canary for {where}")
                else:
                    slots[key] = self._with_canary(main, ingress, http_path.backend)

    def _slot(self, paths: HostPaths, host: str, path: str, path_type: str) -> tuple[dict[str, Route], str]:
        """Where the route of a host and path lives (regex hosts: the pattern's own dict)."""
        if host in self.regex_hosts:
            return RegexRoutes(paths.regex), path
        if path_type == PATH_EXACT:
            return paths.exact, path
        return paths.prefixes, prefix_key(path)

    def _with_canary(self, main: Route, ingress: Ingress, backend: IngressBackend) -> Route:
        """The main route, with the canary's route (the main's policies, the canary's name and upstream) attached."""
        read = self.annotations[ingress.ref]
        upstream, issue = self.backends.upstream(ingress.meta.namespace, backend)
        if issue is not None:
            self.problems.append(Problem(ingress.ref, *issue))
        policies = main.policies or Policies()
        # "all the other non-canary annotations will be ignored (inherited from the corresponding main
        # ingress) except load-balance, upstream-hash-by, and annotations related to session affinity"
        try:
            own = route_policies(read, main.path, config=self.config) or Policies()
        except BadPath:
            own = Policies()  # the canary's rewrite of a path that is no regex: ignored anyway
        sticky = read.text("affinity-canary-behavior") != "legacy"
        canary_policies = replace(policies, affinity=own.affinity if sticky else None, hash_by=own.hash_by, load_balance=own.load_balance)
        canary_route = replace(
            main, name=f"{ingress.meta.namespace}/{ingress.meta.name}", source=ingress.ref, upstream=upstream, policies=canary_policies
        )
        header = read.text("canary-by-header")
        pattern = read.value("canary-by-header-pattern")
        canary = Canary(
            route=canary_route,
            by_header=header.lower().encode("latin-1"),
            header_value=read.text("canary-by-header-value").encode("latin-1"),
            header_pattern=pattern if isinstance(pattern, re.Pattern) else None,
            by_cookie=read.text("canary-by-cookie"),
            weight=int(read.number("canary-weight") or 0),
            weight_total=int(read.number("canary-weight-total") or 100),
            main_tag=upstream_tag(main.upstream.key),
            sticky=sticky,
        )
        return replace(main, policies=replace(policies, canary=canary))

    def default_route(self, ingresses: Iterable[Ingress]) -> Optional[Route]:
        """The oldest default backend among our Ingresses; the others are reported, not used."""
        winner: Optional[Route] = None
        for ingress in ingresses:
            if ingress.default_backend is None:
                continue
            if winner is None:
                winner = self.route(ingress, ingress.default_backend, "", "")
            else:
                self._conflict(ingress, winner, "spec.defaultBackend")
        return winner

    def route(self, ingress: Ingress, backend: IngressBackend, path: str, path_type: str, regex: bool = False) -> Route:
        """A route to C{backend}, resolved in the Ingress's own namespace."""
        read = self.annotations[ingress.ref]
        if read.flag("service-upstream", self.config.service_upstream):  # the ConfigMap's key is the default
            upstream, issue = self.backends.service_upstream(ingress.meta.namespace, backend)
        else:
            upstream, issue = self.backends.upstream(ingress.meta.namespace, backend)
        if issue is not None:
            self.problems.append(Problem(ingress.ref, *issue))
        name = f"{ingress.meta.namespace}/{ingress.meta.name}"
        if not read.values and not read.unguarded:  # no annotation: no policy but the ConfigMap's (most Ingresses)
            return Route(name=name, source=ingress.ref, upstream=upstream, path=path, path_type=path_type, policies=route_policies(read, path, regex, config=self.config))
        tls, closed = None, ""
        try:
            tls = backend_tls(ingress, read, backend.service_name, self.secrets)
        except MissingSecret as error:
            closed = str(error)
            self.problems.append(Problem(ingress.ref, "SecretNotFound", f"{error}: the Ingress's routes answer 503"))
        auth, auth_closed = self.resolved.basic_auth(ingress, read)
        external, external_closed = self.resolved.external_auth(ingress, read)
        rate = route_rate_limit(read, name, self.config)
        global_codes = self.config.error_pages.codes if self.config.error_pages is not None else frozenset()
        pages, upstream = error_pages(ingress, read, backend, upstream, self.resolved.default_backend(ingress, read), global_codes)
        headers, headers_closed = self.resolved.custom_headers(ingress, read, self.config.allowed_response_headers)
        closed = closed or auth_closed or external_closed or headers_closed
        policies = route_policies(read, path, regex, tls, closed, self.config, auth, external, rate, pages, headers)
        return Route(name=name, source=ingress.ref, upstream=upstream, path=path, path_type=path_type, policies=policies)

    def _conflict(self, loser: Ingress, winner: Route, what: str) -> None:
        """The loser is told who won: the oldest Ingress, then namespace/name, then rule order."""
        message = f"{what} ignored: Ingress {winner.name} claimed it first"
        if winner.source == loser.ref:
            message += " (earlier in the same Ingress)"
        self.problems.append(Problem(loser.ref, "Conflict", message))


def _sorted_problems(problems: Iterable[Problem]) -> tuple[Problem, ...]:
    """Problems in a stable order (object, reason, message): the table must not depend on input order."""
    return tuple(sorted(problems, key=lambda p: (p.ref, p.reason, p.message)))
