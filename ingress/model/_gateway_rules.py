# -*- test-case-name: tests.unit.test_gateway_parse -*-
"""
The parts of a Gateway API route rule (matches, filters, backendRefs, durations) to values, for
L{ingress.model._gateway}, which reads the objects around them.  The CRDs' defaults are applied
here as there (a backendRef's weight is 1 and its namespace the route's, a redirect's code 302).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ingress.model._fields import _int, _invalid, _list, _mapping, _port_number, _required, _str, parse_host
from ingress.model.gateway import (
    PATH_MATCH_EXACT,
    PATH_MATCH_PREFIX,
    PATH_MATCH_REGEX,
    VALUE_MATCH_EXACT,
    VALUE_MATCH_REGEX,
    BackendRef,
    CorsFilter,
    HeaderModifier,
    MirrorFilter,
    PathModifier,
    RedirectFilter,
    RewriteFilter,
    RouteFilter,
    RouteMatch,
    RuleRetry,
    ValueMatch,
)

# GEP-2257: one to four components of 1-5 digits and a unit, in any order, repeats summed.
_DURATION = re.compile(r"(?:[0-9]{1,5}(?:h|ms|m|s)){1,4}")
_COMPONENT = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_MILLIS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}


def route_match(value: Any, path: str) -> RouteMatch:
    item = _mapping(value, path)
    path_match = _mapping(item.get("path"), f"{path}.path")
    path_type = _str(path_match.get("type"), f"{path}.path.type", PATH_MATCH_PREFIX)
    if path_type not in (PATH_MATCH_EXACT, PATH_MATCH_PREFIX, PATH_MATCH_REGEX):
        raise _invalid(f"{path}.path.type", path_type, "must be Exact, PathPrefix or RegularExpression")
    path_value = _str(path_match.get("value"), f"{path}.path.value", "/")
    if path_type != PATH_MATCH_REGEX and not path_value.startswith("/"):
        raise _invalid(f"{path}.path.value", path_value, "must be an absolute path")
    return RouteMatch(
        path_type=path_type,
        path=path_value,
        headers=tuple(value_match(h, f"{path}.headers[{i}]", lower=True) for i, h in enumerate(_list(item.get("headers"), f"{path}.headers"))),
        query_params=tuple(value_match(q, f"{path}.queryParams[{i}]", lower=False) for i, q in enumerate(_list(item.get("queryParams"), f"{path}.queryParams"))),
        method=_str(item.get("method"), f"{path}.method"),
    )


def value_match(value: Any, path: str, *, lower: bool) -> ValueMatch:
    item = _mapping(value, path)
    name = _str(item.get("name"), f"{path}.name")
    if not name:
        raise _required(f"{path}.name")
    match_type = _str(item.get("type"), f"{path}.type", VALUE_MATCH_EXACT)
    if match_type not in (VALUE_MATCH_EXACT, VALUE_MATCH_REGEX):
        raise _invalid(f"{path}.type", match_type, "must be Exact or RegularExpression")
    return ValueMatch(name.lower() if lower else name, _str(item.get("value"), f"{path}.value"), match_type)


def route_filter(value: Any, path: str, namespace: str) -> RouteFilter:
    item = _mapping(value, path)
    kind = _str(item.get("type"), f"{path}.type")
    if not kind:
        raise _required(f"{path}.type")
    if kind == "RequestHeaderModifier":
        return RouteFilter(kind, request_headers=_header_modifier(item.get("requestHeaderModifier"), f"{path}.requestHeaderModifier"))
    if kind == "ResponseHeaderModifier":
        return RouteFilter(kind, response_headers=_header_modifier(item.get("responseHeaderModifier"), f"{path}.responseHeaderModifier"))
    if kind == "RequestRedirect":
        return RouteFilter(kind, redirect=_redirect(item.get("requestRedirect"), f"{path}.requestRedirect"))
    if kind == "URLRewrite":
        rewrite = _mapping(item.get("urlRewrite"), f"{path}.urlRewrite")
        return RouteFilter(
            kind,
            rewrite=RewriteFilter(
                hostname=parse_host(rewrite.get("hostname"), f"{path}.urlRewrite.hostname"),
                path=_path_modifier(rewrite.get("path"), f"{path}.urlRewrite.path"),
            ),
        )
    if kind == "RequestMirror":
        return RouteFilter(kind, mirror=_mirror(item.get("requestMirror"), f"{path}.requestMirror", namespace))
    if kind == "CORS":
        return RouteFilter(kind, cors=_cors(item.get("cors"), f"{path}.cors"))
    return RouteFilter(kind)  # ExtensionRef...: routing reports what it cannot do


def _cors(value: Any, path: str) -> CorsFilter:
    """HTTPCORSFilter: the CRD's rules (a "*" alone in its list, maxAge at least 1) checked again, as every value here is."""
    item = _mapping(value, path)

    def names(key: str) -> tuple[str, ...]:
        found = tuple(_str(v, f"{path}.{key}") for v in _list(item.get(key), f"{path}.{key}"))
        if "*" in found and len(found) > 1:
            raise _invalid(f"{path}.{key}", ", ".join(found), "cannot contain '*' alongside other values")
        return found

    max_age = _int(item.get("maxAge"), f"{path}.maxAge")
    if max_age is not None and max_age < 1:
        raise _invalid(f"{path}.maxAge", max_age, "must be at least 1")
    credentials = item.get("allowCredentials")
    if credentials is not None and not isinstance(credentials, bool):
        raise _invalid(f"{path}.allowCredentials", credentials, "must be true or false")
    return CorsFilter(names("allowOrigins"), names("allowMethods"), names("allowHeaders"), names("exposeHeaders"), bool(credentials), 5 if max_age is None else max_age)


def _mirror(value: Any, path: str, namespace: str) -> MirrorFilter:
    """HTTPRequestMirrorFilter: backendRef, and percent (0-100) or fraction (numerator/denominator, default 100)."""
    item = _mapping(value, path)
    backend = backend_ref(item.get("backendRef"), f"{path}.backendRef", namespace)
    percent = _int(item.get("percent"), f"{path}.percent")
    if percent is not None and not 0 <= percent <= 100:
        raise _invalid(f"{path}.percent", percent, "must be between 0 and 100")
    share = 100.0 if percent is None else float(percent)
    if item.get("fraction") is not None:
        fraction = _mapping(item.get("fraction"), f"{path}.fraction")
        numerator = _int(fraction.get("numerator"), f"{path}.fraction.numerator") or 0
        denominator = _int(fraction.get("denominator"), f"{path}.fraction.denominator") or 100
        if not 0 <= numerator <= denominator:
            raise _invalid(f"{path}.fraction", f"{numerator}/{denominator}", "needs 0 <= numerator <= denominator, denominator > 0")
        share = 100.0 * numerator / denominator
    return MirrorFilter(backend, share)


def _header_modifier(value: Any, path: str) -> HeaderModifier:
    item = _mapping(value, path)

    def pairs(key: str) -> tuple[tuple[str, str], ...]:
        found = (_mapping(h, f"{path}.{key}") for h in _list(item.get(key), f"{path}.{key}"))
        return tuple((_str(h.get("name"), f"{path}.{key}.name"), _str(h.get("value"), f"{path}.{key}.value")) for h in found)

    return HeaderModifier(set=pairs("set"), add=pairs("add"), remove=tuple(_str(n, f"{path}.remove") for n in _list(item.get("remove"), f"{path}.remove")))


def _redirect(value: Any, path: str) -> RedirectFilter:
    item = _mapping(value, path)
    port = item.get("port")
    code = _int(item.get("statusCode"), f"{path}.statusCode") or 302
    if code not in (301, 302, 303, 307, 308):
        raise _invalid(f"{path}.statusCode", code, "must be 301, 302, 303, 307 or 308")
    scheme = _str(item.get("scheme"), f"{path}.scheme")
    if scheme not in ("", "http", "https"):
        raise _invalid(f"{path}.scheme", scheme, "must be http or https")
    return RedirectFilter(
        scheme=scheme,
        hostname=parse_host(item.get("hostname"), f"{path}.hostname"),
        path=_path_modifier(item.get("path"), f"{path}.path"),
        port=_port_number(port, f"{path}.port") if port is not None else None,
        status_code=code,
    )


def _path_modifier(value: Any, path: str) -> Optional[PathModifier]:
    if value is None:
        return None
    item = _mapping(value, path)
    kind = _str(item.get("type"), f"{path}.type")
    if kind == "ReplaceFullPath":
        return PathModifier(kind, _str(item.get("replaceFullPath"), f"{path}.replaceFullPath"))
    if kind == "ReplacePrefixMatch":
        return PathModifier(kind, _str(item.get("replacePrefixMatch"), f"{path}.replacePrefixMatch"))
    raise _invalid(f"{path}.type", kind, "must be ReplaceFullPath or ReplacePrefixMatch")


def backend_ref(value: Any, path: str, namespace: str) -> BackendRef:
    item = _mapping(value, path)
    name = _str(item.get("name"), f"{path}.name")
    if not name:
        raise _required(f"{path}.name")
    port = item.get("port")
    weight = _int(item.get("weight"), f"{path}.weight")
    if weight is not None and not 0 <= weight <= 1_000_000:
        raise _invalid(f"{path}.weight", weight, "must be between 0 and 1000000")
    return BackendRef(
        name=name,
        namespace=_str(item.get("namespace"), f"{path}.namespace") or namespace,
        port=_port_number(port, f"{path}.port") if port is not None else None,
        group=_str(item.get("group"), f"{path}.group"),
        kind=_str(item.get("kind"), f"{path}.kind", "Service"),
        weight=1 if weight is None else weight,
        filters=tuple(route_filter(f, f"{path}.filters[{i}]", namespace) for i, f in enumerate(_list(item.get("filters"), f"{path}.filters"))),
    )


def duration(value: Any, path: str) -> Optional[float]:
    """
    A Gateway API Duration (GEP-2257: "10s", "1h30m", "500ms"; "0s" is zero): seconds.

    The GEP's pattern C{^([0-9]{1,5}(h|m|s|ms)){1,4}$} read as Go's time.ParseDuration reads
    it: components in any order, a repeated unit adds up ("10s30m1h" is 1h30m10s).
    """
    if value is None:
        return None
    text = _str(value, path)
    if _DURATION.fullmatch(text) is None:
        raise _invalid(path, text, "must be a Gateway API duration such as 10s, 1m30s or 500ms")
    millis = sum(int(digits) * _UNIT_MILLIS[unit] for digits, unit in _COMPONENT.findall(text))
    return millis / 1000


def rule_retry(value: Any, path: str) -> Optional[RuleRetry]:
    """HTTPRouteRetry (GEP-1731): codes 400-599, attempts >= 0, backoff a Gateway API duration; None when the rule has none."""
    if value is None:
        return None
    item = _mapping(value, path)
    codes = tuple(_int(c, f"{path}.codes") for c in _list(item.get("codes"), f"{path}.codes"))
    for code in codes:
        if code is None or not 400 <= code <= 599:
            raise _invalid(f"{path}.codes", code, "must be between 400 and 599")
    attempts = _int(item.get("attempts"), f"{path}.attempts")
    if attempts is not None and attempts < 0:
        raise _invalid(f"{path}.attempts", attempts, "must be 0 or more")
    return RuleRetry(tuple(c for c in codes if c is not None), attempts, duration(item.get("backoff"), f"{path}.backoff"))
