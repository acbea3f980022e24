# -*- test-case-name: tests.unit.test_rate_limits -*-
"""
Request rate and concurrency limits per client address (ingress-nginx's "Rate Limiting": limit-rps,
limit-rpm, limit-connections).

ingress-nginx gives each Ingress its own zones (every path of the Ingress shares them) and
configures nginx's C{limit_req} with C{burst} = rate × C{limit-burst-multiplier} (default 5)
and C{nodelay}: a client may go C{burst} requests over the rate at once, the excess drains
at the rate, and a request beyond it is refused with C{limit-req-status-code} (503 unless
the ConfigMap says otherwise).  Addresses in C{limit-allowlist} (C{limit-whitelist}) are
not limited.  C{limit-connections} is nginx's C{limit_conn}: at most that many requests of one
address in progress at once in the Ingress's zone (a keep-alive connection between requests holds
nothing), the next refused with C{limit-conn-status-code}.  Both are counted per twingress instance,
over all its workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ingress.routing.policies.access import SourceRanges

DEFAULT_BURST_MULTIPLIER = 5


@dataclass(frozen=True, slots=True)
class Zone:
    """One nginx limit_req zone: its name, its rate (requests per second) and burst (requests)."""

    name: str
    rate: float
    burst: int


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A route's limits: the zones a request must pass (rps, then rpm), the exempt addresses, the refusal's status."""

    zones: tuple[Zone, ...]
    allowlist: Optional[SourceRanges] = None
    status: int = 503  # the ConfigMap's limit-req-status-code
    connections: int = 0  # limit-connections: requests in progress per address (0: no limit)
    connection_zone: str = ""
    connection_status: int = 503  # the ConfigMap's limit-conn-status-code

    def exempts(self, client_ip: str) -> bool:
        return self.allowlist is not None and self.allowlist.permits(client_ip)

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"zones": [{"name": zone.name, "rate": zone.rate, "burst": zone.burst} for zone in self.zones], "status": self.status}
        if self.connections:
            shown["connections"] = {"zone": self.connection_zone, "limit": self.connections, "status": self.connection_status}
        if self.allowlist is not None:
            shown["allowlist"] = self.allowlist.to_json()
        return shown


def rate_limit(
    ingress: str, rps: int, rpm: int, multiplier: int, allowlist: Optional[SourceRanges], status: int, connections: int = 0, connection_status: int = 503
) -> Optional[RateLimit]:
    """The limits of an Ingress (C{namespace/name}) with these annotation values; None when none is set."""
    zones = []
    if rps:
        zones.append(Zone(f"{ingress}/rps", float(rps), rps * multiplier))
    if rpm:
        zones.append(Zone(f"{ingress}/rpm", rpm / 60.0, rpm * multiplier))
    if not zones and not connections:
        return None
    return RateLimit(tuple(zones), allowlist, status, connections, f"{ingress}/connections" if connections else "", connection_status)
