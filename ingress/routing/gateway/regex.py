# -*- test-case-name: tests.unit.test_gateway_routing -*-
"""
The paths of a Gateway API host that has RegularExpression path matches.

The Gateway API leaves the precedence of RegularExpression path matches to the
implementation (apis/v1/httproute_types.go, HTTPRouteRule.Matches); twingress's is:
an Exact path, then the regular expressions, longest pattern first, then the longest
PathPrefix.  Within each kind the rest of the spec's order holds (a method, then the
most header matches, the most query parameter matches, the oldest route, rule and match
order).  Regular expressions come before prefixes so that a catch-all prefix "/" does not
hide them; a pattern is usually written to be more specific than a prefix.

The dialect is Python's C{re} (also implementation-specific, HTTPPathMatch: Envoy uses
RE2), matched against the whole normalised path (C{re.fullmatch}, case-sensitive, no
query): C{/v[0-9]+} matches C{/v2} and not C{/v2/x}.

Which patterns match a path is known only per request, so these hosts do not keep their
precedence chains precomputed per path as the others do: the exact slot, every matching
pattern and the longest prefix slot are joined at lookup.  Hosts without regular
expressions are plain L{HostRoutes} and pay nothing for this.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

from ingress.routing.lookup import longest_prefix
from ingress.routing.policies.matching import RequestMatch
from ingress.routing.route import Route
from ingress.routing.table import HostRoutes

_ANY = RequestMatch()


@dataclass(frozen=True, slots=True)
class RegexPaths(HostRoutes):
    """
    A host's Exact, RegularExpression and PathPrefix paths: C{exact} holds only the Exact
    candidates of a path, C{prefixes} as for any host, C{regex} one route per regular
    expression match in precedence order (module docstring).
    """

    def match(self, path: str) -> Optional[Route]:
        """The exact slot, each pattern that matches all of C{path}, the longest prefix: the first that asks nothing more ends the chain."""
        chain: list[Route] = []
        for route in self._candidates(path):
            chain.append(route)
            if _final(route):
                break
        if len(chain) <= 1:
            return chain[0] if chain else None
        return _joined(chain, path)

    def _candidates(self, path: str) -> Iterator[Route]:
        route = self.exact.get(path)
        if route is not None:
            yield route
        for pattern, route in self.regex:
            if pattern.fullmatch(path) is not None:
                yield route
        route = longest_prefix(self.prefixes, path)
        if route is not None:
            yield route


def _final(route: Route) -> bool:
    """Whether nothing after C{route} can be reached: it, or its last choice, asks for nothing more."""
    return not route.choices or route.choices[-1][0].unconditional


def _joined(chain: list[Route], path: str) -> Route:
    """One route whose choices are those of C{chain} in order (a route without choices is an unconditional one)."""
    choices: list[tuple[RequestMatch, Route]] = []
    for route in chain:
        choices.extend(route.choices or ((_ANY, route),))
    first = chain[0]
    return Route(name=first.name, source=first.source, upstream=first.upstream, path=path, choices=tuple(choices))
