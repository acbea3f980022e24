"""
Rate limits, directly with a fake clock: nginx's limit_req (ngx_http_limit_req_module: "excess" grows by one
per request, drains at the rate, burst with nodelay) as ingress-nginx configures it (annotations.md "Rate
Limiting": limit-rps, limit-rpm, limit-burst-multiplier default 5, limit-allowlist; ConfigMap limit-req-status-code).
"""

from __future__ import annotations

import ipaddress
from typing import Optional

from ingress.proxy.request.ratelimit import RequestRates
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.annotations.policies import route_rate_limit
from ingress.routing.nginx_config import NginxConfig
from ingress.routing.policies.ratelimit import RateLimit, Zone, rate_limit
from tests.unit.objects import ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _passed(rates: RequestRates, zones: tuple[Zone, ...], count: int, address: str = "10.0.0.1") -> int:
    return sum(rates.take(zones, address) for _ in range(count))


def test_a_burst_passes_at_once_then_the_rate() -> None:
    """burst=N with nodelay: N + 1 requests at once (the first sets no excess), then one per 1/rate seconds."""
    clock = Clock()
    rates = RequestRates(clock)
    zone = (Zone("z", 10.0, 50),)
    assert _passed(rates, zone, 100) == 51
    clock.now += 1.0
    assert _passed(rates, zone, 100) == 10
    clock.now += 0.1
    assert _passed(rates, zone, 5) == 1


def test_a_refused_request_is_not_counted() -> None:
    clock = Clock()
    rates = RequestRates(clock)
    zone = (Zone("z", 2.0, 0),)
    assert rates.take(zone, "a") and not rates.take(zone, "a")
    for _ in range(100):
        assert not rates.take(zone, "a")  # refusals do not push the next pass further out
    clock.now += 0.5
    assert rates.take(zone, "a")


def test_every_zone_must_pass_and_only_then_counts() -> None:
    """ingress-nginx sets limit_req for rps and rpm: a request refused by one is counted in neither."""
    clock = Clock()
    rates = RequestRates(clock)
    rps, rpm = Zone("rps", 100.0, 100), Zone("rpm", 1 / 60, 2)
    assert _passed(rates, (rps, rpm), 10) == 3
    assert _passed(rates, (rps,), 200) == 101 - 3  # rps counted the 3 that passed both, no more


def test_addresses_are_counted_apart_and_memory_is_bounded() -> None:
    """A flood from a million source addresses keeps at most the zone's bound of addresses."""
    rates = RequestRates(Clock(), addresses=1000)
    zone = (Zone("z", 1.0, 0),)
    for n in range(1_000_000):
        rates.take(zone, str(ipaddress.IPv4Address(0x0A000000 + n)))
    assert rates.size() == 1000
    assert rates.take(zone, "192.0.2.1") and not rates.take(zone, "192.0.2.1")


def _limit(annotations: dict[str, str]) -> Optional[RateLimit]:
    route = table(ingress("shop", rule("a.test", path("/")), annotations={NGINX + k: v for k, v in annotations.items()})).table.match("a.test", "/")
    assert route is not None
    return route.policies.rate_limit if route.policies is not None else None


def test_annotations_make_the_zones_of_the_ingress() -> None:
    """limit-rps=5 → burst 25 (multiplier 5); limit-rpm=120 → 2 per second, burst 600; zones are per Ingress."""
    limit = _limit({"limit-rps": "5", "limit-rpm": "120", "limit-allowlist": "10.0.0.0/8"})
    assert limit is not None and limit.status == 503
    assert limit.zones == (Zone("default/shop/rps", 5.0, 25), Zone("default/shop/rpm", 2.0, 600))
    assert limit.exempts("10.1.2.3") and not limit.exempts("192.0.2.1")
    assert _limit({"limit-rps": "5", "limit-burst-multiplier": "2"}) == rate_limit("default/shop", 5, 0, 2, None, 503)
    assert _limit({"limit-whitelist": "10.0.0.0/8"}) is None  # an allow list alone limits nothing


def test_the_configmap_sets_the_refusals_status() -> None:
    """ConfigMap "limit-req-status-code" (default 503)."""
    limit = route_rate_limit(IngressAnnotations({"limit-rps": 1}), "default/shop", NginxConfig(limit_req_status=429))
    assert limit is not None and limit.status == 429


def test_limit_connections_counts_what_is_in_progress() -> None:
    """limit_conn: at most N in progress per address; the table keeps only addresses with requests in progress."""
    rates = RequestRates(Clock())
    assert rates.enter("c", 2, "a") and rates.enter("c", 2, "a") and not rates.enter("c", 2, "a")
    assert rates.enter("c", 2, "b") and rates.enter("other", 2, "a")
    rates.leave("c", "a")
    assert rates.enter("c", 2, "a") and not rates.enter("c", 2, "a")
    for zone, address in (("c", "a"), ("c", "a"), ("c", "b"), ("other", "a")):
        rates.leave(zone, address)
    assert rates._busy == {}
