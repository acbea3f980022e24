"""
Tests for the ingress-nginx controller ConfigMap (L{ingress.routing.nginx_config}) as route defaults.

ingress-nginx's ConfigMap page (docs/user-guide/nginx-configuration/configmap.md) is the
specification: its defaults (ssl-redirect true, http-redirect-code 308, hsts true with
max-age 31536000 and includeSubDomains, proxy-body-size 1m, proxy timeouts 5/60/60) and
that an Ingress's annotations override the ConfigMap.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ingress.routing import RoutingTable
from ingress.routing.nginx_config import ListenerSettings
from ingress.routing.policies.limits import UNLIMITED, Limits
from ingress.routing.report import Built
from ingress.routing.route import Policies, Route
from tests.unit.objects import T0, ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
KEY = ("ingress-nginx", "ingress-nginx-controller")
SECRET = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "tls", "namespace": "default"},
          "stringData": {"tls.crt": "x", "tls.key": "y"}}


def _config_map(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": KEY[1], "namespace": KEY[0]}, "data": data}


def _table(data: Optional[dict[str, str]], annotations: Optional[dict[str, str]] = None) -> Built:
    secured = ingress("secured", rule("tls.test", path("/")), annotations={NGINX + k: v for k, v in (annotations or {}).items()}, created=T0)
    secured["spec"]["tls"] = [{"hosts": ["tls.test"], "secretName": "tls"}]
    plain = ingress("plain", rule("plain.test", path("/")), annotations={NGINX + k: v for k, v in (annotations or {}).items()}, created=T0)
    objects = [secured, plain, SECRET] + ([_config_map(data)] if data is not None else [])
    return table(*objects, nginx_configmap=KEY)


def _route(routes: RoutingTable, host: str) -> Route:
    route = routes.match(host, "/")
    assert route is not None
    return route


def test_without_the_option_twingress_defaults_hold() -> None:
    routes = table(ingress("plain", rule("plain.test", path("/"))))
    assert _route(routes.table, "plain.test").policies is None


def test_an_empty_configmap_means_ingress_nginx_defaults() -> None:
    routes = _table({})
    secured, plain = _route(routes.table, "tls.test"), _route(routes.table, "plain.test")
    assert (secured.redirect_https, secured.https_redirect_code, secured.hsts) == (True, 308, "max-age=31536000; includeSubDomains")
    assert (plain.redirect_https, plain.hsts) == (False, "")  # HSTS only "in servers running SSL"
    assert plain.policies is not None and plain.policies.limits == Limits(5.0, 60.0, 60.0, 1 << 20)


def test_a_missing_configmap_is_reported_and_its_defaults_apply() -> None:
    routes = _table(None)
    assert ("ConfigMap", "NotFound") in [(p.ref.kind, p.reason) for p in routes.report.problems]
    assert _route(routes.table, "tls.test").hsts == "max-age=31536000; includeSubDomains"


@pytest.mark.parametrize(
    ("data", "hsts"),
    [
        ({"hsts": "false"}, ""),
        ({"hsts-max-age": "600", "hsts-include-subdomains": "false"}, "max-age=600"),
        ({"hsts-preload": "true"}, "max-age=31536000; includeSubDomains; preload"),
    ],
)
def test_hsts(data: dict[str, str], hsts: str) -> None:
    assert _route(_table(data).table, "tls.test").hsts == hsts


def test_redirect_keys() -> None:
    routes = _table({"ssl-redirect": "false", "force-ssl-redirect": "true", "http-redirect-code": "301"})
    for host in ("tls.test", "plain.test"):
        route = _route(routes.table, host)
        assert (route.redirect_https, route.https_redirect_code) == (True, 301)
    assert not _route(_table({"ssl-redirect": "false"}).table, "tls.test").redirect_https


def test_limits_are_defaults_that_annotations_override() -> None:
    routes = _table({"proxy-body-size": "0", "proxy-read-timeout": "120"}, {"proxy-connect-timeout": "2"})
    policies = _route(routes.table, "plain.test").policies
    assert policies is not None and policies.limits == Limits(2.0, 120.0, 60.0, UNLIMITED)
    assert _route(_table({}, {"ssl-redirect": "false"}).table, "tls.test").redirect_https is False  # annotation over ConfigMap


def test_keys_that_are_not_read_are_reported() -> None:
    routes = _table({"enable-brotli": "true", "no-such-key": "1", "proxy-read-timeout": "1m", "allow-snippet-annotations": "true"})
    reported = sorted((p.reason, p.message.split(" ", 1)[0]) for p in routes.report.problems if p.ref.kind == "ConfigMap")
    assert reported == [
        ("InvalidConfigKey", "proxy-read-timeout:"),
        ("UnknownConfigKey", "no-such-key"),
        ("UnsupportedConfigKey", "allow-snippet-annotations"),
        ("UnsupportedConfigKey", "enable-brotli"),
    ]
    policies = _route(routes.table, "plain.test").policies
    assert policies is not None and policies.limits is not None and policies.limits.read_timeout == 60.0  # the invalid value: the default


def test_load_balance_is_a_default_too() -> None:
    assert (_route(_table({"load-balance": "ewma"}).table, "plain.test").policies or Policies()).load_balance == "ewma"
    routes = _table({"load-balance": "ewma"}, {"load-balance": "round_robin"})
    assert (_route(routes.table, "plain.test").policies or Policies()).load_balance == ""  # the annotation wins


def test_add_headers_and_proxy_set_headers_name_configmaps() -> None:
    """
    "add-headers" and "proxy-set-headers": ConfigMaps of header fields (namespace/name); values with the
    variables twingress computes are templates (custom-headers.yaml's "t=${msec}"), others are refused.
    """
    objects = [
        _config_map({"add-headers": "ingress-nginx/response-fields", "proxy-set-headers": "request-fields"}),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "response-fields", "namespace": "ingress-nginx"},
         "data": {"X-Frame-Options": "DENY", "X-Request-Start": "t=${msec}", "X-Upstream": "$upstream_addr"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "request-fields", "namespace": "ingress-nginx"},
         "data": {"X-Edge": "twingress"}},
        ingress("plain", rule("plain.test", path("/"))),
    ]
    routes = table(*objects, nginx_configmap=KEY)
    policies = _route(routes.table, "plain.test").policies
    assert policies is not None and policies.response_headers is not None and policies.request_headers is not None
    assert policies.response_headers.lines == b"X-Frame-Options: DENY\r\n"
    assert policies.request_headers.lines == b"X-Edge: twingress\r\n"
    assert policies.response_headers.templates == (("X-Request-Start", (("text", "t="), ("var", "msec"))),)
    assert [(p.reason, "$upstream_addr" in p.message) for p in routes.report.problems if p.ref.kind == "ConfigMap"] == [("UnsupportedConfigKey", True)]


def test_a_missing_header_configmap_is_reported() -> None:
    routes = table(_config_map({"add-headers": "ingress-nginx/nowhere"}), ingress("plain", rule("plain.test", path("/"))), nginx_configmap=KEY)
    assert ("InvalidConfigKey", True) in [(p.reason, "nowhere" in p.message) for p in routes.report.problems]


def test_client_timeouts_point_to_the_command_line() -> None:
    routes = _table({"client-header-timeout": "30", "client-body-timeout": "30"})
    messages = [p.message for p in routes.report.problems if p.ref.kind == "ConfigMap"]
    assert any("--header-timeout" in m for m in messages) and any("--client-body-timeout" in m for m in messages)


def test_connection_settings_with_ingress_nginx_defaults() -> None:
    assert table(ingress("plain", rule("plain.test", path("/")))).table.listener is None  # without the option: the command line's
    assert _table({}).table.listener == ListenerSettings(75.0, 1000, 320, 60.0, "1.2", "", "")
    listener = _table(
        {"keep-alive": "0", "keep-alive-requests": "10", "upstream-keepalive-connections": "0", "upstream-keepalive-timeout": "5",
         "ssl-protocols": "TLSv1.2", "ssl-ciphers": "ECDHE-RSA-AES128-GCM-SHA256"}
    ).table.listener
    assert listener == ListenerSettings(0.0, 10, 0, 5.0, "1.2", "1.2", "ECDHE-RSA-AES128-GCM-SHA256")
    assert _table({"ssl-protocols": "TLSv1.3"}).table.listener == ListenerSettings(75.0, 1000, 320, 60.0, "1.3", "", "")


def test_old_tls_versions_are_refused() -> None:
    routes = _table({"ssl-protocols": "TLSv1 TLSv1.1 TLSv1.2"})
    assert [p.reason for p in routes.report.problems if p.ref.kind == "ConfigMap"] == ["InvalidConfigKey"]
    assert routes.table.listener is not None and routes.table.listener.tls_min_version == "1.2"
