"""
Rate limits through twistd with 1 and 2 workers (ingress-nginx annotations.md "Rate Limiting").

Clients send at twice the limit, each request on a new connection (so with 2 workers both serve
them); what passes must be the burst plus the rate over the time taken, within 20%, for one client
and for several at once, each counted apart: nginx's limit_req with burst = rate × limit-burst-multiplier
and nodelay, per client address, per Ingress.  The refusals are 503 (limit-req-status-code's default).
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial

import pytest

from tests.support import EchoBackend, Manifests, Twingress
from tests.waiting import eventually

RATE = 20  # limit-rps
BURST = 20  # × limit-burst-multiplier 1


def _limited(name: str, **extra: str) -> dict:
    return Manifests.nginx_ingress(name, f"{name}.test", "echo", {"limit-rps": str(RATE), "limit-burst-multiplier": "1", **extra})


@pytest.fixture(scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def proxy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    echo = EchoBackend("pod-limits")
    manifests = Manifests(tmp_path_factory.mktemp("rate-limits"))
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        _limited("one"),
        _limited("many"),
        _limited("exempt", **{"limit-allowlist": "127.0.0.0/8"}),
        _limited("counted"),
        Manifests.nginx_ingress("concurrent", "concurrent.test", "echo", {"limit-connections": "2"}),
    )
    twingress = Twingress(manifests.path, "--workers", str(request.param))
    yield twingress
    twingress.stop()
    echo.stop()


def _status(port: int, host: str, source: str = "127.0.0.1") -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    connection.request("GET", "/", headers={"Host": host})
    status = connection.getresponse().status
    connection.close()
    return status


def _at_twice_the_rate(port: int, host: str, seconds: float, source: str = "127.0.0.1") -> tuple[Counter[int], float]:
    """Requests paced at 2 × RATE for C{seconds}: the statuses seen and the time it took."""
    statuses: Counter[int] = Counter()
    started = time.monotonic()
    for n in range(int(2 * RATE * seconds)):
        delay = started + n / (2 * RATE) - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # not a wait: the pacing of requests at twice the rate
        statuses[_status(port, host, source)] += 1
    return statuses, time.monotonic() - started


def _expected(elapsed: float) -> float:
    return BURST + 1 + RATE * elapsed


def test_one_client_at_twice_the_limit(proxy: Twingress) -> None:
    statuses, elapsed = _at_twice_the_rate(proxy.http_port, "one.test", 3.0)
    assert set(statuses) == {200, 503}
    assert abs(statuses[200] - _expected(elapsed)) <= 0.2 * _expected(elapsed), (statuses, elapsed)


def test_several_clients_are_limited_apart(proxy: Twingress) -> None:
    results: dict[str, tuple[Counter[int], float]] = {}

    def client(source: str) -> None:
        results[source] = _at_twice_the_rate(proxy.http_port, "many.test", 3.0, source)

    threads = [threading.Thread(target=client, args=(f"127.0.0.{n}",)) for n in (2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for source, (statuses, elapsed) in results.items():
        assert set(statuses) == {200, 503}, source
        assert abs(statuses[200] - _expected(elapsed)) <= 0.2 * _expected(elapsed), (source, statuses, elapsed)


def test_an_allowlisted_client_is_not_limited(proxy: Twingress) -> None:
    """ "limit-allowlist": client IP source ranges to be excluded from rate-limiting."""
    assert {_status(proxy.http_port, "exempt.test") for _ in range(3 * BURST)} == {200}


def test_refusals_are_counted(proxy: Twingress) -> None:
    def refused() -> float:
        for line in proxy.admin("/metrics")[1].decode().splitlines():
            if line.startswith('twingress_http_denied_total{reason="rate-limit",route="default/counted"}'):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    statuses = Counter(_status(proxy.http_port, "counted.test") for _ in range(BURST + 11))
    assert statuses[503] >= 5
    assert refused() == statuses[503]


def _upstream_uses(proxy: Twingress) -> float:
    """Upstream connections opened, less those parked now: it grows when a request is forwarded (on a new or a pooled connection)."""
    return proxy.metric("twingress_upstream_connections_opened_total", protocol="http/1.1") - proxy.metric("twingress_upstream_idle_connections")


def _forwarded_or_answered(proxy: Twingress, client: socket.socket, before: float) -> str:
    """"answered" once the proxy answered C{client} (refused it), "forwarded" once it sent the request upstream, else ""."""
    if select.select([client], [], [], 0)[0]:
        return "answered"
    return "forwarded" if _upstream_uses(proxy) > before and not select.select([client], [], [], 0)[0] else ""


def _waiting_request(proxy: Twingress) -> socket.socket:
    """
    A request in progress: its head sent, its body not (the proxy has let it through and waits for the body).
    It is in progress once the proxy forwarded its head (it took its place before that), which the test waits
    for before its probes come: a probe in progress at the same moment would hold a place itself and the
    waiting request would be refused (as it should be).
    With worker processes the primary counts, and hears of a probe's place given back from the
    worker that served it: another worker's request may come first and be refused (a CI run under
    load most likely did so: "full again" never came). So a request the proxy has answered is made again.
    """
    for _ in range(20):
        before = _upstream_uses(proxy)
        client = socket.create_connection(("127.0.0.1", proxy.http_port), timeout=10)
        client.sendall(b"POST /?delay=0 HTTP/1.1\r\nHost: concurrent.test\r\nContent-Length: 4\r\n\r\n")
        if eventually(partial(_forwarded_or_answered, proxy, client, before), "the request forwarded, or answered") == "forwarded":
            return client  # forwarded, no answer: in progress
        client.close()
    raise AssertionError("no request stayed in progress")


def test_limit_connections_counts_requests_in_progress(proxy: Twingress) -> None:
    """ "limit-connections": concurrent requests of one address (limit_conn); a finished or dropped one frees its place."""
    first, second = _waiting_request(proxy), _waiting_request(proxy)
    eventually(lambda: _status(proxy.http_port, "concurrent.test") == 503, "a third request refused while two are in progress")
    first.sendall(b"body")
    assert first.recv(65536).startswith(b"HTTP/1.1 200 ")
    first.close()
    eventually(lambda: _status(proxy.http_port, "concurrent.test") == 200, "a place free again once a request finished")
    third = _waiting_request(proxy)
    eventually(lambda: _status(proxy.http_port, "concurrent.test") == 503, "full again")
    second.close()  # the client goes away mid-request
    third.close()
    eventually(lambda: _status(proxy.http_port, "concurrent.test") == 200, "places of dropped requests free again")
    statuses = Counter(_status(proxy.http_port, "concurrent.test") for _ in range(20))
    assert statuses == Counter({200: 20})  # one at a time never reaches the limit
