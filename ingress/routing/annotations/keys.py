# -*- test-case-name: tests.unit.test_annotations -*-
"""
Which annotation keys twingress reads, how each value is read, and what it does with the others.

A key is read under C{twingress.io/} and, unless C{--nginx-annotations false},
under C{nginx.ingress.kubernetes.io/}, with the same value format (the
C{twingress.io/} one wins when both are set).  ingress-nginx's other keys are
known by kind: snippets are never executed (raw nginx configuration, the attack
surface of CVE-2025-1974); access guards that twingress does not enforce yet,
and enforced ones whose value cannot be read, close the route (503) instead of
leaving it open; every other one is reported as unsupported and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import ingress.routing.annotations.auth_values as auth_values  # (not from the package: its __init__ imports this module)
import ingress.routing.annotations.mirror as mirror
import ingress.routing.annotations.values as values


@dataclass(frozen=True, slots=True)
class Key:
    """A key twingress reads: its value reader, and whether ingress-nginx has it too."""

    read: Callable[[str], object]
    nginx: bool = True


KEYS: Mapping[str, Key] = {
    # TLS (docs/tls.md; ingress-nginx "Server-side HTTPS enforcement through redirect", "SSL Passthrough")
    "ssl-redirect": Key(values.boolean),
    "force-ssl-redirect": Key(values.boolean),
    "preserve-trailing-slash": Key(values.boolean),
    "ssl-passthrough": Key(values.boolean),
    "hsts-max-age": Key(values.whole_seconds, nginx=False),  # ingress-nginx has it in its ConfigMap only
    "acme": Key(values.boolean, nginx=False),  # a certificate from --acme-directory for spec.tls (ingress/acme/)
    # Redirects (ingress-nginx "Permanent Redirect", "Temporal Redirect", "Rewrite": app-root)
    "permanent-redirect": Key(values.redirect_url),
    "permanent-redirect-code": Key(values.status_between(300, 308)),
    "temporal-redirect": Key(values.redirect_url),
    "temporal-redirect-code": Key(values.status_between(300, 307)),
    "app-root": Key(values.path),
    # Paths (ingress-nginx "Rewrite", "Use Regex", "X-Forwarded-Prefix Header")
    "use-regex": Key(values.boolean),
    "rewrite-target": Key(values.path),
    "x-forwarded-prefix": Key(values.text),
    # Backends (ingress-nginx "Custom NGINX upstream vhost", "Custom timeouts", "Custom max body size")
    "upstream-vhost": Key(values.host),
    "proxy-connect-timeout": Key(values.seconds),
    "proxy-read-timeout": Key(values.seconds),
    "proxy-send-timeout": Key(values.seconds),
    "proxy-body-size": Key(values.size),
    "proxy-next-upstream": Key(values.next_upstream),
    "proxy-next-upstream-tries": Key(values.whole_number),
    "proxy-next-upstream-timeout": Key(values.whole_number),
    # Canary (ingress-nginx "Canary")
    "canary": Key(values.boolean),
    "canary-by-header": Key(values.token),
    "canary-by-header-value": Key(values.text),
    "canary-by-header-pattern": Key(values.pattern),
    "canary-by-cookie": Key(values.token),
    "canary-weight": Key(values.whole_number),
    "canary-weight-total": Key(values.positive_number),
    "affinity-canary-behavior": Key(values.one_of("sticky", "legacy")),
    # Backends (ingress-nginx "Backend Protocol", "Backend Certificate Authentication")
    "backend-protocol": Key(values.backend_protocol),
    "proxy-ssl-secret": Key(values.namespaced_name),
    "proxy-ssl-verify": Key(values.on_off),
    "proxy-ssl-verify-depth": Key(values.positive_number),
    "proxy-ssl-ciphers": Key(values.ciphers),
    "proxy-ssl-name": Key(values.host),
    "proxy-ssl-protocols": Key(values.tls_protocols),
    "proxy-ssl-server-name": Key(values.on_off),
    "upstream-hash-by": Key(values.hash_template),
    "upstream-hash-by-subset": Key(values.boolean),
    "upstream-hash-by-subset-size": Key(values.positive_number),
    "load-balance": Key(values.one_of("round_robin", "ewma")),
    "service-upstream": Key(values.boolean),
    # Error pages (ingress-nginx "Custom HTTP Errors", "Default Backend", "Disable proxy intercept Errors")
    "custom-http-errors": Key(values.error_codes),
    "default-backend": Key(values.service_name),
    "disable-proxy-intercept-errors": Key(values.boolean),
    # Hosts (ingress-nginx "Server Alias", "Redirect from/to www")
    "server-alias": Key(values.host_list),
    "from-to-www-redirect": Key(values.boolean),
    # Session affinity (ingress-nginx "Session Affinity", "Cookie affinity")
    "affinity": Key(values.one_of("cookie")),
    "affinity-mode": Key(values.one_of("balanced", "persistent")),
    "session-cookie-name": Key(values.token),
    "session-cookie-path": Key(values.path),
    "session-cookie-domain": Key(values.host),
    "session-cookie-max-age": Key(values.whole_number),
    "session-cookie-expires": Key(values.whole_number),
    "session-cookie-samesite": Key(values.one_of("None", "Lax", "Strict")),
    "session-cookie-secure": Key(values.boolean),
    "session-cookie-change-on-failure": Key(values.boolean),
    "session-cookie-conditional-samesite-none": Key(values.boolean),
    # CORS (ingress-nginx "Enable CORS")
    "enable-cors": Key(values.boolean),
    "cors-allow-origin": Key(values.origins),
    "cors-allow-methods": Key(values.methods),
    "cors-allow-headers": Key(values.header_names),
    "cors-expose-headers": Key(values.header_names),
    "cors-allow-credentials": Key(values.boolean),
    "cors-max-age": Key(values.whole_number),
    # Authentication (ingress-nginx "Authentication"): basic only, digest is refused
    "auth-type": Key(values.one_of("basic")),
    "auth-secret": Key(values.namespaced_name),
    "auth-secret-type": Key(values.one_of("auth-file", "auth-map")),
    "auth-realm": Key(values.text),
    # External Authentication (ingress-nginx "External Authentication"); auth-keepalive* tune nginx's
    # connections to the service: twingress always keeps them alive, so they are read and change nothing
    "auth-url": Key(auth_values.url),
    "auth-method": Key(auth_values.method),
    "auth-signin": Key(auth_values.url),
    "auth-signin-redirect-param": Key(values.token),
    "auth-response-headers": Key(auth_values.response_headers),
    "auth-request-redirect": Key(values.redirect_url),
    "auth-proxy-set-headers": Key(values.namespaced_name),
    "auth-always-set-cookie": Key(values.boolean),
    "auth-cache-key": Key(auth_values.nginx_string),
    "auth-cache-duration": Key(auth_values.cache_rules),
    "auth-keepalive": Key(values.whole_number),
    "auth-keepalive-requests": Key(values.positive_number),
    "auth-keepalive-timeout": Key(values.positive_number),
    "auth-keepalive-share-vars": Key(values.boolean),
    # Client Certificate Authentication (ingress-nginx): per host
    "auth-tls-secret": Key(values.namespaced_name),
    "auth-tls-verify-client": Key(values.one_of("on", "off", "optional", "optional_no_ca")),
    "auth-tls-verify-depth": Key(values.positive_number),
    "auth-tls-error-page": Key(values.redirect_url),
    "auth-tls-pass-certificate-to-upstream": Key(values.boolean),
    "auth-tls-match-cn": Key(auth_values.subject_pattern),
    # Rate Limiting (ingress-nginx "Rate Limiting"); limit-rate and limit-rate-after (bandwidth) are not read
    "limit-rps": Key(values.whole_number),
    "limit-connections": Key(values.whole_number),
    "limit-rpm": Key(values.whole_number),
    "limit-burst-multiplier": Key(values.positive_number),
    "limit-allowlist": Key(values.networks),
    "limit-whitelist": Key(values.networks),
    # Access (ingress-nginx "Allowlist source range", "Denylist source range"; whitelist- is the old name)
    "whitelist-source-range": Key(values.networks),
    "allowlist-source-range": Key(values.networks),
    "denylist-source-range": Key(values.networks),
    # Global external auth (ingress-nginx ConfigMap "global-auth-url": "each service can be excluded ... via annotation enable-global-auth")
    "enable-global-auth": Key(values.boolean),
    # ingress-nginx "Satisfy": any one of the access guards lets a request through
    "satisfy": Key(values.one_of("any", "all")),
    # ingress-nginx "Mirror"
    "mirror-target": Key(mirror.mirror_target),
    "mirror-host": Key(values.host),
    "mirror-request-body": Key(values.on_off),
    # ingress-nginx "Custom Headers": a ConfigMap of response fields (ingress-nginx's own namespace rule applies)
    "custom-headers": Key(values.namespaced_name),
}
"""Every key twingress reads, by its name without prefix."""

ACCESS_GUARDS: frozenset[str] = frozenset({"auth-snippet", "modsecurity-snippet"})
"""ingress-nginx keys that restrict who reaches a backend and twingress does not enforce: their routes answer 503."""

SNIPPETS = frozenset({"configuration-snippet", "server-snippet", "stream-snippet"})
"""Raw nginx configuration, never executed: harmless when its directives only shape fields (L{ingress.routing.snippets}), else a guard."""

HARMLESS: Mapping[str, str] = {
    **{
        name: "is not supported by twingress; it is ignored"
        for name in """client-body-buffer-size connection-proxy-header enable-access-log enable-opentelemetry
        enable-rewrite-log http2-push-preload
        opentelemetry-trust-incoming-span proxy-buffer-size proxy-buffering proxy-buffers-number proxy-busy-buffers-size
        proxy-cookie-domain proxy-cookie-path proxy-http-version proxy-max-temp-file-size proxy-redirect-from
        proxy-redirect-to proxy-request-buffering ssl-ciphers ssl-prefer-server-ciphers limit-rate limit-rate-after
        modsecurity-transaction-id""".split()
    },
    "enable-modsecurity": "is not supported by twingress (ModSecurity's default mode only detects; modsecurity-snippet, which closes the routes, is what blocks); it is ignored",
    "enable-owasp-core-rules": "is not supported by twingress (the Core Rule Set only detects unless modsecurity-snippet turns SecRuleEngine On, which closes the routes); it is ignored",
}
"""ingress-nginx keys twingress does not read whose absence opens nothing: reported, with why."""

_GUARD_WORDS = ("auth", "allow", "deny", "whitelist", "blacklist", "block", "source-range", "cidr", "modsecurity", "waf", "snippet")


def guard_like(name: str) -> bool:
    """Whether an ingress-nginx key twingress does not know might be a guard (a newer one, a misspelt one): then its routes close."""
    return any(word in name for word in _GUARD_WORDS)

ENFORCED_GUARDS = frozenset(
    {"whitelist-source-range", "allowlist-source-range", "denylist-source-range", "auth-type", "auth-secret", "auth-secret-type"}
    | {"auth-url", "auth-method", "auth-signin", "auth-signin-redirect-param", "auth-response-headers", "auth-request-redirect"}
    | {"auth-proxy-set-headers", "auth-always-set-cookie", "auth-cache-key", "auth-cache-duration"}
    | {"satisfy"}
    | {"auth-tls-secret", "auth-tls-verify-client", "auth-tls-verify-depth", "auth-tls-error-page", "auth-tls-pass-certificate-to-upstream", "auth-tls-match-cn"}
    | {"enable-global-auth"}
)
"""Access guards twingress enforces: a value it cannot read closes the route (503), never opens it."""


def is_snippet(name: str) -> bool:
    """C{configuration-snippet}, C{server-snippet}, C{auth-snippet}...: raw nginx configuration."""
    return name.endswith("-snippet")
