# -*- test-case-name: tests.unit.test_cors -*-
"""
Cross-origin resource sharing as ingress-nginx's "Enable CORS" annotations describe it.

A request whose C{Origin} is allowed gets the CORS fields on its response; an
allowed C{OPTIONS} request (a preflight) is answered by the proxy with 204 and
the same fields.  With the default origin C{*} every request is allowed (an
C{Origin} or not) and C{Access-Control-Allow-Origin: *} is sent; with a list,
the request's own origin is echoed when it is one of them, and a request from
any other origin passes without CORS fields (its preflight goes to the backend).
Origins are compared whole and case-insensitively; a C{*} label in one matches
exactly one DNS label (C{https://*.example.com}).  ingress-nginx anchors its
origin pattern at the end only; twingress anchors both ends, so that
C{https://evil.test.https://good.example} is not taken for C{https://good.example}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

ANY = "*"
DEFAULT_METHODS = "GET, PUT, POST, DELETE, PATCH, OPTIONS"
DEFAULT_HEADERS = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization"
DEFAULT_MAX_AGE = 1728000


def origin_pattern(origins: tuple[str, ...]) -> Optional[re.Pattern[bytes]]:
    """One pattern for a list of origins (None for C{*}); a C{*} stands for one DNS label."""
    if origins == (ANY,):
        return None
    alternatives = [re.escape(origin.encode("ascii")).replace(rb"\*", rb"[A-Za-z0-9-]+", 1) for origin in origins]
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
    _pattern: Optional[re.Pattern[bytes]] = field(default=None, compare=False, repr=False)
    _tail: bytes = field(default=b"", compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pattern", origin_pattern(self.origins))
        tail = b""
        if self.credentials:
            tail += b"Access-Control-Allow-Credentials: true\r\n"
        tail += b"Access-Control-Allow-Methods: %s\r\nAccess-Control-Allow-Headers: %s\r\n" % (self.methods.encode(), self.headers.encode())
        if self.expose:
            tail += b"Access-Control-Expose-Headers: %s\r\n" % self.expose.encode()
        tail += b"Access-Control-Max-Age: %d\r\n" % self.max_age
        object.__setattr__(self, "_tail", tail)

    def fields_for(self, origin: Optional[bytes]) -> bytes:
        """The CORS response fields (CRLF-terminated lines) for a request from C{origin}; b"" if not allowed."""
        if self._pattern is None:
            return b"Access-Control-Allow-Origin: *\r\n" + self._tail
        if origin is None or self._pattern.fullmatch(origin) is None:
            return b""
        return b"Access-Control-Allow-Origin: %s\r\n%s" % (origin, self._tail)

    def to_json(self) -> dict[str, object]:
        return {"origins": list(self.origins), "methods": self.methods, "headers": self.headers, "expose": self.expose,
                "credentials": self.credentials, "maxAge": self.max_age}
