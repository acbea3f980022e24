"""
The upstream keep-alive pools as an operator sees them on /metrics: connections opened, parked, and
turned away because an endpoint's idle pool was full (ingress-nginx's
C{upstream-keepalive-connections}: "the maximum number of idle keepalive connections to an upstream
server that are preserved in the cache of each worker process. When this number is exceeded, the
least recently used connections are closed", docs/user-guide/nginx-configuration/configmap.md).
twingress closes the connection that just finished rather than the least recently used one: the
count kept is the same.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support import EchoBackend, Manifests, Twingress, http_status
from tests.waiting import eventually

OPENED = "twingress_upstream_connections_opened_total"
IDLE = "twingress_upstream_idle_connections"
POOL_FULL = "twingress_upstream_idle_pool_full_total"


def _settles_at(proxy: Twingress, name: str, expected: float, **labels: str) -> None:
    """Until C{name} reads C{expected} (a connection is parked just after its response); fails after 5 s with what it reads."""
    eventually(lambda: proxy.metric(name, **labels) == expected, f"{name} to read {expected}", timeout=5, interval=0.02, context=lambda: f"it reads {proxy.metric(name, **labels)}")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sequential_requests_reuse_one_connection_per_process(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend], workers: str) -> None:
    """Each request on a client connection of its own: every process opens one upstream connection at most, and parks it."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("web", "web.test", "web"))
    proxy = twingress("--workers", workers)
    assert proxy.metric(OPENED, protocol="http/1.1") == 0
    assert [http_status(proxy.http_port, "web.test") for _ in range(20)] == [200] * 20
    opened = proxy.metric(OPENED, protocol="http/1.1")
    assert 1 <= opened <= int(workers)
    _settles_at(proxy, IDLE, opened)  # summed over the workers
    assert proxy.metric(POOL_FULL) == 0
    assert proxy.metric(OPENED, protocol="h2") == 0


def test_concurrent_requests_past_the_idle_pool_are_counted_as_turned_away(manifests: Manifests, twingress, echo_pair: tuple[EchoBackend, EchoBackend]) -> None:
    """upstream-keepalive-connections 2 and five requests at once: five opened, two parked, three closed; then the two are reused."""
    manifests.write("all.yaml", *manifests.service("web", [echo_pair[0].address]), Manifests.ingress("web", "web.test", "web"))
    manifests.write("config.yaml", Manifests.controller_config_map({"upstream-keepalive-connections": "2"}))
    proxy = twingress("--nginx-configmap", Manifests.NGINX_CONFIGMAP)
    with ThreadPoolExecutor(5) as pool:  # answered after 0.5 s each, so that all five overlap upstream
        assert list(pool.map(lambda _: http_status(proxy.http_port, "web.test", "/?delay=0.5"), range(5))) == [200] * 5
    assert proxy.metric(OPENED, protocol="http/1.1") == 5
    _settles_at(proxy, POOL_FULL, 3)
    assert proxy.metric(IDLE) == 2
    assert [http_status(proxy.http_port, "web.test") for _ in range(4)] == [200] * 4
    assert proxy.metric(OPENED, protocol="http/1.1") == 5
    _settles_at(proxy, IDLE, 2)  # one request at a time takes the warmest and gives it back
