# -*- test-case-name: tests.unit.test_access -*-
"""
Who may reach a route: source address ranges.

ingress-nginx's "Allowlist source range" and "Denylist source range"
(annotations.md) become nginx C{deny}/C{allow} rules in that order followed by
C{deny all} when there is an allow list: an address in the deny list is refused,
then, if there is an allow list, any address not in it.  Refusals are 403.  The
address is the client's as the listener knows it: the socket peer, the PROXY
protocol's source, or the forwarded address of a trusted proxy (the ConfigMap's
C{proxy-real-ip-cidr}).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


_REMEMBERED = 4096  # decisions kept per route: a client's next requests cost a dict lookup


@dataclass(frozen=True, slots=True)
class SourceRanges:
    """The allow list (empty: everyone not denied) and the deny list of a route."""

    allow: tuple[Network, ...] = ()
    deny: tuple[Network, ...] = ()
    _decided: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def permits(self, address: str) -> bool:
        """Whether a client at C{address} may pass; an address that is not one (unknown peer) may not."""
        decided = self._decided.get(address)
        if decided is None:
            if len(self._decided) >= _REMEMBERED:
                self._decided.clear()  # a flood of addresses costs the parse again, never memory
            decided = self._decided[address] = self._judge(address)
        return decided

    def _judge(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 on a dual-stack listener is 10.0.0.1
        if any(ip in network for network in self.deny):
            return False
        return not self.allow or any(ip in network for network in self.allow)

    def to_json(self) -> dict[str, list[str]]:
        return {"allow": [str(n) for n in self.allow], "deny": [str(n) for n in self.deny]}
