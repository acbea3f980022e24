# -*- test-case-name: tests.unit.test_paths -*-
"""
Request paths in the form routing matches them: what a path means, not how it is spelled.

nginx normalises a request URI before it chooses a location: it decodes every
percent-encoding once, resolves C{.} and C{..} segments and merges repeated
slashes; a path that climbs above the root is answered 400.  We do the same, in
that order, so that a route (and, later, the guard on it) catches every
spelling of its paths: with C{/admin} and C{/} routed apart, C{/x/../admin},
C{/./admin}, C{/%61dmin}, C{//admin} and C{/x/%2e%2e/admin} all mean C{/admin}.

Deliberate choices, each nginx's:
- C{%2F} decodes to C{/} for matching: C{/admin%2Fusers} is under C{/admin}.  A
  route must not be reachable around its guard by encoding the separator.
- C{%2e%2e} decodes to C{..} and is then resolved like a literal C{..}: the
  encoded form is not a way to keep a dot segment.
- Decoding happens once: C{%252e} is the literal text C{%2e}, not a dot.
- An invalid percent-encoding, or one that decodes to NUL, is a 400.
What the upstream receives is decided by the proxy (the original target, as
nginx's C{proxy_pass} without a URI sends it); this module only says which route.

Pure and cheap: a path without C{%}, C{//} and C{/.} is already normal and is
returned as it is after three substring checks.
"""

from __future__ import annotations

import re

_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


class PathError(ValueError):
    """A path that cannot be routed (answered 400): it climbs above the root or is badly encoded."""


def routing_path(path: str) -> str:
    """The normalised form of an origin-form path (no query, no fragment); raises L{PathError}."""
    if "%" not in path and "//" not in path and "/." not in path:
        return path
    return _normalise(path)


def _normalise(path: str) -> str:
    if "%" in path:
        path = _decode(path)
    segments: list[str] = []
    parts = path.split("/")
    for part in parts[1:]:
        if part == "..":
            if not segments:
                raise PathError("the path climbs above the root")
            segments.pop()
        elif part and part != ".":
            segments.append(part)
    if not segments:
        return "/"
    trailing = parts[-1] in ("", ".", "..")  # "/a/b/" and "/a/b/.." both end in a directory
    return "/" + "/".join(segments) + ("/" if trailing else "")


def _decode(path: str) -> str:
    if _BAD_PERCENT.search(path):
        raise PathError("invalid percent-encoding in the path")
    decoded = _PERCENT.sub(lambda match: chr(int(match.group(1), 16)), path)
    if "\x00" in decoded:
        raise PathError("an encoded NUL in the path")
    return decoded


def prefix_key(path: str) -> str:
    """
    The key of a Prefix path in L{HostRoutes.prefixes}: its elements without empty ones.

    "/" -> "", "/foo/" -> "foo", "/a//b" -> "a/b": matching is element-wise,
    so trailing slashes never matter and "/aaa" does not match "/aaaccc".
    """
    return "/".join(element for element in path.split("/") if element)
