"""
The guards of the ingress-nginx controller ConfigMap in the routing table (L{ingress.routing.global_guards}).

Spec: ingress-nginx's docs/user-guide/nginx-configuration/configmap.md (sections "global-auth-url"
to "global-auth-always-set-cookie", "no-auth-locations", "whitelist-source-range",
"denylist-source-range", "block-cidrs"), the ipallowlist/ipdenylist annotation parsers (an Ingress's
annotation replaces the ConfigMap's list) and nginx.tmpl's shouldApplyGlobalAuth (an Ingress's own
auth-url wins, enable-global-auth "false" opts out).  Each guard either holds or closes the routes
it covers: never an open route.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Optional

import pytest

from ingress.routing import RoutingTable
from ingress.routing.route import Policies
from tests.unit.objects import T0, ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
KEY = ("ingress-nginx", "ingress-nginx-controller")
AUTH = "http://auth.example/check"


def _config_map(data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": KEY[1], "namespace": KEY[0]}, "data": data}


def _table(data: dict[str, str], annotations: Optional[dict[str, str]] = None, paths: tuple[str, ...] = ("/",)) -> RoutingTable:
    guarded = ingress("app", rule("app.test", *(path(p) for p in paths)), annotations={NGINX + k: v for k, v in (annotations or {}).items()}, created=T0)
    return table(guarded, _config_map(data), nginx_configmap=KEY)


def _policies(routes: RoutingTable, request_path: str = "/") -> Policies:
    route = routes.match("app.test", request_path)
    assert route is not None and route.policies is not None
    return route.policies


def _closed(routes: RoutingTable, request_path: str = "/") -> str:
    deny = _policies(routes, request_path).deny
    return deny.reason if deny is not None and deny.status == 503 else ""


def test_global_auth_covers_every_route_with_its_companions() -> None:
    """configmap.md "global-auth-url" and companions: as the auth-* annotations of the same names."""
    routes = _table({
        "global-auth-url": AUTH, "global-auth-method": "POST", "global-auth-signin": "https://login.example/start",
        "global-auth-signin-redirect-param": "next", "global-auth-response-headers": "X-User, X-Email",
        "global-auth-request-redirect": "https://back.example/", "global-auth-cache-key": "$remote_user$http_authorization",
        "global-auth-cache-duration": "200 1m", "global-auth-always-set-cookie": "true",
    })
    auth = _policies(routes).external_auth
    assert auth is not None and auth.source == AUTH and auth.method == "POST" and auth.always_set_cookie
    assert auth.response_headers == ("X-User", "X-Email") and auth.request_redirect == "https://back.example/"
    assert auth.cache_seconds(200) == 60 and auth.cache_seconds(401) == 0
    assert "next=" in auth.to_json()["signin"]  # type: ignore[operator]
    assert not _closed(routes)


def test_global_auth_cache_duration_defaults_once_a_key_is_set() -> None:
    """configmap.md "global-auth-cache-duration": "defaults to 200 202 401 5m"."""
    auth = _policies(_table({"global-auth-url": AUTH, "global-auth-cache-key": "$http_authorization"})).external_auth
    assert auth is not None and auth.cache_seconds(401) == 300


def test_enable_global_auth_false_opts_an_ingress_out() -> None:
    """e2e global_external_auth.go: "enable-global-auth = false" gives 200 while other Ingresses get 401."""
    routes = _table({"global-auth-url": AUTH}, {"enable-global-auth": "false"})
    assert _policies(routes).external_auth is None and not _closed(routes)


def test_an_unreadable_opt_out_closes_the_route() -> None:
    routes = _table({"global-auth-url": AUTH}, {"enable-global-auth": "maybe"})
    assert "enable-global-auth" in _closed(routes)


def test_an_ingress_auth_url_wins_over_the_global_one() -> None:
    """nginx.tmpl shouldApplyGlobalAuth: only locations without an ExternalAuth URL of their own."""
    auth = _policies(_table({"global-auth-url": AUTH}, {"auth-url": "http://own.example/auth"})).external_auth
    assert auth is not None and auth.source == "http://own.example/auth"


def test_no_auth_locations_skip_authentication() -> None:
    """configmap.md "no-auth-locations" (default /.well-known/acme-challenge); nginx.tmpl: a location whose path starts with one."""
    routes = _table({"global-auth-url": AUTH}, paths=("/", "/.well-known/acme-challenge/x"))
    assert _policies(routes).external_auth is not None
    assert _policies(routes, "/.well-known/acme-challenge/x").external_auth is None
    routes = _table({"global-auth-url": AUTH, "no-auth-locations": "/public, /health"}, paths=("/", "/public/a", "/.well-known/acme-challenge/x"))
    assert _policies(routes, "/public/a").external_auth is None
    assert _policies(routes, "/.well-known/acme-challenge/x").external_auth is not None  # the list replaces the default


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("global-auth-url", "not a url"),
        ("global-auth-method", "FETCH"),
        ("global-auth-signin", "ftp://login"),
        ("global-auth-signin-redirect-param", "a b"),
        ("global-auth-response-headers", "X-User, X:Bad"),
        ("global-auth-request-redirect", "javascript:alert(1)"),
        ("global-auth-cache-key", "$no_such_variable"),
        ("global-auth-cache-duration", "forever"),
        ("global-auth-always-set-cookie", "sometimes"),
        ("global-auth-snippet", "proxy_set_header X-Tenant a;"),
    ],
)
def test_a_global_auth_companion_that_cannot_be_honoured_closes_what_global_auth_covers(key: str, value: str) -> None:
    data = {"global-auth-url": AUTH, key: value}
    routes = _table(data)
    assert key in _closed(routes) and _policies(routes).external_auth is None
    opted_out = _table(data, {"enable-global-auth": "false"})
    assert not _closed(opted_out)  # not covered by global auth: not closed by it
    assert any(p.reason == "UnenforcedGuard" and key in p.message for p in routes.problems)


def test_companions_without_the_url_are_reported_and_change_nothing() -> None:
    routes = _table({"global-auth-method": "POST", "global-auth-snippet": "x"})
    assert _policies(routes).external_auth is None and not _closed(routes)
    assert any(p.reason == "UnsupportedConfigKey" and "without global-auth-url" in p.message for p in routes.problems)
    assert not any(p.reason == "UnenforcedGuard" for p in routes.problems)  # global-auth-snippet covers nothing here


def test_global_source_ranges_and_the_annotations_that_replace_them() -> None:
    """configmap.md "whitelist-source-range", "denylist-source-range": "This can be overwritten by an annotation on an Ingress rule"."""
    data = {"whitelist-source-range": "10.0.0.0/8", "denylist-source-range": "10.1.0.0/16"}
    ranges = _policies(_table(data)).source_ranges
    assert ranges is not None and ranges.permits("10.2.0.1") and not ranges.permits("10.1.0.1") and not ranges.permits("192.0.2.1")
    own = _policies(_table(data, {"whitelist-source-range": "192.0.2.0/24"})).source_ranges
    assert own is not None and own.permits("192.0.2.1") and not own.permits("10.2.0.1")
    assert own.deny == (ipaddress.ip_network("10.1.0.0/16"),)  # its own allow list; the global deny list stays
    own_deny = _policies(_table(data, {"denylist-source-range": "10.2.0.0/16"})).source_ranges
    assert own_deny is not None and own_deny.permits("10.1.0.1") and not own_deny.permits("10.2.0.1")


@pytest.mark.parametrize("key", ["whitelist-source-range", "denylist-source-range"])
def test_an_unparsable_global_range_closes_the_routes_without_their_own(key: str) -> None:
    routes = _table({key: "10.0.0.0/8, not-a-cidr"})
    assert key in _closed(routes)
    assert not _closed(_table({key: "10.0.0.0/8, not-a-cidr"}, {key: "192.0.2.0/24"}))


def test_block_cidrs_is_a_table_wide_refusal() -> None:
    """configmap.md "block-cidrs": "request from which have to be blocked globally"; e2e global_access_block.go: 403."""
    routes = _table({"block-cidrs": "172.16.0.0/12,192.168.0.0/16, 10.0.0.0/8"})
    assert routes.blocked is not None and routes.blocked.refuses("10.0.0.1", None, None) == "block-cidrs"
    assert routes.blocked.refuses("198.51.100.1", "AlphaBot", None) == ""
    assert routes.to_json()["globalBlock"]["cidrs"] == ["172.16.0.0/12", "192.168.0.0/16", "10.0.0.0/8"]
    closed = _table({"block-cidrs": "10.0.0.0/8,bad"})
    assert "block-cidrs" in _closed(closed)


def test_block_user_agents_and_referers_are_nginx_maps() -> None:
    """
    configmap.md "block-user-agents", "block-referers" (nginx map entries: ~ regex, ~* ignoring case, else
    the whole string ignoring case); e2e global_access_block.go's values and requests.
    """
    routes = _table({"block-user-agents": "~*chrome\\/68\\.0\\.3440\\.106\\ safari\\/537\\.36,AlphaBot", "block-referers": "~*example\\.com,qwerty"})
    block = routes.blocked
    assert block is not None
    chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/68.0.3440.106 Safari/537.36"
    iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 11_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/11.0 Mobile/15E148 Safari/604.1"
    assert block.refuses("198.51.100.1", chrome, None) == "block-user-agents"
    assert block.refuses("198.51.100.1", "alphabot", None) == "block-user-agents"
    assert block.refuses("198.51.100.1", iphone, None) == ""
    assert block.refuses("198.51.100.1", "AlphaBot/2", None) == ""  # a string is the whole value
    assert [block.refuses("198.51.100.1", None, r) for r in ("example.com", "qwerty", "qwerty123")] == ["block-referers", "block-referers", ""]
    assert "block-user-agents" in _closed(_table({"block-user-agents": "~*(unclosed"}))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("modsecurity-snippet", "SecRuleEngine On"),
        ("server-snippet", "deny 10.0.0.0/8;"),
        ("http-snippet", "if ($bad) { return 403; }"),
        ("location-snippet", "access_by_lua_block { ngx.exit(403) }"),
        ("global-auth-uri", AUTH),  # a typo of a guard key
        ("whitelist-source-ranges", "10.0.0.0/8"),
    ],
)
def test_guards_twingress_does_not_enforce_close_every_route(key: str, value: str) -> None:
    routes = _table({key: value})
    assert key in _closed(routes)
    assert any(p.reason == "UnenforcedGuard" and key in p.message for p in routes.problems)


def test_a_snippet_of_header_directives_is_reported_and_closes_nothing() -> None:
    routes = _table({"server-snippet": "more_set_headers 'X-Frame-Options: DENY'; # a comment\nproxy_set_header X-A b;"})
    assert not _closed(routes)
    assert any(p.reason == "UnsupportedConfigKey" and "server-snippet" in p.message for p in routes.problems)


def test_without_guards_a_plain_route_has_no_guard_policy() -> None:
    """The cost side: a ConfigMap without guards gives plain routes no guard to check."""
    policies = _policies(_table({"proxy-body-size": "2m"}))
    assert (policies.deny, policies.source_ranges, policies.external_auth, policies.basic_auth) == (None, None, None, None)
    assert _table({}).blocked is None


@pytest.mark.parametrize("key", ["block-cidrs", "whitelist-source-range", "denylist-source-range", "modsecurity-snippet", "global-auth-snippet"])
def test_an_empty_guard_key_is_unset_and_closes_nothing(key: str) -> None:
    """
    configmap.md (tests/data/ingress-nginx-docs, commit dbb11b92): block-cidrs "", whitelist- and
    denylist-source-range []string{}, modsecurity-snippet "" and global-auth-snippet "" are the defaults,
    so a ConfigMap that spells the default out (as its docs' every-key table does) guards nothing.
    """
    routes = _table({key: "", "proxy-body-size": "2m"})
    assert not _closed(routes)
    assert not any(p.reason == "UnenforcedGuard" for p in routes.problems)
    policies = _policies(routes)
    assert policies.deny is None and policies.source_ranges is None
