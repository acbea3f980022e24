"""
The classification of ingress-nginx's keys (L{ingress.routing.config_keys}, L{ingress.routing.annotations.keys}),
walked: every documented key has a class, and every guard key closes or enforces, never serves open.

The key lists are ingress-nginx's documentation at commit dbb11b92 (2026-03-20):
docs/user-guide/nginx-configuration/configmap.md (the ConfigMap keys, C{INGRESS_NGINX_KEYS}) and
docs/user-guide/nginx-configuration/annotations.md (the annotation table, L{DOCUMENTED_ANNOTATIONS}).
"""

from __future__ import annotations

from typing import Any

import pytest

from ingress.routing import RoutingTable
from ingress.routing.annotations.keys import ACCESS_GUARDS, KEYS
from ingress.routing.annotations.keys import ENFORCED_GUARDS as ENFORCED_ANNOTATIONS
from ingress.routing.annotations.keys import HARMLESS as HARMLESS_ANNOTATIONS
from ingress.routing.annotations.keys import SNIPPETS as SNIPPET_ANNOTATIONS
from ingress.routing.config_keys import CONFIG_GO_KEYS, ENFORCED_GUARDS, HARMLESS, REFUSED_GUARDS, SNIPPETS, guard_like
from ingress.routing.config_notes import NOTES
from ingress.routing.nginx_config import _ON_THE_COMMAND_LINE, _READERS, INGRESS_NGINX_KEYS
from ingress.routing.report import Built
from ingress.routing.snippets import guarding_directive
from tests.unit.objects import T0, ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
KEY = ("ingress-nginx", "ingress-nginx-controller")

DOCUMENTED_ANNOTATIONS = """
affinity affinity-canary-behavior affinity-mode app-root auth-always-set-cookie auth-cache-duration auth-cache-key
auth-keepalive auth-keepalive-requests auth-keepalive-share-vars auth-keepalive-timeout auth-method auth-proxy-set-headers
auth-realm auth-request-redirect auth-response-headers auth-secret auth-secret-type auth-signin auth-signin-redirect-param
auth-snippet auth-tls-error-page auth-tls-match-cn auth-tls-pass-certificate-to-upstream auth-tls-secret auth-tls-verify-client
auth-tls-verify-depth auth-type auth-url backend-protocol canary canary-by-cookie canary-by-header canary-by-header-pattern
canary-by-header-value canary-weight canary-weight-total client-body-buffer-size configuration-snippet connection-proxy-header
cors-allow-credentials cors-allow-headers cors-allow-methods cors-allow-origin cors-expose-headers cors-max-age custom-headers
custom-http-errors default-backend denylist-source-range disable-proxy-intercept-errors enable-access-log enable-cors
enable-global-auth enable-modsecurity enable-opentelemetry enable-owasp-core-rules enable-rewrite-log force-ssl-redirect
from-to-www-redirect http2-push-preload limit-burst-multiplier limit-connections limit-rate limit-rate-after limit-rpm limit-rps
limit-whitelist load-balance mirror-host mirror-request-body mirror-target modsecurity-snippet modsecurity-transaction-id
opentelemetry-trust-incoming-span permanent-redirect permanent-redirect-code preserve-trailing-slash proxy-body-size
proxy-buffer-size proxy-buffering proxy-buffers-number proxy-busy-buffers-size proxy-connect-timeout proxy-cookie-domain
proxy-cookie-path proxy-http-version proxy-max-temp-file-size proxy-next-upstream proxy-next-upstream-timeout
proxy-next-upstream-tries proxy-read-timeout proxy-redirect-from proxy-redirect-to proxy-request-buffering proxy-send-timeout
proxy-ssl-ciphers proxy-ssl-name proxy-ssl-protocols proxy-ssl-secret proxy-ssl-server-name proxy-ssl-verify
proxy-ssl-verify-depth rewrite-target satisfy server-alias server-snippet service-upstream session-cookie-change-on-failure
session-cookie-conditional-samesite-none session-cookie-domain session-cookie-expires session-cookie-max-age
session-cookie-name session-cookie-path session-cookie-samesite session-cookie-secure ssl-ciphers ssl-passthrough
ssl-prefer-server-ciphers ssl-redirect stream-snippet temporal-redirect temporal-redirect-code upstream-hash-by
upstream-hash-by-subset upstream-hash-by-subset-size upstream-vhost use-regex whitelist-source-range x-forwarded-prefix
""".split()


def _config_table(data: dict[str, str], annotations: dict[str, str] | None = None) -> Built:
    config_map: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": KEY[1], "namespace": KEY[0]}, "data": data}
    app = ingress("app", rule("app.test", path("/")), annotations=annotations or {}, created=T0)
    return table(app, config_map, nginx_configmap=KEY)


def _closed(routes: RoutingTable) -> bool:
    route = routes.match("app.test", "/")
    assert route is not None
    return route.policies is not None and route.policies.deny is not None


def test_every_documented_configmap_key_has_a_class() -> None:
    """Documented keys, and the keys of config.go the page leaves out (CONFIG_GO_KEYS), each in exactly one class."""
    classes = (ENFORCED_GUARDS, set(REFUSED_GUARDS), SNIPPETS, set(HARMLESS), set(_READERS), set(_ON_THE_COMMAND_LINE), set(NOTES))
    unclassified = sorted(key for key in INGRESS_NGINX_KEYS | CONFIG_GO_KEYS if not any(key in found for found in classes))
    assert unclassified == []
    twice = sorted(key for key in INGRESS_NGINX_KEYS | CONFIG_GO_KEYS if sum(key in found for found in classes) > 1)
    assert twice == []
    assert not CONFIG_GO_KEYS & INGRESS_NGINX_KEYS


@pytest.mark.parametrize("key", sorted(ENFORCED_GUARDS - {"no-auth-locations"}))
def test_an_enforced_guard_with_a_bad_value_closes(key: str) -> None:
    data = {"global-auth-url": "http://auth.example/"} if key.startswith("global-auth-") else {}
    data[key] = {"block-user-agents": "~*(", "block-referers": "Bot, ~[z-a]"}.get(key, "$bad value, not/a/cidr")
    assert _closed(_config_table(data).table)


@pytest.mark.parametrize("key", sorted(REFUSED_GUARDS))
def test_a_refused_guard_closes(key: str) -> None:
    assert _closed(_config_table({"global-auth-url": "http://auth.example/", key: "anything"}).table)


@pytest.mark.parametrize("key", sorted(HARMLESS))
def test_a_harmless_key_is_reported_and_closes_nothing(key: str) -> None:
    routes = _config_table({key: "on"})
    assert not _closed(routes.table)
    assert [p.reason for p in routes.report.problems if p.ref.kind == "ConfigMap"] == ["UnsupportedConfigKey"]


def test_an_unknown_key_closes_only_when_it_looks_like_a_guard() -> None:
    assert _closed(_config_table({"global-auth-urls": "http://auth.example/"}).table)
    assert not _closed(_config_table({"use-gzipp": "true"}).table)
    assert guard_like("deny-source-ranges") and not guard_like("worker-connections")


def test_every_documented_annotation_has_a_class() -> None:
    classes = (set(KEYS), ACCESS_GUARDS, SNIPPET_ANNOTATIONS, set(HARMLESS_ANNOTATIONS))
    assert sorted(name for name in DOCUMENTED_ANNOTATIONS if not any(name in found for found in classes)) == []
    assert not (ACCESS_GUARDS | SNIPPET_ANNOTATIONS) & set(HARMLESS_ANNOTATIONS)


@pytest.mark.parametrize("name", sorted(ACCESS_GUARDS | ENFORCED_ANNOTATIONS))
def test_a_guard_annotation_that_cannot_be_enforced_closes(name: str) -> None:
    """An enforced guard with an unreadable value, or a guard twingress does not enforce: 503 for the Ingress's routes."""
    assert _closed(_config_table({}, {NGINX + name: "$bad (value"}).table)


@pytest.mark.parametrize(
    ("snippet", "guard"),
    [
        ("more_set_headers 'X-A: b';", ""),
        ("add_header X-Frame-Options DENY always;\n# comment ; deny all;\nproxy_set_header X-B \"c d\";", ""),
        ("deny all;", "deny"),
        ("allow 10.0.0.0/8; deny all;", "allow"),
        ("if ($http_x) { return 403; }", "a block or text that is not a plain directive"),
        ("more_set_headers 'X: y'", "a block or text that is not a plain directive"),
        ("auth_basic \"x\";", "auth_basic"),
        ("return 200;", "return"),
    ],
)
def test_snippets_are_harmless_only_when_every_directive_is(snippet: str, guard: str) -> None:
    assert guarding_directive(snippet) == guard


def test_a_snippet_annotation_closes_only_when_it_may_guard() -> None:
    assert _closed(_config_table({}, {NGINX + "configuration-snippet": "deny all;"}).table)
    assert not _closed(_config_table({}, {NGINX + "configuration-snippet": "more_set_headers 'X: y';"}).table)
