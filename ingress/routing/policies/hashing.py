# -*- test-case-name: tests.unit.test_hashing -*-
"""
C{upstream-hash-by}: the endpoint chosen by a key made from the request.

ingress-nginx's "Custom NGINX upstream hashing": the key is text, nginx
variables or both (C{$request_uri}, C{$request_uri$host}, C{${request_uri}-text}).
With C{upstream-hash-by-subset} the key picks a subset of
C{upstream-hash-by-subset-size} endpoints (default 3) and each request goes to
one of them at random ("a balance between stickiness and load distribution").
The variables twingress knows are C{request_uri}, C{uri}, C{args}, C{host},
C{remote_addr}, C{http_<name>} and C{cookie_<name>}.  The key is mapped to an
endpoint by rendezvous hashing (L{ingress.routing.policies.affinity.rendezvous}),
which, like the ketama ring ingress-nginx uses, moves only a few keys when
the endpoints change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PART = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}|\$([a-z_][a-z0-9_]*)|([^$]+)", re.IGNORECASE)
_PLAIN_VARIABLES = frozenset({"request_uri", "uri", "args", "host", "remote_addr"})

Part = tuple[str, str]
"""("text", literal) or ("var", variable name)."""


class UnknownVariable(ValueError):
    """A variable twingress cannot compute for a request."""


@dataclass(frozen=True, slots=True)
class HashBy:
    """The key template, as parts."""

    parts: tuple[Part, ...]
    source: str  # as written, for /debug/routes
    subset_size: int = 0  # upstream-hash-by-subset: the key picks this many endpoints, one of them at random


def parse_template(value: str) -> HashBy:
    """The parts of a key template; raises L{UnknownVariable} or ValueError for what cannot be read."""
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
        elif name in _PLAIN_VARIABLES or (name.startswith(("http_", "cookie_")) and len(name) > len("cookie_")):
            parts.append(("var", name))
        else:
            raise UnknownVariable(f"${name} is not a variable twingress knows")
        position = match.end()
    if not parts:
        raise ValueError("the key is empty")
    return HashBy(tuple(parts), value)
