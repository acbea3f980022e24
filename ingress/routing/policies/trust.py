# -*- test-case-name: tests.unit.test_trust -*-
"""
Which forwarding headers of a request twingress believes, and who the client then is.

An edge trusts no hop in front of it by default: X-Forwarded-* from clients
are replaced.  Behind an L7 load balancer the ingress-nginx ConfigMap says
otherwise (docs/user-guide/nginx-configuration/configmap.md):
C{use-forwarded-headers} passes the incoming X-Forwarded-Proto, -Host and -Port
on and takes the client's address from C{forwarded-for-header}; C{enable-real-ip}
takes only the address; C{compute-full-forwarded-for} appends to the incoming
X-Forwarded-For instead of replacing it.  Only peers in C{proxy-real-ip-cidr}
are believed (nginx's realip module; its default, 0.0.0.0/0, believes everyone),
and the client is found as nginx's C{real_ip_recursive on} finds it: the last
address of the header that is not itself a trusted proxy.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class ForwardedTrust:
    """What the ConfigMap says about forwarding headers; a table without it trusts none."""

    networks: tuple[Network, ...]
    header: bytes = b"x-forwarded-for"  # lower case
    pass_headers: bool = True  # use-forwarded-headers (else enable-real-ip: the address only)
    append: bool = False  # compute-full-forwarded-for

    def trusts(self, address: str) -> bool:
        """Whether C{address} (a peer, or a hop in the header) is one of the trusted proxies."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)

    def client(self, peer: str, hops: Sequence[str]) -> str:
        """The client's address: the last hop not trusted, from the right (all trusted: the first hop)."""
        if not self.trusts(peer):
            return peer
        for hop in reversed(hops):
            if not self.trusts(hop):
                try:
                    ipaddress.ip_address(hop)
                except ValueError:
                    return peer  # an unreadable hop: nginx stops there and keeps the address it has
                return hop
        return hops[0] if hops else peer
