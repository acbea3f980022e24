# -*- test-case-name: tests.unit.test_external_auth -*-
"""
Text with nginx variables in it, as ingress-nginx annotations carry them.

C{upstream-hash-by} keys, C{auth-url}, C{auth-signin}, C{auth-cache-key} and the
values of C{auth-proxy-set-headers} are nginx strings: literal text and
C{$name} or C{${name}} variables, filled in per request.  A template is read
once, into parts; a variable twingress cannot compute is refused when the
template is read (the route is then closed or the value ignored, as its
annotation decides), never filled in as empty text at request time.

The variables twingress computes (nginx's meaning, ingress-nginx's additions):
C{request_uri}, C{uri}, C{args}, C{host}, C{remote_addr}, C{request_method},
C{scheme} and C{pass_access_scheme} (the client's scheme), C{best_http_host}
and C{http_host} (the Host field), C{escaped_request_uri} (C{request_uri} with
every byte but letters, digits and C{-._~} percent-encoded), C{remote_user}
(the user of Basic credentials), C{http_<field>}, C{cookie_<name>} and C{arg_<name>}.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_PART = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}|\$([a-z_][a-z0-9_]*)|([^$]+)", re.IGNORECASE)


class Vocabulary(NamedTuple):
    """The variables a template may name: these names, and any name of these families (C{http_} + a field name)."""

    names: frozenset[str]
    families: tuple[str, ...]

    def knows(self, name: str) -> bool:
        return name in self.names or any(name.startswith(family) and len(name) > len(family) for family in self.families)


REQUEST_VARIABLES = Vocabulary(frozenset({"request_uri", "uri", "args", "host", "remote_addr"}), ("http_", "cookie_"))
"""The variables of C{upstream-hash-by} keys."""

ALL_VARIABLES = Vocabulary(
    REQUEST_VARIABLES.names | {"request_method", "scheme", "pass_access_scheme", "best_http_host", "escaped_request_uri", "remote_user"},
    ("http_", "cookie_", "arg_"),
)
"""What the external-auth annotations may name."""

HEADER_VARIABLES = Vocabulary(ALL_VARIABLES.names | {"msec", "request_id"}, ALL_VARIABLES.families)
"""
What the values of the ConfigMap's header fields (proxy-set-headers, add-headers) may name: besides
the external-auth ones, C{msec} (the time, in seconds with milliseconds) and C{request_id} (the
request's X-Request-ID: the client's or the one generated).
"""

Part = tuple[str, str]
"""("text", literal) or ("var", variable name, lower-case)."""


class UnknownVariable(ValueError):
    """A variable twingress cannot compute for a request."""


def parse_template(value: str, known: Vocabulary = REQUEST_VARIABLES) -> tuple[Part, ...]:
    """The parts of C{value}; raises L{UnknownVariable}, or ValueError for text that is not a template (a lone C{$})."""
    parts: list[Part] = []
    position = 0
    while position < len(value):
        match = _PART.match(value, position)
        if match is None:
            raise ValueError(f"cannot read {value[position:]!r}")
        braced, bare, text = match.groups()
        name = (braced or bare or "").lower()
        if text is not None:
            parts.append(("text", text))
        elif known.knows(name):
            parts.append(("var", name))
        else:
            raise UnknownVariable(f"${name} is not a variable twingress knows")
        position = match.end()
    return tuple(parts)


def is_literal(parts: tuple[Part, ...]) -> bool:
    """Whether the template has no variable (its text is the same for every request)."""
    return all(kind == "text" for kind, _ in parts)
