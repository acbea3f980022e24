# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""
An Ingress's annotations compiled into the policies of one of its routes.

Each choice cites the ingress-nginx behaviour it reproduces: C{temporal-redirect}
wins over C{permanent-redirect} (its redirect parser reads the temporal one
first), their codes default to 302 and 301; C{rewrite-target} applies to paths
other than itself ("if the path in the ingress rule is equal to the target: no
special rewrite") and brings C{x-forwarded-prefix} with it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from ingress.routing.annotations import IngressAnnotations
from ingress.routing.annotations.values import HTTP2_BACKENDS
from ingress.routing.config_keys import EVERY_ROUTE, GLOBAL_AUTH
from ingress.routing.global_guards import GlobalGuards
from ingress.routing.nginx_config import TWINGRESS_DEFAULTS, NginxConfig
from ingress.routing.policies import EWMA, Affinity, BackendTLS, Deny, HashBy, Limits, Redirect, Retry, Rewrite, SourceRanges, cors
from ingress.routing.policies.auth import BasicAuth
from ingress.routing.policies.cors import Cors
from ingress.routing.policies.errorpages import ErrorPages
from ingress.routing.policies.extauth import ExternalAuth
from ingress.routing.policies.headers import HeaderChanges, merged
from ingress.routing.policies.limits import UNLIMITED
from ingress.routing.policies.mirror import Mirror, URLMirror
from ingress.routing.policies.ratelimit import DEFAULT_BURST_MULTIPLIER, RateLimit, rate_limit
from ingress.routing.route import Policies

_NO_LIMITS = Limits()


class BadPath(ValueError):
    """A path that is not a regular expression Python can compile, on a host whose paths are regexes."""


def route_policies(
    annotations: IngressAnnotations,
    path: str,
    regex: bool = False,
    backend_tls: Optional[BackendTLS] = None,
    closed: str = "",
    config: NginxConfig = TWINGRESS_DEFAULTS,
    basic_auth: Optional[BasicAuth] = None,
    external_auth: Optional[ExternalAuth] = None,
    rate: Optional[RateLimit] = None,
    error_pages: Optional[ErrorPages] = None,
    custom_headers: Optional[HeaderChanges] = None,
) -> Optional[Policies]:
    """
    The policies of the route for C{path} (a regex when C{regex}), or None when the annotations ask for none.

    C{backend_tls}, C{basic_auth}, C{external_auth}, C{rate} and C{error_pages} are resolved by the builder (they need the Secrets); C{closed} says why the
    route must answer 503 (a guard it cannot honour), besides unenforced access guards;
    C{config} holds the ingress-nginx ConfigMap's route defaults (limits, balancing, header
    fields, error pages), which the annotations override; C{custom_headers} are the response fields
    of the Ingress's custom-headers ConfigMap (resolved by the builder), over the ConfigMap's add-headers.
    """
    if not annotations.values and not annotations.unguarded and not closed and config == TWINGRESS_DEFAULTS:
        return None
    if annotations.unguarded:
        closed = "unenforced access guard: " + ", ".join(annotations.unguarded)
    guards = config.guards
    exempt = guards.exempt(path)  # no-auth-locations: no authentication at all (ingress-nginx's nginx.tmpl)
    global_auth = not exempt and not annotations.text("auth-url") and annotations.flag("enable-global-auth", True)
    closed = closed or _globally_closed(guards, annotations, global_auth)
    policies = Policies(
        deny=Deny(503, closed) if closed else None,
        redirect=_redirect(annotations),
        app_root=annotations.text("app-root"),
        source_ranges=_source_ranges(annotations, guards),
        cors=_cors(annotations),
        rate_limit=rate,
        basic_auth=None if closed or exempt else basic_auth,
        external_auth=None if closed or exempt else (external_auth or (guards.auth if global_auth else None)),
        satisfy_any=annotations.text("satisfy") == "any" and not closed and not exempt and (basic_auth is not None or external_auth is not None or (global_auth and guards.auth is not None)),
        affinity=_affinity(annotations, path, regex),
        hash_by=_hash_by(annotations),
        load_balance=EWMA if (annotations.text("load-balance") or config.load_balance) == EWMA else "",
        rewrite=_rewrite(annotations, path),
        forwarded_prefix=annotations.text("x-forwarded-prefix"),
        upstream_host=annotations.text("upstream-vhost"),
        request_headers=config.request_headers,
        response_headers=merged(config.response_headers, custom_headers),
        limits=_limits(annotations, config.limits),
        backend_tls=backend_tls,
        backend_http2=annotations.text("backend-protocol") in HTTP2_BACKENDS,
        mirror=route_mirror(annotations),
        retry=_retry(annotations, config.next_upstream),
        error_pages=error_pages if error_pages is not None or annotations.flag("disable-proxy-intercept-errors") else config.error_pages,
        strip_trailing_slash=not annotations.flag("preserve-trailing-slash", True),
    )
    return None if policies == _NONE else policies


_NONE = Policies()


def route_rate_limit(annotations: IngressAnnotations, ingress: str, config: NginxConfig = TWINGRESS_DEFAULTS) -> Optional[RateLimit]:
    """limit-rps, limit-rpm, limit-connections (zones of the Ingress C{namespace/name}), limit-burst-multiplier, limit-allowlist (or limit-whitelist)."""
    allow = annotations.value("limit-allowlist") or annotations.value("limit-whitelist")
    return rate_limit(
        ingress,
        int(annotations.number("limit-rps") or 0),
        int(annotations.number("limit-rpm") or 0),
        int(annotations.number("limit-burst-multiplier") or DEFAULT_BURST_MULTIPLIER),
        SourceRanges(allow) if isinstance(allow, tuple) and allow else None,
        config.limit_req_status,
        int(annotations.number("limit-connections") or 0),
        config.limit_conn_status,
    )


def route_mirror(annotations: IngressAnnotations) -> Optional[Mirror]:
    """mirror-target, with mirror-host (the copies' Host) and mirror-request-body ("off": copies without the body)."""
    target = annotations.value("mirror-target")
    if not isinstance(target, URLMirror):
        return None
    body = annotations.value("mirror-request-body")
    url = replace(target, authority=annotations.text("mirror-host") or target.authority, body=body if isinstance(body, bool) else True)
    return Mirror((), (url,))


def _source_ranges(annotations: IngressAnnotations, guards: GlobalGuards) -> Optional[SourceRanges]:
    """
    allowlist-source-range (or its old name whitelist-source-range) and denylist-source-range; each
    list the Ingress leaves out is the ConfigMap's (ingress-nginx's ipallowlist and ipdenylist parsers
    fall back to the ConfigMap's list when "the annotation is missing").
    """
    allow = annotations.value("allowlist-source-range") or annotations.value("whitelist-source-range") or guards.allow
    deny = annotations.value("denylist-source-range") or guards.deny
    if not allow and not deny:
        return None
    return SourceRanges(allow if isinstance(allow, tuple) else (), deny if isinstance(deny, tuple) else ())


def _globally_closed(guards: GlobalGuards, annotations: IngressAnnotations, global_auth: bool) -> str:
    """
    Why the ConfigMap closes this route ("" when it does not): a refused guard that covers every
    route; an unreadable global source range the Ingress does not replace with its own; global auth
    that cannot be enforced, on a route it would cover.
    """
    if not guards.closed:
        return ""
    closed = guards.closed
    own_allow = "allowlist-source-range" in annotations.values or "whitelist-source-range" in annotations.values
    reasons = [
        closed.get(EVERY_ROUTE, ""),
        "" if own_allow else closed.get("whitelist-source-range", ""),
        "" if "denylist-source-range" in annotations.values else closed.get("denylist-source-range", ""),
        closed.get(GLOBAL_AUTH, "") if global_auth else "",
    ]
    found = [reason for reason in reasons if reason]
    return "ConfigMap guard not enforced: " + "; ".join(found) if found else ""


def _cors(annotations: IngressAnnotations) -> Optional[Cors]:
    """enable-cors and its cors-* settings, with ingress-nginx's defaults for those not set."""
    if not annotations.flag("enable-cors"):
        return None
    origins = annotations.value("cors-allow-origin")
    max_age = annotations.number("cors-max-age")
    return Cors(
        origins=origins if isinstance(origins, tuple) else ("*",),
        methods=annotations.text("cors-allow-methods") or cors.DEFAULT_METHODS,
        headers=annotations.text("cors-allow-headers") or cors.DEFAULT_HEADERS,
        expose=annotations.text("cors-expose-headers"),
        credentials=annotations.flag("cors-allow-credentials", True),
        max_age=int(max_age) if max_age is not None else cors.DEFAULT_MAX_AGE,
    )


def _redirect(annotations: IngressAnnotations) -> Optional[Redirect]:
    temporal = annotations.text("temporal-redirect")
    if temporal:
        return Redirect(int(annotations.number("temporal-redirect-code") or 302), temporal)
    permanent = annotations.text("permanent-redirect")
    if permanent:
        return Redirect(int(annotations.number("permanent-redirect-code") or 301), permanent)
    return None


def _rewrite(annotations: IngressAnnotations, path: str) -> Optional[Rewrite]:
    target = annotations.text("rewrite-target")
    if not target or target == path or not path:
        return None
    return Rewrite(compile_path(path, anchored=False), target, annotations.text("x-forwarded-prefix"))


def compile_path(path: str, anchored: bool = True) -> re.Pattern[str]:
    """A path as ingress-nginx uses it as a regex: case-insensitive, anchored at the start for matching."""
    try:
        return re.compile(("^" if anchored else "") + path, re.IGNORECASE)
    except re.error as error:
        raise BadPath(f"path {path!r} is not a regular expression: {error}") from None


def _affinity(annotations: IngressAnnotations, path: str, regex: bool) -> Optional[Affinity]:
    """
    ingress-nginx "Cookie affinity": the cookie's Path is session-cookie-path, else the route's
    path ("/" for a regex path, which "session cookie paths do not support").
    """
    if annotations.text("affinity") != "cookie":
        return None
    max_age, expires = annotations.number("session-cookie-max-age"), annotations.number("session-cookie-expires")
    secure = annotations.value("session-cookie-secure")
    return Affinity(
        cookie=annotations.text("session-cookie-name") or "INGRESSCOOKIE",
        mode=annotations.text("affinity-mode") or "balanced",
        path=annotations.text("session-cookie-path") or (path if path and not regex else "/"),
        domain=annotations.text("session-cookie-domain"),
        max_age=None if max_age is None else int(max_age),
        expires=None if expires is None else int(expires),
        samesite=annotations.text("session-cookie-samesite"),
        secure=secure if isinstance(secure, bool) else None,
        change_on_failure=annotations.flag("session-cookie-change-on-failure"),
        conditional_samesite_none=annotations.flag("session-cookie-conditional-samesite-none"),
    )


def _retry(annotations: IngressAnnotations, defaults: Optional[tuple[tuple[str, ...], int, float]] = None) -> Optional[Retry]:
    """
    Each key the annotations leave out has the ConfigMap's value (C{defaults}, when it sets any:
    ingress-nginx's proxy annotation parser falls back to the ConfigMap's), else ingress-nginx's
    default: "error timeout", 3 tries, no time limit.
    """
    keys = ("proxy-next-upstream", "proxy-next-upstream-tries", "proxy-next-upstream-timeout")
    if defaults is None and not any(key in annotations.values for key in keys):
        return None
    default_conditions, default_tries, default_timeout = defaults or (("error", "timeout"), 3, 0.0)
    conditions = annotations.value("proxy-next-upstream")
    tries, timeout = annotations.number("proxy-next-upstream-tries"), annotations.number("proxy-next-upstream-timeout")
    return Retry.from_conditions(
        conditions if isinstance(conditions, tuple) else default_conditions,
        int(tries) if tries is not None else default_tries,
        float(timeout) if timeout is not None else default_timeout,
    )


def _hash_by(annotations: IngressAnnotations) -> Optional[HashBy]:
    template = annotations.value("upstream-hash-by")
    if not isinstance(template, HashBy):
        return None
    if annotations.flag("upstream-hash-by-subset"):
        return replace(template, subset_size=int(annotations.number("upstream-hash-by-subset-size") or 3))
    return template


def _limits(annotations: IngressAnnotations, defaults: Limits) -> Optional[Limits]:
    body = annotations.number("proxy-body-size")
    limits = Limits(
        connect_timeout=_or(annotations.number("proxy-connect-timeout"), defaults.connect_timeout),
        read_timeout=_or(annotations.number("proxy-read-timeout"), defaults.read_timeout),
        send_timeout=_or(annotations.number("proxy-send-timeout"), defaults.send_timeout),
        max_body_bytes=defaults.max_body_bytes if body is None else (int(body) or UNLIMITED),
    )
    return None if limits == _NO_LIMITS else limits


def _or(value: Optional[float], default: Optional[float]) -> Optional[float]:
    return value if value is not None else default
