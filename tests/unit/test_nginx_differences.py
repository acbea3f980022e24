"""
The last differences between twingress and ingress-nginx, in the table (issue 65): each test cites
the ingress-nginx source it follows, kubernetes/ingress-nginx at commit
dbb11b92ddb77bee9c35e462479129354c84f939 ("@ING" below).  The proxy side of the same behaviours is
tests/proxy/test_nginx_differences.py.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ingress.routing import RoutingTable
from ingress.routing.config_keys import CONFIG_GO_KEYS
from ingress.routing.policies import Redirect
from ingress.routing.report import Built
from ingress.routing.route import Route
from tests.unit.objects import T0, T1, endpoints, ingress, ingress_class, path, rule, service, table, tls_secret

NGINX = "nginx.ingress.kubernetes.io/"
KEY = ("ingress-nginx", "ingress-nginx-controller")


def _config_map(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": KEY[1], "namespace": KEY[0]}, "data": data}


def _route(routes: RoutingTable, host: str, request_path: str) -> Route:
    route = routes.match(host, request_path)
    assert route is not None, (host, request_path)
    return route


def _nginx_class(*objects: dict[str, Any], **options: Any) -> Built:
    """A table built by a controller that took ingress-nginx's class over (as --take-over-ingress-nginx does)."""
    return table(ingress_class("nginx", "k8s.io/ingress-nginx"), *objects, class_name="nginx", controller_name="k8s.io/ingress-nginx", **options)


# 1. The trailing-slash redirect.


@pytest.mark.parametrize("kind", ["Prefix", "Exact", "ImplementationSpecific"])
def test_slash_path_redirects_without_its_slash_for_ingress_nginx_class_only(kind: str) -> None:
    """
    @ING internal/ingress/controller/controller.go (getConfiguration, the comment over updateServerLocations):
    "In response to a request with URI equal to this string, but without the trailing slash, a permanent
    redirect with the code 301 will be returned"; location.go's updateServerLocations keeps "/p/" a location
    ending in "/" (Prefix: "/p/" and "= /p/"; Exact: "= /p/").  twingress's own class keeps the Kubernetes rule.
    """
    nginx = _nginx_class(ingress("app", rule("app.test", path("/p/", kind=kind)), cls="nginx"))
    redirect = _route(nginx.table, "app.test", "/p").policies
    assert redirect is not None and redirect.redirect == Redirect(301, "/p/", keep_query=True)
    assert redirect.redirect.location_for(b"http", "app.test", b"/p?a=1&b=2") == b"http://app.test/p/?a=1&b=2"
    assert _route(nginx.table, "app.test", "/p/").policies is None  # /p/ itself is served
    own = table(ingress("app", rule("app.test", path("/p/", kind=kind))))
    if kind == "Exact":
        assert own.table.match("app.test", "/p") is None
    else:
        assert _route(own.table, "app.test", "/p").policies is None  # Kubernetes Prefix: /p/ matches /p (routing/paths.py)


def test_a_controller_named_as_ingress_nginx_redirects_too() -> None:
    """--controller-name k8s.io/ingress-nginx alone (its IngressClass under any name) is ingress-nginx's class."""
    routes = table(ingress_class("external", "k8s.io/ingress-nginx"), ingress("app", rule("app.test", path("/p/")), cls="external"),
                   class_name="external", controller_name="k8s.io/ingress-nginx")
    policies = _route(routes.table, "app.test", "/p").policies
    assert policies is not None and policies.redirect is not None and policies.redirect.code == 301


def test_no_redirect_where_the_host_routes_the_path_without_slash() -> None:
    """
    @ING location.go updateServerLocations: an Exact "/p" is kept (nginx's "= /p" wins, no redirect), and a
    Prefix "/p" gets its own "= /p"; regex locations (use-regex) are left alone, and have no redirect.
    """
    exact = _nginx_class(ingress("app", rule("app.test", path("/p/"), path("/p", svc="other", kind="Exact")), cls="nginx"))
    assert _route(exact.table, "app.test", "/p").upstream.key == "default/other:80"
    prefix = _nginx_class(ingress("a", rule("app.test", path("/p", svc="other")), cls="nginx"), ingress("b", rule("app.test", path("/p/", kind="Exact")), cls="nginx", created=T1))
    assert _route(prefix.table, "app.test", "/p").upstream.key == "default/other:80"
    regex = _nginx_class(ingress("app", rule("app.test", path("/p/")), cls="nginx", annotations={NGINX + "use-regex": "true"}))
    assert _route(regex.table, "app.test", "/p/x").path == "/p/" and regex.table.match("app.test", "/p") is None  # "^/p/" does not match /p


# 2. ConfigMap keys of config.go that the ConfigMap page leaves out, and ssl-early-data.


def _fates(data: dict[str, str]) -> tuple[bool, list[tuple[str, str]]]:
    routes = table(ingress("app", rule("app.test", path("/")), created=T0), _config_map(data), nginx_configmap=KEY)
    policies = _route(routes.table, "app.test", "/").policies
    closed = policies is not None and policies.deny is not None
    return closed, [(p.reason, p.message) for p in routes.report.problems if p.ref.kind == "ConfigMap"]


@pytest.mark.parametrize(
    ("key", "applied", "reported"),
    [
        ("enable-auth-access-log", "false", "true"),
        ("disable-http-access-log", "false", "true"),
        ("disable-stream-access-log", "true", "false"),
        ("forwarded-host-header", "X-Forwarded-Host", "X-Original-Host"),
        ("proxy-http-version", "1.1", "1.0"),
        ("ssl-early-data", "false", "true"),
    ],
)
def test_config_go_keys_are_applied_or_reported_and_never_close(key: str, applied: str, reported: str) -> None:
    """
    @ING internal/ingress/controller/config/config.go: EnableAuthAccessLog (json "enable-auth-access-log",
    "enable auth access log"), DisableHTTPAccessLog, DisableStreamAccessLog, ProxyHTTPVersion (default "1.1"),
    ForwardedHostHeader (default "X-Forwarded-Host"); docs/user-guide/nginx-configuration/configmap.md
    "ssl-early-data".  None of them guards access: a value twingress already behaves as is applied (no
    report), any other is reported; neither closes a route ("auth" in a name is not a guard).
    """
    assert _fates({key: applied}) == (False, [])
    closed, found = _fates({key: reported})
    assert not closed and [reason for reason, _ in found] == ["UnsupportedConfigKey"]
    assert key in found[0][1] and "not an ingress-nginx" not in found[0][1]


@pytest.mark.parametrize("key", ["bind-address-ipv4", "bind-address-ipv6"])
def test_bind_addresses_are_the_command_lines(key: str) -> None:
    """@ING config.go BindAddressIpv4/BindAddressIpv6 ("the ipv4/ipv6 addresses on which the server will accept requests")."""
    closed, found = _fates({key: "10.0.0.1"})
    assert not closed and found == [("UnsupportedConfigKey", f"{key} is a listener setting in twingress: --http and --https (interface=ADDRESS) on the command line; it is ignored")]


def test_every_config_go_key_is_an_ingress_nginx_key() -> None:
    """None of the config.go keys is reported "not an ingress-nginx ConfigMap key" or closes anything."""
    for key in sorted(CONFIG_GO_KEYS):
        closed, found = _fates({key: "true"})
        assert not closed and all("not an ingress-nginx" not in message for _, message in found), key


def test_disable_proxy_intercept_errors_keeps_upstream_answers() -> None:
    """
    @ING rootfs/etc/nginx/template/nginx.tmpl: "if and $cfg.CustomHTTPErrors (not $cfg.DisableProxyInterceptErrors)"
    is the only place proxy_intercept_errors is turned on for the ConfigMap's custom-http-errors.
    """
    routes = table(ingress("app", rule("app.test", path("/"))), _config_map({"custom-http-errors": "503"}), nginx_configmap=KEY)
    assert _route(routes.table, "app.test", "/").policies.error_pages is not None  # type: ignore[union-attr]
    routes = table(ingress("app", rule("app.test", path("/"))), _config_map({"custom-http-errors": "503", "disable-proxy-intercept-errors": "true"}), nginx_configmap=KEY)
    assert _route(routes.table, "app.test", "/").policies.error_pages is None  # type: ignore[union-attr]


# 3. use-http2, proxy-next-upstream*, service-upstream.


def test_use_http2_false_reaches_the_listener_settings() -> None:
    """@ING config.go UseHTTP2 ("Enables or disables the HTTP/2 support in secure connections", default true); nginx.tmpl "http2 on"."""
    routes = table(ingress("app", rule("app.test", path("/"))), _config_map({"use-http2": "false"}), nginx_configmap=KEY)
    assert routes.table.listener is not None and routes.table.listener.http2 is False
    routes = table(ingress("app", rule("app.test", path("/"))), _config_map({}), nginx_configmap=KEY)
    assert routes.table.listener is not None and routes.table.listener.http2 is True


def _retry(data: dict[str, str], annotations: Optional[dict[str, str]] = None) -> Any:
    app = ingress("app", rule("app.test", path("/")), annotations={NGINX + k: v for k, v in (annotations or {}).items()})
    policies = _route(table(app, _config_map(data), nginx_configmap=KEY).table, "app.test", "/").policies
    assert policies is not None
    return policies.retry


def test_proxy_next_upstream_keys_are_every_routes_defaults() -> None:
    """
    @ING internal/ingress/defaults/main.go ProxyNextUpstream/-Timeout/-Tries are the ConfigMap's defaults of
    the proxy annotations (internal/ingress/annotations/proxy/main.go falls back to them per key): the
    annotation wins, and a key it leaves out has the ConfigMap's value.
    """
    assert _retry({}) is None
    configured = _retry({"proxy-next-upstream": "error timeout http_503", "proxy-next-upstream-tries": "5"})
    assert (configured.statuses, configured.tries, configured.timeout) == (frozenset({503}), 5, 0.0)
    mixed = _retry({"proxy-next-upstream": "error http_502", "proxy-next-upstream-tries": "5"}, {"proxy-next-upstream-tries": "2"})
    assert (mixed.statuses, mixed.tries) == (frozenset({502}), 2)
    off = _retry({"proxy-next-upstream": "off"})
    assert off.on == frozenset()


def test_service_upstream_is_every_ingresss_default() -> None:
    """@ING defaults/main.go ServiceUpstream (json "service-upstream"): the default of the service-upstream annotation, which wins."""
    objects = [service("web", clusterIP="10.96.0.10"), endpoints("web", "10.244.0.5"), ingress("a", rule("a.test", path("/")))]
    objects.append(ingress("b", rule("b.test", path("/")), annotations={NGINX + "service-upstream": "false"}))
    routes = table(*objects, _config_map({"service-upstream": "true"}), nginx_configmap=KEY)
    assert _route(routes.table, "a.test", "/").upstream.endpoints == (("10.96.0.10", 80),)
    assert _route(routes.table, "b.test", "/").upstream.endpoints == (("10.244.0.5", 8080),)


# 4. no-tls-redirect-locations.


def _secured(data: dict[str, str], *paths: str) -> Built:
    app = ingress("app", rule("app.test", *(path(p) for p in paths)), tls=((("app.test",), "tls"),))
    return table(app, tls_secret("tls"), _config_map(data), nginx_configmap=KEY)


def test_no_tls_redirect_locations_default_exempts_the_acme_challenge() -> None:
    """
    @ING config.go NoTLSRedirectLocations default "/.well-known/acme-challenge"; template.go sets
    $force_no_ssl_redirect from isLocationInLocationList (a prefix of the location's path), and
    rootfs/etc/nginx/lua/lua_ingress.lua's redirect_to_https returns false first when it is set.
    """
    routes = _secured({"force-ssl-redirect": "true"}, "/", "/.well-known/acme-challenge/token")
    assert _route(routes.table, "app.test", "/").redirect_https
    assert not _route(routes.table, "app.test", "/.well-known/acme-challenge/token").redirect_https
    without = table(ingress("app", rule("app.test", path("/.well-known/acme-challenge/token")), tls=((("app.test",), "tls"),)), tls_secret("tls"))
    assert not _route(without.table, "app.test", "/.well-known/acme-challenge/token").redirect_https  # no ConfigMap: the same default


def test_no_tls_redirect_locations_custom_list() -> None:
    """@ING test/e2e/settings/no_tls_redirect_locations.go: a custom comma-separated list replaces the default."""
    routes = _secured({"no-tls-redirect-locations": "/public, /health"}, "/", "/public/x", "/health", "/.well-known/acme-challenge/t")
    assert not _route(routes.table, "app.test", "/public/x").redirect_https and not _route(routes.table, "app.test", "/health").redirect_https
    assert _route(routes.table, "app.test", "/.well-known/acme-challenge/t").redirect_https and _route(routes.table, "app.test", "/").redirect_https
