# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
Gateway API path modifiers (HTTPPathModifier): the whole path replaced, or the prefix a rule matched.

ReplacePrefixMatch replaces the matched PathPrefix element by element, a trailing
"/" of either side ignored, as the table of the HTTPPathModifier documentation
shows: C{/foo/bar} with prefix C{/foo} and C{/xyz} becomes C{/xyz/bar}, C{/foo/}
with C{/foo} and C{""} becomes C{/}.  Used by URLRewrite (the path the upstream
receives) and RequestRedirect (the path of the Location).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNSAFE = re.compile(rb"[^\x21-\x7e]|[%#?]")
REPLACE_FULL_PATH = "ReplaceFullPath"
REPLACE_PREFIX_MATCH = "ReplacePrefixMatch"


@dataclass(frozen=True, slots=True)
class PathReplace:
    """C{kind}: REPLACE_FULL_PATH (C{value} is the path) or REPLACE_PREFIX_MATCH (C{matched} becomes C{value})."""

    kind: str
    value: str
    matched: str = ""  # the rule's PathPrefix (REPLACE_PREFIX_MATCH only)

    @property
    def prefix(self) -> str:
        """No X-Forwarded-Prefix (what ingress-nginx's x-forwarded-prefix adds to a rewrite)."""
        return ""

    def path_for(self, path: str) -> str:
        """The new path for a normalised request path."""
        if self.kind == REPLACE_FULL_PATH:
            return self.value or "/"
        rest = path[len(self.matched.rstrip("/")) :]
        replaced = self.value.rstrip("/") + rest
        if not replaced.startswith("/"):
            replaced = "/" + replaced
        return replaced

    def target_for(self, path: str, query: bytes) -> bytes:
        """The request target the upstream receives: the new path, escaped, and the query."""
        escaped = _UNSAFE.sub(lambda c: b"%%%02X" % c.group(0)[0], self.path_for(path).encode("latin-1"))
        return escaped + (b"?" + query if query else b"")

    def to_json(self) -> dict[str, str]:
        """For /debug/routes."""
        shown = {"type": self.kind, "value": self.value}
        if self.matched:
            shown["matched"] = self.matched
        return shown
