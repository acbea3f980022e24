# -*- test-case-name: tests.unit.test_global_guards -*-
"""
The ingress-nginx ConfigMap's global filters: C{block-cidrs}, C{block-user-agents}, C{block-referers}.

ingress-nginx's nginx.tmpl ("Global filters") puts C{deny} rules for the CIDRs in the C{http} block
and two nginx C{map}s of C{$http_user_agent} and C{$http_referer} whose match makes every server
C{return 403}.  A map entry is a regular expression when it starts with C{~} (C{~*}: ignoring case),
else a string compared with the whole value ignoring case (nginx's map lower-cases both).  twingress
applies all three to every request of its HTTP and HTTPS listeners before routing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ingress.routing.policies.access import SourceRanges

Matcher = re.Pattern[str] | str
"""A compiled pattern (an entry starting with ~), or a lower-case string matched whole."""


def matchers(entries: tuple[str, ...]) -> tuple[Matcher, ...]:
    """The entries of a block-user-agents or block-referers list; raises C{re.error} for a pattern that is none."""
    found: list[Matcher] = []
    for entry in entries:
        if entry.startswith("~*"):
            found.append(re.compile(entry[2:], re.IGNORECASE))
        elif entry.startswith("~"):
            found.append(re.compile(entry[1:]))
        else:
            found.append(entry.lower())
    return tuple(found)


def _matches(found: tuple[Matcher, ...], value: Optional[str]) -> bool:
    if not found or value is None:
        return False
    lower = value.lower()
    return any(lower == m if isinstance(m, str) else m.search(value) is not None for m in found)


@dataclass(frozen=True, slots=True)
class GlobalBlock:
    """Who is refused (403) before anything else; the sources are kept as written for /debug/routes."""

    addresses: Optional[SourceRanges] = None
    user_agents: tuple[Matcher, ...] = ()
    referers: tuple[Matcher, ...] = ()

    def refuses(self, ip: str, user_agent: Optional[str], referer: Optional[str]) -> str:
        """Which filter refuses this request ("block-cidrs", "block-user-agents", "block-referers"), or ""."""
        if self.addresses is not None and not self.addresses.permits(ip):
            return "block-cidrs"
        if _matches(self.user_agents, user_agent):
            return "block-user-agents"
        if _matches(self.referers, referer):
            return "block-referers"
        return ""

    def to_json(self) -> dict[str, list[str]]:
        def shown(found: tuple[Matcher, ...]) -> list[str]:
            return [m if isinstance(m, str) else ("~*" if m.flags & re.IGNORECASE else "~") + m.pattern for m in found]

        return {
            "cidrs": [str(n) for n in self.addresses.deny] if self.addresses is not None else [],
            "userAgents": shown(self.user_agents),
            "referers": shown(self.referers),
        }
