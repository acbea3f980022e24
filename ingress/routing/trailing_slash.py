# -*- test-case-name: tests.unit.test_nginx_differences -*-
"""
ingress-nginx's trailing-slash redirect, for the Ingresses of ingress-nginx's class only.

nginx answers a request for C{/p} with a 301 to C{/p/} (its query kept) when a location C{/p/}
proxies and no location C{= /p} exists: a prefix string location ending in "/" gets that redirect
(ngx_http_core_module, "location"; ingress-nginx's internal/ingress/controller/controller.go quotes
it where it calls updateServerLocations).  ingress-nginx's locations make a Prefix or Exact path
C{/p/} such a location: Prefix C{/p/} becomes C{/p/} and C{= /p/}, Exact C{/p/} becomes C{= /p/}
(internal/ingress/controller/location.go, updateServerLocations); a Prefix C{/p} becomes C{/p/} and
C{= /p}, which serves C{/p} itself; regex locations (use-regex, rewrite-target) get no redirect.

twingress's own class keeps the Kubernetes rule (routing/paths.py: Prefix C{/p/} matches C{/p}).
A controller that takes ingress-nginx's class over (C{--ingress-class nginx} or
C{--controller-name k8s.io/ingress-nginx}, which the take-over preset sets) behaves as ingress-nginx:
each such C{/p/} gets an Exact C{/p} route that answers the 301 (a local answer, no upstream),
unless the host already routes C{/p} itself.  The proxy applies it as any other redirect policy:
the routes without it pay nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from ingress.model import PATH_EXACT
from ingress.routing.hostpaths import HostPaths
from ingress.routing.paths import prefix_key
from ingress.routing.policies import Redirect
from ingress.routing.route import Policies, Route
from ingress.routing.upstream import Upstream

INGRESS_NGINX_CLASS = "nginx"
INGRESS_NGINX_CONTROLLER = "k8s.io/ingress-nginx"


def ingress_nginx_class(class_name: str, controller_name: str) -> bool:
    """Whether the controller serves ingress-nginx's class (by its name, or by its controller's)."""
    return class_name == INGRESS_NGINX_CLASS or controller_name == INGRESS_NGINX_CONTROLLER


def add_slash_redirects(hosts: Iterable[HostPaths]) -> None:
    """Give every host's C{/p/} route (Prefix, Exact, ImplementationSpecific) its C{/p} 301, where C{/p} is not routed already."""
    for paths in hosts:
        for route in (*paths.exact.values(), *paths.prefixes.values()):
            if len(route.path) < 2 or not route.path.endswith("/") or not route.path.isascii():
                continue
            short = route.path[:-1]
            if short in paths.exact:
                continue
            holder = paths.prefixes.get(prefix_key(short))
            if holder is not None and holder.path == short:  # a Prefix /p serves /p (ingress-nginx adds "= /p" for it)
                continue
            paths.exact[short] = _redirect_route(route, short)


def _redirect_route(route: Route, short: str) -> Route:
    """The Exact route of C{short} that answers 301 to the route's own path, the request's query kept."""
    redirect = Redirect(301, route.path, keep_query=True)
    return Route(name=route.name, source=route.source, upstream=Upstream(f"{route.name}#slash", ()), path=short, path_type=PATH_EXACT,
                 policies=Policies(redirect=redirect))
