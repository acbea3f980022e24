# -*- test-case-name: tests.unit.test_gateway_isolation -*-
"""
The hostnames of a port's Gateway listeners, and which of them a host belongs to.

A host belongs to the most specific listener hostname that matches it: an exact
hostname, then the wildcard with the longest suffix (a Gateway wildcard covers any
number of labels), then a listener without a hostname.  Two features read it:

- listener isolation (GatewayHTTPListenerIsolation; Gateway API "Listener isolation",
  conformance tests/gateway-http-listener-isolation.go): a request is served only by
  the routes of the listener its host belongs to, so a route attached to a less
  specific listener never serves a host a more specific listener owns;
- misdirected requests (GatewayHTTPSListenerDetectMisdirectedRequests; RFC 9110
  15.5.20, conformance tests/httproute-https-listener-detect-misdirected-requests.go):
  on a TLS connection whose SNI name chose one HTTPS listener, a request whose Host
  belongs to another (an HTTP/2 connection coalesced across names) is answered 421.

Hosts are lower-case without port; a host may itself be a wildcard ("*.a.example"),
which belongs to the listener that covers every name it stands for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True, slots=True)
class ListenerNames:
    """C{exact} hostnames, wildcard C{suffixes} (after "*.", longest first), and C{any}: a listener without one."""

    exact: frozenset[str]
    suffixes: tuple[str, ...]
    any: bool

    @classmethod
    def of(cls, hostnames: Iterable[str]) -> ListenerNames:
        """From listener hostnames as the Gateway spells them ("" for none, "*.suffix", or exact)."""
        names = set(hostnames)
        suffixes = sorted({h[2:] for h in names if h.startswith("*.")}, key=len, reverse=True)
        return cls(frozenset(h for h in names if h and not h.startswith("*.")), tuple(suffixes), "" in names)

    def listener_for(self, host: str) -> Optional[str]:
        """The hostname of the most specific listener that covers C{host} ("" : the hostless one), or None."""
        wildcard = host.startswith("*.")
        name = host[2:] if wildcard else host
        if not wildcard and name in self.exact:
            return name
        for suffix in self.suffixes:
            if name.endswith("." + suffix) or (wildcard and name == suffix):
                return "*." + suffix
        return "" if self.any else None

    def misdirected(self, server_name: str, host: str) -> bool:
        """Whether C{host} belongs to another listener than the TLS connection's C{server_name} chose."""
        return self.listener_for(server_name) != self.listener_for(host)

    def to_json(self) -> list[str]:
        """For /debug/routes: the hostnames, most specific first."""
        return sorted(self.exact) + ["*." + s for s in self.suffixes] + ([""] if self.any else [])
