# -*- test-case-name: tests.unit.test_canary -*-
"""
A canary: another Ingress's backend that takes some of a route's requests.

The decision is ingress-nginx's (its balancer's C{route_to_alternative_balancer},
documented under "Canary" on its annotations page), in its order of precedence:

  1. the header C{by_header}: equal to C{header_value} when one is set, else
     matching C{header_pattern} (searched, not anchored) when one is set, else
     C{always} → canary, C{never} → main; any other value falls through;
  2. the cookie C{by_cookie}: C{always} → canary, C{never} → main;
  3. the weight: a roll from 1 to C{weight_total} at or below C{weight} → canary.

A canary route is its main route with the canary's name and upstream: every
other policy of the main route applies to it ("all the other non-canary
annotations will be ignored (inherited from the corresponding main ingress)
except load-balance, upstream-hash-by, and annotations related to session
affinity", which are the canary's own).  With session affinity a client stays
with the side whose sticky cookie it carries (C{affinity-canary-behavior:
sticky}, the default): the main's cookie keeps it on the main route, the
canary's on the canary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ingress.routing.route import Route


@dataclass(frozen=True, slots=True)
class Canary:
    """The canary's route and how requests are chosen for it."""

    route: Route
    by_header: bytes = b""  # lower-case field name
    header_value: bytes = b""
    header_pattern: Optional[re.Pattern[bytes]] = None
    by_cookie: str = ""
    weight: int = 0
    weight_total: int = 100
    main_tag: str = ""  # the main upstream's tag in sticky cookies (see L{ingress.routing.policies.affinity})
    sticky: bool = True  # affinity-canary-behavior: sticky (the default) or legacy (affinity ignored)

    def chosen(self, header: Optional[bytes], cookie: Optional[str], roll: int) -> bool:
        """
        Whether a request goes to the canary: C{header} and C{cookie} are the
        request's values of C{by_header} and C{by_cookie} (None when absent),
        C{roll} a uniform integer from 1 to C{weight_total}.
        """
        if header is not None:
            if self.header_value:
                if header == self.header_value:
                    return True
            elif self.header_pattern is not None:
                if self.header_pattern.search(header):
                    return True
            elif header == b"always":
                return True
            elif header == b"never":
                return False
        if cookie is not None:
            if cookie == "always":
                return True
            if cookie == "never":
                return False
        return roll <= self.weight

    def to_json(self) -> dict[str, object]:
        """The canary, for /debug/routes."""
        shown: dict[str, object] = {"route": self.route.name, "upstream": self.route.upstream.key, "weight": f"{self.weight}/{self.weight_total}"}
        if self.by_header:
            shown["header"] = self.by_header.decode("latin-1")
            if self.header_value:
                shown["headerValue"] = self.header_value.decode("latin-1")
            elif self.header_pattern is not None:
                shown["headerPattern"] = self.header_pattern.pattern.decode("latin-1")
        if self.by_cookie:
            shown["cookie"] = self.by_cookie
        return shown
