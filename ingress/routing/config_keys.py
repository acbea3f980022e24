# -*- test-case-name: tests.unit.test_guard_keys -*-
"""
What twingress does with each key of the ingress-nginx controller ConfigMap: one table, consulted by the reader.

Every key ingress-nginx documents (docs/user-guide/nginx-configuration/configmap.md) is in exactly
one class, and tests/unit/test_guard_keys.py walks the table to keep it so:

  - C{ENFORCED_GUARDS}: keys that decide who may pass, which twingress enforces
    (L{ingress.routing.global_guards}); a value it cannot read closes the routes the key covers;
  - C{REFUSED_GUARDS}: keys that decide who may pass, which twingress does not enforce: set, they
    close every route they would cover (503, the reason in /debug/routes) — never reported and ignored;
  - C{SNIPPETS}: raw nginx configuration, never executed; one that might guard access (anything
    but the header and buffer directives of L{ingress.routing.snippets}) closes every route;
  - C{HARMLESS}: keys twingress does not implement whose absence opens nothing: reported once;
  - the settings the reader reads (C{nginx_config._READERS}) and the listener settings that are
    twingress command-line options.

A key ingress-nginx does not document is reported as unknown, unless its name looks like a guard
(L{guard_like}): then it closes every route, as a refused guard does, because a misspelt or newer
guard key must not leave a cluster open.
"""

from __future__ import annotations

from collections.abc import Mapping

ENFORCED_GUARDS = frozenset(
    {"whitelist-source-range", "denylist-source-range", "block-cidrs", "block-user-agents", "block-referers", "no-auth-locations"}
    | {"global-auth-url", "global-auth-method", "global-auth-signin", "global-auth-signin-redirect-param"}
    | {"global-auth-response-headers", "global-auth-request-redirect", "global-auth-cache-key"}
    | {"global-auth-cache-duration", "global-auth-always-set-cookie"}
)
"""Guard keys read into L{ingress.routing.global_guards.GlobalGuards}."""

GLOBAL_AUTH = "global-auth"  # what a refused key covers: the routes the global auth covers
EVERY_ROUTE = "every route"

REFUSED_GUARDS: Mapping[str, tuple[str, str]] = {
    "global-auth-snippet": (GLOBAL_AUTH, "nginx configuration of the global auth subrequest is never executed"),
    "modsecurity-snippet": (EVERY_ROUTE, "ModSecurity rules (SecRuleEngine On...) are not run by twingress"),
}
"""Guard keys twingress does not enforce: (which routes they cover, why refused).  Set, those routes answer 503."""

SNIPPETS = frozenset({"http-snippet", "server-snippet", "location-snippet", "main-snippet"})
"""nginx configuration for every server: closes every route unless its directives are harmless (L{ingress.routing.snippets})."""

HARMLESS: Mapping[str, str] = {
    **{
        key: "is not supported by twingress; it is ignored"
        for key in """access-log-params access-log-path allow-backend-server-header annotation-value-word-blocklist
        annotations-risk-level bind-address client-body-buffer-size client-header-buffer-size debug-connections
        default-type disable-access-log disable-ipv6 disable-ipv6-dns enable-access-log-for-default-backend
        enable-aio-write enable-multi-accept enable-ocsp enable-opentelemetry enable-serial-reloads enable-syslog
        enable-underscores-in-headers error-log-level error-log-path forwarded-for-proxy-protocol-header
        geoip2-autoreload-in-minutes grpc-buffer-size-kb gzip-disable hide-headers http-access-log-path
        http2-max-concurrent-streams http2-max-field-size http2-max-header-size http2-max-requests
        ignore-invalid-headers jaeger-baggage-header jaeger-collector-host jaeger-collector-port jaeger-debug-header
        jaeger-endpoint jaeger-propagation-format jaeger-sampler-host jaeger-sampler-param jaeger-sampler-port
        jaeger-sampler-type jaeger-service-name jaeger-trace-baggage-header-prefix jaeger-trace-context-header-name
        large-client-header-buffers limit-conn-zone-variable limit-rate limit-rate-after log-format-stream
        lua-shared-dicts map-hash-bucket-size max-worker-connections max-worker-open-files
        opentelemetry-config opentelemetry-operation-name opentelemetry-trust-incoming-span
        otel-max-export-batch-size otel-max-queuesize otel-sampler otel-sampler-parent-based otel-sampler-ratio
        otel-schedule-delay-millis otel-service-name otlp-collector-host otlp-collector-port
        proxy-add-original-uri-header proxy-buffer-size proxy-buffering proxy-buffers-number proxy-busy-buffers-size
        proxy-cookie-domain proxy-cookie-path proxy-headers-hash-bucket-size proxy-headers-hash-max-size
        proxy-protocol-header-timeout
        proxy-redirect-from proxy-request-buffering proxy-ssl-location-only proxy-stream-next-upstream
        proxy-stream-next-upstream-timeout proxy-stream-next-upstream-tries proxy-stream-responses
        proxy-stream-timeout relative-redirects retry-non-idempotent reuse-port server-name-hash-bucket-size
        server-name-hash-max-size server-tokens skip-access-log-urls ssl-buffer-size ssl-dh-param
        ssl-ecdh-curve ssl-session-cache ssl-session-cache-size ssl-session-ticket-key ssl-session-tickets
        ssl-session-timeout stream-access-log-path strict-validate-path-type syslog-host syslog-port
        upstream-keepalive-requests upstream-keepalive-time use-geoip use-geoip2 variables-hash-bucket-size
        variables-hash-max-size worker-cpu-affinity worker-processes worker-shutdown-timeout""".split()
    },
    **{
        key: "is not supported by twingress: responses are compressed with gzip only (use-gzip); it is ignored"
        for key in ("enable-brotli", "brotli-level", "brotli-min-length", "brotli-types")
    },
    "allow-cross-namespace-resources": "is always false in twingress (a Secret or ConfigMap of another namespace is refused); it is ignored",
    "enable-modsecurity": "is not supported (ModSecurity's DetectionOnly default blocks nothing; modsecurity-snippet would, and closes every route); it is ignored",
    "enable-owasp-modsecurity-crs": "is not supported (the Core Rule Set only detects unless modsecurity-snippet turns SecRuleEngine On: that closes every route); it is ignored",
    "nginx-status-ipv4-whitelist": "guards nginx's status page, which twingress does not have (its admin listener is on loopback); it is ignored",
    "nginx-status-ipv6-whitelist": "guards nginx's status page, which twingress does not have (its admin listener is on loopback); it is ignored",
    "ssl-reject-handshake": "is not supported by twingress (a name without certificate gets the default one); it is ignored",
    "stream-snippet": "is never executed; the TCP/UDP listeners are twingress's own (--tcp-services-configmap); it is ignored",
}
"""ingress-nginx keys twingress does not implement whose absence opens nothing: reported, with why."""

INGRESS_NGINX_KEYS = frozenset(
    """access-log-params access-log-path add-headers allow-backend-server-header allow-cross-namespace-resources
    allow-snippet-annotations annotation-value-word-blocklist annotations-risk-level bind-address block-cidrs
    block-referers block-user-agents brotli-level brotli-min-length brotli-types client-body-buffer-size
    client-body-timeout client-header-buffer-size client-header-timeout compute-full-forwarded-for custom-http-errors
    debug-connections default-type denylist-source-range disable-access-log disable-ipv6 disable-ipv6-dns
    enable-access-log-for-default-backend enable-aio-write enable-brotli enable-modsecurity enable-multi-accept
    enable-ocsp enable-opentelemetry enable-owasp-modsecurity-crs enable-real-ip enable-serial-reloads enable-syslog
    enable-underscores-in-headers error-log-level error-log-path force-ssl-redirect forwarded-for-header
    forwarded-for-proxy-protocol-header generate-request-id geoip2-autoreload-in-minutes global-allowed-response-headers
    global-auth-cache-duration global-auth-cache-key global-auth-method global-auth-request-redirect
    global-auth-response-headers global-auth-signin global-auth-signin-redirect-param global-auth-snippet global-auth-url
    grpc-buffer-size-kb gzip-disable gzip-level gzip-min-length gzip-types hide-headers hsts hsts-include-subdomains
    hsts-max-age hsts-preload http-access-log-path http-redirect-code http-snippet http2-max-concurrent-streams
    http2-max-field-size http2-max-header-size http2-max-requests ignore-invalid-headers jaeger-baggage-header
    jaeger-collector-host jaeger-collector-port jaeger-debug-header jaeger-endpoint jaeger-propagation-format
    jaeger-sampler-host jaeger-sampler-param jaeger-sampler-port jaeger-sampler-type jaeger-service-name
    jaeger-trace-baggage-header-prefix jaeger-trace-context-header-name keep-alive keep-alive-requests
    large-client-header-buffers limit-conn-status-code limit-conn-zone-variable limit-rate limit-rate-after
    limit-req-status-code load-balance location-snippet log-format-escape-json log-format-escape-none
    log-format-stream log-format-upstream lua-shared-dicts main-snippet map-hash-bucket-size max-worker-connections
    max-worker-open-files modsecurity-snippet nginx-status-ipv4-whitelist nginx-status-ipv6-whitelist
    no-auth-locations no-tls-redirect-locations opentelemetry-config opentelemetry-operation-name
    opentelemetry-trust-incoming-span otel-max-export-batch-size otel-max-queuesize otel-sampler
    otel-sampler-parent-based otel-sampler-ratio otel-schedule-delay-millis otel-service-name otlp-collector-host
    otlp-collector-port proxy-add-original-uri-header proxy-body-size proxy-buffer-size proxy-buffering
    proxy-buffers-number proxy-busy-buffers-size proxy-connect-timeout proxy-cookie-domain proxy-cookie-path
    proxy-headers-hash-bucket-size proxy-headers-hash-max-size proxy-next-upstream proxy-next-upstream-timeout
    proxy-next-upstream-tries proxy-protocol-header-timeout proxy-read-timeout proxy-real-ip-cidr proxy-redirect-from
    proxy-request-buffering proxy-send-timeout proxy-set-headers proxy-ssl-location-only proxy-stream-next-upstream
    proxy-stream-next-upstream-timeout proxy-stream-next-upstream-tries proxy-stream-responses proxy-stream-timeout
    relative-redirects retry-non-idempotent reuse-port server-name-hash-bucket-size server-name-hash-max-size
    server-snippet server-tokens service-upstream skip-access-log-urls ssl-buffer-size ssl-ciphers ssl-dh-param
    ssl-early-data ssl-ecdh-curve ssl-protocols ssl-redirect ssl-reject-handshake ssl-session-cache ssl-session-cache-size
    ssl-session-ticket-key ssl-session-tickets ssl-session-timeout stream-access-log-path stream-snippet
    strict-validate-path-type syslog-host syslog-port upstream-keepalive-connections upstream-keepalive-requests
    upstream-keepalive-time upstream-keepalive-timeout use-forwarded-headers use-geoip use-geoip2 use-gzip use-http2
    use-proxy-protocol variables-hash-bucket-size variables-hash-max-size whitelist-source-range worker-cpu-affinity
    worker-processes worker-shutdown-timeout""".split()
)
"""Every key of ingress-nginx's ConfigMap page, to tell "not implemented" from "not a key at all"."""

CONFIG_GO_KEYS = frozenset(
    """bind-address-ipv4 bind-address-ipv6 disable-http-access-log disable-proxy-intercept-errors disable-stream-access-log
    enable-auth-access-log forwarded-host-header proxy-http-version""".split()
)
"""
Keys ingress-nginx reads (internal/ingress/controller/config/config.go) that its ConfigMap page does
not list: ingress-nginx keys all the same, never "unknown", and none of them guards access.
"""

_GUARD_WORDS = ("auth", "allow", "deny", "whitelist", "blacklist", "blocklist", "block", "source-range", "cidr", "modsecurity", "waf", "snippet")


def covered(covers: str) -> str:
    """The routes a guard covers, said in a message ("every route", "the routes global auth covers"...)."""
    if covers == EVERY_ROUTE:
        return "every route"
    if covers == GLOBAL_AUTH:
        return "the routes global auth covers"
    return f"the routes without their own {covers} annotation"


def guard_like(key: str) -> bool:
    """Whether a key ingress-nginx does not document might be a guard (a typo of one, or a newer one): then it closes."""
    return any(word in key for word in _GUARD_WORDS)
