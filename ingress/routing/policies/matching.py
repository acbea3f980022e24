# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
What a request must carry besides its host and path: Gateway API's method, header and query
parameter matches, and the ordered choice among the routes of one path.

The table finds the routes of a path by dictionary probes as for Ingresses.  When
some of them ask for more (an HTTPRoute match with a method, headers or query
parameters), the path's slot holds a route with C{choices}: every candidate whose
path matches, in the Gateway API's precedence order, each with its
L{RequestMatch}; the proxy takes the first that accepts the request.  A route
without choices (every Ingress route) pays one attribute test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional
from urllib.parse import unquote_to_bytes

FieldLookup = Callable[[bytes], Optional[bytes]]
"""The value of a request field by lower-case name (the first field of that name), or None."""


@dataclass(frozen=True, slots=True)
class ValueCondition:
    """A header or query parameter: its C{name}, and an exact C{value} or a C{pattern} that must match all of it."""

    name: bytes
    value: bytes = b""
    pattern: Optional[re.Pattern[bytes]] = None

    def accepts(self, found: Optional[bytes]) -> bool:
        if found is None:
            return False
        if self.pattern is not None:
            return self.pattern.fullmatch(found) is not None
        return found == self.value


@dataclass(frozen=True, slots=True)
class RequestMatch:
    """
    The conditions of one HTTPRoute match beyond its path: all must hold.  Header names
    are compared case-insensitively (C{name} is lower-case), query parameter names
    exactly (RFC 3986), values exactly after percent-decoding.
    """

    method: bytes = b""
    headers: tuple[ValueCondition, ...] = ()
    query: tuple[ValueCondition, ...] = ()
    scheme: bytes = b""  # b"http" or b"https": a route attached to listeners of one kind only

    @property
    def unconditional(self) -> bool:
        return not (self.method or self.headers or self.query or self.scheme)

    def accepts(self, scheme: bytes, method: bytes, field: FieldLookup, target: bytes) -> bool:
        """Whether a request over C{scheme} with C{method}, fields found by C{field} and target C{target} is matched."""
        if self.scheme and scheme != self.scheme:
            return False
        if self.method and method != self.method:
            return False
        for header in self.headers:
            if not header.accepts(field(header.name)):
                return False
        if self.query:
            params = query_params(target)
            for param in self.query:
                if not param.accepts(params.get(param.name)):
                    return False
        return True

    def to_json(self) -> dict[str, object]:
        """For /debug/routes."""
        shown: dict[str, object] = {}
        if self.scheme:
            shown["scheme"] = self.scheme.decode("latin-1")
        if self.method:
            shown["method"] = self.method.decode("latin-1")
        for key, conditions in (("headers", self.headers), ("queryParams", self.query)):
            if conditions:
                shown[key] = {
                    c.name.decode("latin-1"): (f"~{c.pattern.pattern.decode('latin-1')}" if c.pattern is not None else c.value.decode("latin-1"))
                    for c in conditions
                }
        return shown


def query_params(target: bytes) -> dict[bytes, bytes]:
    """The query parameters of a request target, percent-decoded; the first of a repeated name counts."""
    query = target.partition(b"?")[2].partition(b"#")[0]
    params: dict[bytes, bytes] = {}
    for pair in query.split(b"&"):
        if not pair:
            continue
        name, _, value = pair.partition(b"=")
        params.setdefault(unquote_to_bytes(name.replace(b"+", b" ")), unquote_to_bytes(value.replace(b"+", b" ")))
    return params
