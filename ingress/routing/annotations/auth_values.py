# -*- test-case-name: tests.unit.test_external_auth -*-
"""
Readers of the external-auth annotation values (ingress-nginx's authreq validators).

Every value here guards access, so one that cannot be read closes the route (the
annotation reader's C{ENFORCED_GUARDS}); ingress-nginx ignores some of them instead
(an invalid C{auth-request-redirect} drops external auth altogether there).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from ingress.routing.annotations.values import InvalidValue
from ingress.routing.policies.extauth import CacheRule
from ingress.routing.policies.variables import ALL_VARIABLES, Part, UnknownVariable, parse_template

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE"})
DEFAULT_CACHE_DURATION = "200 202 401 5m"
_HEADER = re.compile(r"[a-zA-Z\d\-_]+")  # ingress-nginx's headerRegexp
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|M|y)")  # nginx's time units (nginx.org "Configuration file measurement units")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "M": 2592000, "y": 31536000}


def template(value: str) -> tuple[Part, ...]:
    """An nginx string whose variables twingress computes (auth-cache-key, auth-proxy-set-headers values)."""
    try:
        parts = parse_template(value.strip(), ALL_VARIABLES)
    except UnknownVariable as error:
        raise InvalidValue(str(error)) from None
    except ValueError as error:
        raise InvalidValue(f"is not an nginx string ({error})") from None
    if not parts:
        raise InvalidValue("is empty")
    return parts


def url_template(value: str) -> tuple[Part, ...]:
    """auth-url, auth-signin: an http or https URL with a host, maybe with nginx variables ($host, $escaped_request_uri...)."""
    parts = template(value)
    split = urlsplit(value.strip())
    if split.scheme not in ("http", "https") or not split.netloc or any(c.isspace() for c in value.strip()):
        raise InvalidValue("must be an http:// or https:// URL with a host")
    return parts


def url(value: str) -> str:
    """auth-url, auth-signin as written (checked by L{url_template})."""
    url_template(value)
    return value.strip()


def nginx_string(value: str) -> str:
    """auth-cache-key as written (checked by L{template})."""
    template(value)
    return value.strip()


def subject_pattern(value: str) -> re.Pattern[str]:
    """auth-tls-match-cn: a regular expression searched for in the client certificate's subject DN (e.g. C{CN=(a|b)})."""
    try:
        return re.compile(value)
    except re.error as error:
        raise InvalidValue(f"must be a regular expression ({error})") from None


def method(value: str) -> str:
    """auth-method: one of the methods ingress-nginx's methodsRegex allows."""
    if value not in METHODS:
        raise InvalidValue("must be one of " + ", ".join(sorted(METHODS)))
    return value


def response_headers(value: str) -> tuple[str, ...]:
    """auth-response-headers: field names separated by commas (letters, digits, - and _)."""
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    for name in names:
        if not _HEADER.fullmatch(name):
            raise InvalidValue(f"{name!r} is not a header name (letters, digits, - and _)")
    return names


def cache_rules(value: str) -> tuple[CacheRule, ...]:
    """auth-cache-duration: C{[code ...|any] duration}, comma-separated (nginx's proxy_cache_valid: a duration alone means 200, 301, 302)."""
    rules: list[CacheRule] = []
    for rule in (part.strip() for part in value.split(",")):
        if not rule:
            continue
        *codes, duration = rule.split()
        match = _DURATION.fullmatch(duration)
        if match is None or not all(code == "any" or (code.isdigit() and len(code) == 3) for code in codes):
            raise InvalidValue(f"{rule!r} is not 'CODE ... DURATION' (e.g. '200 202 10m', 'any 5m')")
        seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        statuses = None if "any" in codes else frozenset(int(code) for code in codes or ("200", "301", "302"))
        rules.append((statuses, seconds))
    if not rules:
        raise InvalidValue("is empty")
    return tuple(rules)


def signin_with_redirect(signin: str, parameter: str) -> tuple[Part, ...]:
    """The sign-in URL a 401 redirects to: the original URL in C{parameter} (default C{rd}), unless the URL sets it already."""
    parameter = parameter or "rd"
    query = urlsplit(signin).query
    original = "$pass_access_scheme://$http_host$escaped_request_uri"
    if not query:
        signin = f"{signin}?{parameter}={original}"
    elif not parse_qs(query).get(parameter, [""])[0]:
        signin = f"{signin}&{parameter}={original}"
    return url_template(signin)
