# -*- test-case-name: tests.unit.test_cors -*-
"""
Cross-origin resource sharing: ingress-nginx's "Enable CORS" annotations, and the Gateway API's
HTTPRoute CORS filter (GEP-1767, C{HTTPCORSFilter}) compiled into the same value.

A request whose C{Origin} is allowed gets the CORS fields on its response; an
allowed C{OPTIONS} request (a preflight) is answered by the proxy with 204 and
the same fields.  With the default origin C{*} every request is allowed (an
C{Origin} or not) and C{Access-Control-Allow-Origin: *} is sent; with a list,
the request's own origin is echoed when it is one of them, and a request from
any other origin passes without CORS fields (its preflight goes to the backend).
Origins are compared whole and case-insensitively.  ingress-nginx anchors its
origin pattern at the end only; twingress anchors both ends, so that
C{https://evil.test.https://good.example} is not taken for C{https://good.example}.

Where the two readings differ, C{gateway} (set for the Gateway filter) follows GEP-1767:

  - a C{*} in an origin's host stands for any number of labels (ingress-nginx: exactly one), and an
    origin without a port also matches the scheme's default port spelt out;
  - with C{allowCredentials}, a C{*} origin is answered with the request's own origin, never C{*};
  - a C{*} in C{allowMethods} or C{allowHeaders} is answered with the preflight's
    C{Access-Control-Request-Method} / C{-Headers} (the field left out when the request has none),
    which the GEP allows with or without credentials;
  - no C{allowHeaders} (or methods): no field, rather than ingress-nginx's default lists;
  - a preflight is an C{OPTIONS} with C{Origin} and C{Access-Control-Request-Method} (Fetch standard),
    answered here whether its origin is allowed or not (without CORS fields then); ingress-nginx
    answers every allowed C{OPTIONS}, and passes the others to the backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

ANY = "*"
DEFAULT_METHODS = "GET, PUT, POST, DELETE, PATCH, OPTIONS"
DEFAULT_HEADERS = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization"
DEFAULT_MAX_AGE = 1728000
GATEWAY_MAX_AGE = 5  # HTTPCORSFilter.maxAge's default
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}

Lookup = Callable[[bytes], Optional[bytes]]
"""A request field by lower-case name (None when absent)."""


def origin_pattern(origins: tuple[str, ...], gateway: bool = False) -> Optional[re.Pattern[bytes]]:
    """One pattern for a list of origins (None for C{*}); a C{*} stands for one DNS label (any number with C{gateway})."""
    if origins == (ANY,):
        return None
    label = rb"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*" if gateway else rb"[A-Za-z0-9-]+"
    alternatives = []
    for origin in origins:
        text = re.escape(origin.encode("ascii")).replace(rb"\*", label, 1)
        scheme, _, rest = origin.partition("://")
        if gateway and scheme in _DEFAULT_PORTS and ":" not in rest:
            text += rb"(?:%s)?" % _DEFAULT_PORTS[scheme].encode()
        alternatives.append(text)
    return re.compile(rb"(?:%s)" % b"|".join(alternatives), re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Cors:
    """One route's CORS settings, with the response fields precomputed."""

    origins: tuple[str, ...] = (ANY,)
    methods: str = DEFAULT_METHODS
    headers: str = DEFAULT_HEADERS
    expose: str = ""
    credentials: bool = True
    max_age: int = DEFAULT_MAX_AGE
    gateway: bool = False  # GEP-1767's reading where it differs from ingress-nginx's (module docstring)
    _pattern: Optional[re.Pattern[bytes]] = field(default=None, compare=False, repr=False)
    _tail: bytes = field(default=b"", compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pattern", origin_pattern(self.origins, self.gateway))
        tail = b""
        if self.credentials:
            tail += b"Access-Control-Allow-Credentials: true\r\n"
        if not self.gateway or self.methods not in ("", ANY):
            tail += b"Access-Control-Allow-Methods: %s\r\n" % self.methods.encode()
        if not self.gateway or self.headers not in ("", ANY):
            tail += b"Access-Control-Allow-Headers: %s\r\n" % self.headers.encode()
        if self.expose:
            tail += b"Access-Control-Expose-Headers: %s\r\n" % self.expose.encode()
        tail += b"Access-Control-Max-Age: %d\r\n" % self.max_age
        object.__setattr__(self, "_tail", tail)

    def fields_for(self, origin: Optional[bytes], lookup: Optional[Lookup] = None) -> bytes:
        """
        The CORS response fields (CRLF-terminated lines) for a request from C{origin}; b"" if not
        allowed.  C{lookup} reads the preflight's request fields a Gateway C{*} echoes.
        """
        if self._pattern is None:
            if self.gateway and self.credentials and origin is not None:
                return b"Access-Control-Allow-Origin: %s\r\n%s" % (origin, self._echoed(lookup))
            return b"Access-Control-Allow-Origin: *\r\n" + self._echoed(lookup)
        if origin is None or self._pattern.fullmatch(origin) is None:
            return b""
        return b"Access-Control-Allow-Origin: %s\r\n%s" % (origin, self._echoed(lookup))

    def answers_preflight(self, method: bytes, lookup: Lookup, fields: bytes) -> bool:
        """
        Whether the proxy answers this request itself, 204 with C{fields} (L{fields_for}'s): ingress-nginx
        answers an allowed C{OPTIONS}; the Gateway filter every preflight, with no CORS fields for an
        origin not allowed (HTTPCORSFilter.AllowOrigins: "returns 204/200 response but doesn't set the
        relevant cross-origin response headers"), so that it never reaches the backend.
        """
        if method != b"OPTIONS":
            return False
        if not self.gateway:
            return bool(fields)
        return lookup(b"origin") is not None and lookup(b"access-control-request-method") is not None

    def _echoed(self, lookup: Optional[Lookup]) -> bytes:
        """The precomputed fields, with a Gateway C{*} method or header list answered by the request's own."""
        if not self.gateway or lookup is None or ANY not in (self.methods, self.headers):
            return self._tail
        echoed = b""
        method = lookup(b"access-control-request-method") if self.methods == ANY else None
        if method is not None:
            echoed += b"Access-Control-Allow-Methods: %s\r\n" % method
        headers = lookup(b"access-control-request-headers") if self.headers == ANY else None
        if headers is not None:
            echoed += b"Access-Control-Allow-Headers: %s\r\n" % headers
        return echoed + self._tail

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"origins": list(self.origins), "methods": self.methods, "headers": self.headers, "expose": self.expose,
                                    "credentials": self.credentials, "maxAge": self.max_age}
        if self.gateway:
            shown["reading"] = "GEP-1767"
        return shown
