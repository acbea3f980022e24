# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""
The path the upstream receives, rewritten from the path the client asked for.

The semantics are nginx's C{rewrite REGEX TARGET break}, which is what
ingress-nginx's C{rewrite-target} compiles to: the route's path, as a
case-insensitive regular expression, is searched for in the normalised path
(not anchored: nginx's C{rewrite} is not); on a match the whole path becomes
TARGET with C{$1}..C{$9} replaced by the groups (an unmatched group is empty),
and the query of the request is appended.  Without a match the path goes
unchanged.  The new path is sent with the characters a path cannot carry
percent-encoded (nginx escapes a changed URI the same way).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GROUP = re.compile(r"\$([1-9])")
_UNSAFE = re.compile(rb"[^\x21-\x7e]|[%#?]")


@dataclass(frozen=True, slots=True)
class Rewrite:
    """C{pattern} is searched for in the path; C{target} is the new path; C{prefix} goes as X-Forwarded-Prefix."""

    pattern: re.Pattern[str]
    target: str
    prefix: str = ""

    def path_for(self, path: str) -> str:
        """The rewritten path for a normalised request path (latin-1 text: one character per byte)."""
        match = self.pattern.search(path)
        if match is None:
            return path
        groups = match.groups()

        def group(reference: re.Match[str]) -> str:
            number = int(reference.group(1))
            return (groups[number - 1] or "") if number <= len(groups) else ""

        return _GROUP.sub(group, self.target)

    def target_for(self, path: str, query: bytes) -> bytes:
        """The request target the upstream receives: the rewritten path, escaped, and the query."""
        escaped = _UNSAFE.sub(lambda c: b"%%%02X" % c.group(0)[0], self.path_for(path).encode("latin-1"))
        return escaped + (b"?" + query if query else b"")

    def to_json(self) -> dict[str, str]:
        """The rewrite, for /debug/routes."""
        shown = {"pattern": self.pattern.pattern, "target": self.target}
        if self.prefix:
            shown["xForwardedPrefix"] = self.prefix
        return shown
