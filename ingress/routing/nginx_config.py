# -*- test-case-name: tests.unit.test_nginx_config -*-
"""
The ingress-nginx controller ConfigMap (C{--nginx-configmap}), read as ingress-nginx documents it.

Its keys set the defaults of every route (an Ingress's annotations still win):
the HTTP to HTTPS redirect and its code, HSTS, the body size limit and the
upstream timeouts.  A key the ConfigMap leaves out has ingress-nginx's default,
not twingress's: a ConfigMap named on the command line means "behave as
ingress-nginx did" (so HSTS is on for TLS hosts, and bodies are limited to 1m).
Its guards (source ranges, block-cidrs, global auth) are L{ingress.routing.global_guards};
what happens to each key is the table of L{ingress.routing.config_keys}: a guard twingress
cannot enforce closes the routes it covers (C{UnenforcedGuard}), every other key it does not
implement is reported once (log, C{twingress_object_problems}): C{UnsupportedConfigKey} for
ingress-nginx keys (and those of its config.go the page omits, L{ingress.routing.config_notes}),
C{UnknownConfigKey} for the rest; C{allow-snippet-annotations} is always false.
Source: docs/user-guide/nginx-configuration/configmap.md.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Optional

from ingress.model import ConfigMap, ObjectRef, Problem
from ingress.routing.annotations import values
from ingress.routing.annotations.values import InvalidValue
from ingress.routing.compression import Gzip, gzip_settings, level, media_types
from ingress.routing.config_keys import (
    CONFIG_GO_KEYS,
    ENFORCED_GUARDS,
    EVERY_ROUTE,
    GLOBAL_AUTH,
    HARMLESS,
    INGRESS_NGINX_KEYS,
    REFUSED_GUARDS,
    SNIPPETS,
    covered,
    guard_like,
)
from ingress.routing.config_notes import NOTES, note
from ingress.routing.global_guards import ACME_CHALLENGE, IGNORED, NO_GUARDS, GlobalGuards, read_global_guards
from ingress.routing.logformat import parse as parse_log_format
from ingress.routing.policies.errorpages import ErrorPages
from ingress.routing.policies.headers import HeaderChanges, header_changes, valid_field
from ingress.routing.policies.limits import UNLIMITED, Limits
from ingress.routing.policies.trust import ForwardedTrust
from ingress.routing.policies.variables import HEADER_VARIABLES, UnknownVariable, parse_template
from ingress.routing.snippets import guarding_directive

INVALID, UNSUPPORTED, UNKNOWN = "InvalidConfigKey", "UnsupportedConfigKey", "UnknownConfigKey"
UNENFORCED = "UnenforcedGuard"  # a guard twingress cannot enforce as written: the routes it covers answer 503


@dataclass(frozen=True, slots=True)
class NginxConfig:
    """The route defaults a ConfigMap sets, with ingress-nginx's defaults for what it leaves out."""

    ssl_redirect: bool = True
    force_ssl_redirect: bool = False
    redirect_code: int = 308
    hsts: str = "max-age=31536000; includeSubDomains"  # the Strict-Transport-Security value, "" for off
    limits: Limits = field(default_factory=lambda: Limits(5.0, 60.0, 60.0, 1 << 20))
    trust: Optional[ForwardedTrust] = None
    load_balance: str = ""  # "" (round robin) or "ewma"
    request_headers: Optional[HeaderChanges] = None  # proxy-set-headers
    response_headers: Optional[HeaderChanges] = None  # add-headers
    listener: Optional[ListenerSettings] = None
    limit_req_status: int = 503  # limit-req-status-code: the answer to a request over a rate limit
    limit_conn_status: int = 503  # limit-conn-status-code: the answer to a request over limit-connections
    guards: GlobalGuards = field(default_factory=GlobalGuards)  # block-cidrs, source ranges, global auth, and what they close
    generate_request_id: bool = True  # generate-request-id: an X-Request-ID for requests without one
    error_pages: Optional[ErrorPages] = None  # custom-http-errors: every route's, unless its Ingress sets its own
    allowed_response_headers: Optional[frozenset[str]] = frozenset()  # global-allowed-response-headers (lower case); None: any
    no_tls_redirect_locations: tuple[str, ...] = (ACME_CHALLENGE,)  # routes whose path starts so are never redirected to HTTPS
    service_upstream: bool = False  # service-upstream: every Ingress's backends are their Services' cluster IPs
    next_upstream: Optional[tuple[tuple[str, ...], int, float]] = None  # proxy-next-upstream(-tries, -timeout), when set


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """
    The ConfigMap's connection settings, which replace the command line's while a table has them
    (new connections and the next request of open ones see them): client keep-alive, upstream
    keep-alive and the TLS versions and ciphers.  None or "" keeps the command line's.
    """

    keepalive_timeout: Optional[float] = None  # keep-alive (0: no keep-alive)
    keepalive_requests: Optional[int] = None  # keep-alive-requests
    upstream_keepalive_connections: Optional[int] = None  # idle connections kept per endpoint
    upstream_keepalive_timeout: Optional[float] = None
    tls_min_version: str = ""  # "1.2" or "1.3", from ssl-protocols
    tls_max_version: str = ""  # "1.2" when ssl-protocols leaves TLSv1.3 out
    tls_ciphers: str = ""
    proxy_protocol: bool = False  # use-proxy-protocol: a PROXY header opens every new connection
    log_format: str = ""  # log-format-upstream (checked by ingress.routing.logformat): "" keeps --access-log-format
    log_escape: str = "default"  # log-format-escape-json / log-format-escape-none: default, json or none
    gzip: Optional[Gzip] = None  # use-gzip and its gzip-* keys (None: off)
    http2: bool = True  # use-http2: ALPN offers h2 on the HTTPS listener (with --http2 true)


INGRESS_NGINX_LISTENER = ListenerSettings(75.0, 1000, 320, 60.0, "1.2", "", "")
"""ingress-nginx's defaults for these keys (ssl-ciphers: its list is left to --tls-ciphers, which is as strict)."""


TWINGRESS_DEFAULTS = NginxConfig(ssl_redirect=True, force_ssl_redirect=False, redirect_code=308, hsts="", limits=Limits(), guards=NO_GUARDS, allowed_response_headers=None)
"""
Without --nginx-configmap: twingress's own defaults (no HSTS, the listener's limits, X-Request-ID
generated, custom-headers not limited to a list of names, and the ACME HTTP-01 path exempt from
the HTTPS redirect, as ingress-nginx's no-tls-redirect-locations default).
"""

def _log_format(value: str) -> str:
    parse_log_format(value)  # InvalidValue names the variables twingress does not fill
    return value


_READERS: Mapping[str, Callable[[str], object]] = {
    "ssl-redirect": values.boolean,
    "force-ssl-redirect": values.boolean,
    "http-redirect-code": values.status_in(301, 302, 307, 308),
    "limit-req-status-code": values.status_between(400, 599),
    "limit-conn-status-code": values.status_between(400, 599),
    "hsts": values.boolean,
    "hsts-max-age": values.whole_seconds,
    "hsts-include-subdomains": values.boolean,
    "hsts-preload": values.boolean,
    "proxy-body-size": values.size,
    "proxy-connect-timeout": values.seconds,
    "proxy-read-timeout": values.seconds,
    "proxy-send-timeout": values.seconds,
    "allow-snippet-annotations": values.boolean,
    "use-forwarded-headers": values.boolean,
    "enable-real-ip": values.boolean,
    "forwarded-for-header": values.token,
    "compute-full-forwarded-for": values.boolean,
    "proxy-real-ip-cidr": values.networks,
    "use-proxy-protocol": values.boolean,
    "load-balance": values.one_of("round_robin", "ewma"),
    "keep-alive": values.whole_seconds,
    "keep-alive-requests": values.positive_number,
    "upstream-keepalive-connections": values.whole_number,
    "upstream-keepalive-timeout": values.seconds,
    "ssl-protocols": values.tls_protocols,
    "ssl-ciphers": values.ciphers,
    "add-headers": values.namespaced_name,
    "proxy-set-headers": values.namespaced_name,
    "generate-request-id": values.boolean,
    "custom-http-errors": values.error_codes,
    "global-allowed-response-headers": values.field_names,
    "log-format-upstream": _log_format,
    "log-format-escape-json": values.boolean,
    "log-format-escape-none": values.boolean,
    "use-gzip": values.boolean,
    "gzip-level": level,
    "gzip-min-length": values.whole_number,
    "gzip-types": media_types,
    "use-http2": values.boolean,
    "disable-proxy-intercept-errors": values.boolean,
    "service-upstream": values.boolean,
    "proxy-next-upstream": values.next_upstream,
    "proxy-next-upstream-tries": values.whole_number,
    "proxy-next-upstream-timeout": values.whole_number,
    "no-tls-redirect-locations": lambda value: tuple(item.strip() for item in value.split(",") if item.strip()),
}

_ON_THE_COMMAND_LINE = {
    "client-header-timeout": "--header-timeout",
    "client-body-timeout": "--client-body-timeout",
    "bind-address-ipv4": "--http and --https (interface=ADDRESS)",
    "bind-address-ipv6": "--http and --https (interface=ADDRESS)",
}

"""Keys whose setting is a twingress command-line option (listener settings are not per table)."""


def read_nginx_config(config_maps: Mapping[tuple[str, str], ConfigMap], named: tuple[str, str]) -> tuple[NginxConfig, list[Problem]]:
    """The route defaults of the ConfigMap C{named} (missing: ingress-nginx's defaults, reported)."""
    ref = ObjectRef("ConfigMap", *named)
    config_map = config_maps.get(named)
    if config_map is None:
        return NginxConfig(), [Problem(ref, "NotFound", "--nginx-configmap names this ConfigMap, which does not exist: ingress-nginx's defaults apply")]
    problems = [Problem(ref, INVALID, message) for message in config_map.invalid]
    read: dict[str, object] = {}
    invalid: set[str] = set()
    guard_data: dict[str, str] = {}
    closed: dict[str, str] = {}
    for key, value in config_map.data:
        if key in ENFORCED_GUARDS:
            guard_data[key] = value
            continue
        if key in NOTES:
            problems += _noted(ref, key, value)
            continue
        reader = _READERS.get(key)
        if reader is None:
            refusal = _refusal(key, value)
            if refusal is not None and refusal[0] == GLOBAL_AUTH and not dict(config_map.data).get("global-auth-url", "").strip():
                continue  # without global-auth-url it covers nothing (reported with the other companions)
            if refusal is not None:
                covers, why = refusal
                closed.setdefault(covers, why)
                problems.append(Problem(ref, UNENFORCED, f"{why}; {covered(covers)} answer 503"))
            else:
                problems.append(_not_read(ref, key))
            continue
        try:
            read[key] = reader(value)
        except InvalidValue as error:
            invalid.add(key)
            if key == "log-format-upstream":
                problems.append(Problem(ref, INVALID, f"{key}: {value!r} {error}; the access log keeps its format (--access-log-format)"))
            elif key == "proxy-real-ip-cidr":  # never fall back to trusting everyone
                problems.append(Problem(ref, INVALID, f"{key}: {value!r} {error}; no forwarding header is trusted"))
            else:
                problems.append(Problem(ref, INVALID, f"{key}: {value!r} {error}; ingress-nginx's default applies"))
    guards, guard_problems = read_global_guards(guard_data, closed)
    problems += [Problem(ref, UNSUPPORTED if kind == IGNORED else UNENFORCED, message) for kind, message in guard_problems]
    if read.pop("allow-snippet-annotations", False):
        problems.append(Problem(ref, UNSUPPORTED, "allow-snippet-annotations is always false in twingress: snippets are never executed"))
    config = _config(read, "proxy-real-ip-cidr" in invalid)
    request_headers = _headers(config_maps, read.get("proxy-set-headers"), named, "proxy-set-headers", problems)
    response_headers = _headers(config_maps, read.get("add-headers"), named, "add-headers", problems)
    return replace(config, request_headers=request_headers, response_headers=response_headers, guards=guards), problems


def _refusal(key: str, value: str) -> Optional[tuple[str, str]]:
    """
    What a key twingress does not read closes, and why (L{ingress.routing.config_keys}), or None
    when it closes nothing: a refused guard, a snippet that might guard, an ingress-nginx key
    nobody classified, a key unknown to ingress-nginx whose name looks like a guard's.
    """
    if key in REFUSED_GUARDS:
        if not value.strip():  # empty is unset: ingress-nginx's default "" (configmap.md) runs nothing
            return None
        covers, why = REFUSED_GUARDS[key]
        return covers, f"{key}: {why}"
    if key in SNIPPETS:
        directive = guarding_directive(value)
        return (EVERY_ROUTE, f"{key} is never executed, and it may guard access ({directive})") if directive else None
    if key in HARMLESS or key in _ON_THE_COMMAND_LINE:
        return None
    if key in INGRESS_NGINX_KEYS or key in CONFIG_GO_KEYS:
        return EVERY_ROUTE, f"{key} is an ingress-nginx key twingress has not classified as harmless"
    if guard_like(key):
        return EVERY_ROUTE, f"{key} is not an ingress-nginx ConfigMap key, and its name looks like a guard's (a typo?)"
    return None


def _noted(ref: ObjectRef, key: str, value: str) -> list[Problem]:
    """A key twingress answers by what it does anyway (L{ingress.routing.config_notes}): reported when the value asks otherwise."""
    try:
        message = note(key, value)
    except InvalidValue as error:
        return [Problem(ref, INVALID, f"{key}: {value!r} {error}; twingress behaves as ingress-nginx's default")]
    return [Problem(ref, UNSUPPORTED, f"{key}: {value!r}: {message}")] if message else []


def _not_read(ref: ObjectRef, key: str) -> Problem:
    """The report of a key that is not read and closes nothing."""
    if key in SNIPPETS:
        return Problem(ref, UNSUPPORTED, f"{key} is never executed (its directives only shape header fields and buffers); it is ignored")
    if key in _ON_THE_COMMAND_LINE:
        return Problem(ref, UNSUPPORTED, f"{key} is a listener setting in twingress: {_ON_THE_COMMAND_LINE[key]} on the command line; it is ignored")
    if key in HARMLESS:
        return Problem(ref, UNSUPPORTED, f"{key} {HARMLESS[key]}")
    return Problem(ref, UNKNOWN, f"{key} is not an ingress-nginx ConfigMap key; it is ignored")


def _headers(
    config_maps: Mapping[tuple[str, str], ConfigMap], reference: object, named: tuple[str, str], key: str, problems: list[Problem]
) -> Optional[HeaderChanges]:
    """
    The header fields of the ConfigMap C{reference} names (ingress-nginx: "namespace/name"; the
    Role lets twingress read ConfigMaps of its own namespace, the one --nginx-configmap is in).
    A value with nginx variables is filled in per request when twingress computes every variable
    it names (L{HEADER_VARIABLES}: C{$msec}, C{$host}, C{$request_id}, C{$scheme}, C{$remote_addr}...);
    a field naming another is reported and left out, never sent with the variable's text.
    """
    if not isinstance(reference, str) or not reference:
        return None
    namespace, _, name = reference.rpartition("/")
    ref = ObjectRef("ConfigMap", *named)
    headers = config_maps.get((namespace or named[0], name))
    if headers is None:
        problems.append(Problem(ref, INVALID, f"{key}: ConfigMap {reference!r} not found (it must be in namespace {named[0]!r}); no header is set"))
        return None
    fields, templates = [], []
    for field_name, value in headers.data:
        if not valid_field(field_name, value):
            problems.append(Problem(ref, INVALID, f"{key}: {field_name!r} is not a valid header field; it is not set"))
            continue
        if "$" not in value:
            fields.append((field_name, value))
            continue
        try:
            templates.append((field_name, value, parse_template(value, HEADER_VARIABLES)))
        except UnknownVariable as error:
            known = ", ".join(f"${name}" for name in sorted(HEADER_VARIABLES.names)) + ", $http_<field>, $cookie_<name>, $arg_<name>"
            problems.append(Problem(ref, UNSUPPORTED, f"{key}: {field_name} = {value!r}: {error} (it computes {known}); the field is not set"))
        except ValueError as error:
            problems.append(Problem(ref, INVALID, f"{key}: {field_name} = {value!r} is not an nginx string ({error}); the field is not set"))
    return header_changes(fields, templates=templates) if fields or templates else None


def _config(read: Mapping[str, object], untrusted: bool = False) -> NginxConfig:
    config = NginxConfig()
    hsts = ""
    if read.get("hsts", True):
        hsts = f"max-age={read.get('hsts-max-age', 31536000)}"
        hsts += "; includeSubDomains" if read.get("hsts-include-subdomains", True) else ""
        hsts += "; preload" if read.get("hsts-preload", False) else ""
    body = read.get("proxy-body-size")
    limits = config.limits
    limits = replace(
        limits,
        connect_timeout=_number(read.get("proxy-connect-timeout"), limits.connect_timeout),
        read_timeout=_number(read.get("proxy-read-timeout"), limits.read_timeout),
        send_timeout=_number(read.get("proxy-send-timeout"), limits.send_timeout),
        max_body_bytes=limits.max_body_bytes if body is None else (int(str(body)) or UNLIMITED),
    )
    trust = None
    if (read.get("use-forwarded-headers", False) or read.get("enable-real-ip", False)) and not untrusted:
        networks = read.get("proxy-real-ip-cidr", (ipaddress.ip_network("0.0.0.0/0"),))
        assert isinstance(networks, tuple)
        trust = ForwardedTrust(
            networks=networks,
            header=str(read.get("forwarded-for-header", "X-Forwarded-For")).lower().encode("latin-1"),
            pass_headers=bool(read.get("use-forwarded-headers", False)),
            append=bool(read.get("compute-full-forwarded-for", False)),
        )
    protocols = read.get("ssl-protocols")
    versions = sorted(protocols) if isinstance(protocols, tuple) else []
    listener = ListenerSettings(
        keepalive_timeout=float(str(read.get("keep-alive", 75))),
        keepalive_requests=int(str(read.get("keep-alive-requests", 1000))),
        upstream_keepalive_connections=int(str(read.get("upstream-keepalive-connections", 320))),
        upstream_keepalive_timeout=float(str(read.get("upstream-keepalive-timeout", 60))),
        tls_min_version="1.3" if versions and versions[0] == "TLSv1.3" else "1.2",
        tls_max_version="1.2" if versions and versions[-1] == "TLSv1.2" else "",
        tls_ciphers=str(read.get("ssl-ciphers", "")),
        proxy_protocol=bool(read.get("use-proxy-protocol", False)),
        log_format=str(read.get("log-format-upstream", "")),
        log_escape="none" if read.get("log-format-escape-none") else "json" if read.get("log-format-escape-json") else "default",
        gzip=gzip_settings(dict(read)),
        http2=bool(read.get("use-http2", True)),
    )
    return NginxConfig(
        listener=listener,
        trust=trust,
        load_balance="ewma" if read.get("load-balance") == "ewma" else "",
        ssl_redirect=bool(read.get("ssl-redirect", True)),
        force_ssl_redirect=bool(read.get("force-ssl-redirect", False)),
        redirect_code=int(str(read.get("http-redirect-code", 308))),
        limit_req_status=int(str(read.get("limit-req-status-code", 503))),
        limit_conn_status=int(str(read.get("limit-conn-status-code", 503))),
        hsts=hsts,
        limits=limits,
        generate_request_id=bool(read.get("generate-request-id", True)),
        error_pages=None if read.get("disable-proxy-intercept-errors") else _error_pages(read.get("custom-http-errors")),
        allowed_response_headers=_names(read.get("global-allowed-response-headers")),
        no_tls_redirect_locations=_words(read.get("no-tls-redirect-locations", (ACME_CHALLENGE,))),
        service_upstream=bool(read.get("service-upstream", False)),
        next_upstream=_next_upstream(read),
    )


def _words(value: object) -> tuple[str, ...]:
    """A tuple a reader made (no-tls-redirect-locations, proxy-next-upstream), as strings."""
    return tuple(str(item) for item in value) if isinstance(value, tuple) else ()


def _next_upstream(read: Mapping[str, object]) -> Optional[tuple[tuple[str, ...], int, float]]:
    """proxy-next-upstream and its -tries and -timeout, as the defaults of every route's (ingress-nginx's for those left out)."""
    if not any(key in read for key in ("proxy-next-upstream", "proxy-next-upstream-tries", "proxy-next-upstream-timeout")):
        return None
    conditions = read.get("proxy-next-upstream", ("error", "timeout"))
    return _words(conditions), int(str(read.get("proxy-next-upstream-tries", 3))), float(str(read.get("proxy-next-upstream-timeout", 0)))


def _names(value: object) -> frozenset[str]:
    return frozenset(name.lower() for name in value) if isinstance(value, tuple) else frozenset()


def _error_pages(codes: object) -> Optional[ErrorPages]:
    """
    custom-http-errors for every route: responses of these codes are replaced by twingress's own page
    for the same status (ingress-nginx asks its global default backend, which twingress does not have).
    """
    return ErrorPages(codes, None, b"") if isinstance(codes, frozenset) and codes else None


def _number(value: object, default: Optional[float]) -> Optional[float]:
    return float(str(value)) if value is not None else default
