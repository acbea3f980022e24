"""
Cookie session affinity through twistd in manifests mode, real sockets, three real backends.

ingress-nginx's annotations page, sections "Session Affinity" and "Cookie affinity"
(docs/user-guide/nginx-configuration/annotations.md), and its affinity example
(docs/examples/affinity/cookie/README.md): the first answer sets the cookie, later
requests with it go to the same endpoint.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any, Optional

import pytest

from tests.support import EchoBackend, Manifests, Twingress


def _ingress(name: str, host: str, service: str, annotations: dict[str, str]) -> dict[str, Any]:
    return Manifests.nginx_ingress(name, host, service, annotations)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Twingress, Manifests]]:
    pods = [EchoBackend(f"pod-{n}") for n in range(3)]
    canary = EchoBackend("canary-pod")
    manifests = Manifests(tmp_path_factory.mktemp("affinity"))
    manifests.write(
        "all.yaml",
        *manifests.service("web", [pod.address for pod in pods]),
        *manifests.service("web-canary", [canary.address]),
        _ingress("balanced", "balanced.test", "web", {"affinity": "cookie"}),
        _ingress("persistent", "persistent.test", "web", {"affinity": "cookie", "affinity-mode": "persistent", "session-cookie-name": "route"}),
        _ingress("sticky", "sticky.test", "web", {"affinity": "cookie"}),
        _ingress("sticky-canary", "sticky.test", "web-canary", {"canary": "true", "canary-weight": "50", "affinity": "cookie", "session-cookie-name": "CANARY"}),
        Manifests.ingress("plain", "plain.test", "web"),
        _ingress("samesite", "samesite.test", "web", {"affinity": "cookie", "session-cookie-samesite": "None", "session-cookie-conditional-samesite-none": "true"}),
    )
    twingress = Twingress(manifests.path)
    yield twingress, manifests
    twingress.stop()
    for pod in [*pods, canary]:
        pod.stop()


def _get(proxy: Twingress, host: str, cookie: Optional[str] = None, agent: str = "") -> tuple[str, Optional[str]]:
    """The backend that answered, and the Set-Cookie field if any."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    headers = {"Host": host, **({"Cookie": cookie} if cookie else {}), **({"User-Agent": agent} if agent else {})}
    connection.request("GET", "/", headers=headers)
    response = connection.getresponse()
    body = response.read()
    assert response.status == 200, body
    return json.loads(body)["name"], response.getheader("Set-Cookie")


def _cookie(set_cookie: Optional[str]) -> str:
    assert set_cookie is not None
    return set_cookie.split(";", 1)[0]


@pytest.mark.parametrize(("host", "name"), [("balanced.test", "INGRESSCOOKIE"), ("persistent.test", "route")])
def test_the_first_answer_sets_the_cookie_and_the_client_stays(setup: tuple[Twingress, Manifests], host: str, name: str) -> None:
    proxy, _ = setup
    first, set_cookie = _get(proxy, host)
    assert set_cookie is not None and set_cookie.startswith(f"{name}=") and "; Path=/; HttpOnly" in set_cookie
    cookie = _cookie(set_cookie)
    for _ in range(15):
        backend, again = _get(proxy, host, cookie="other=1; " + cookie)
        assert (backend, again) == (first, None)  # same endpoint, and the cookie is not set again


def test_without_affinity_requests_are_spread(setup: tuple[Twingress, Manifests]) -> None:
    proxy, _ = setup
    assert len({_get(proxy, "plain.test")[0] for _ in range(6)}) == 3
    assert _get(proxy, "plain.test")[1] is None


def test_clients_are_spread_over_the_endpoints(setup: tuple[Twingress, Manifests]) -> None:
    proxy, _ = setup
    assert len({_get(proxy, "balanced.test")[0] for _ in range(40)}) == 3  # new clients: random keys


def test_the_client_keeps_its_endpoint_across_a_table_swap(setup: tuple[Twingress, Manifests]) -> None:
    """Issue 13: the cookie keeps a client on its endpoint across table swaps while the endpoint is ready."""
    proxy, manifests = setup
    clients = [_get(proxy, "persistent.test") for _ in range(6)] + [_get(proxy, "balanced.test") for _ in range(6)]
    generation = proxy.generation()
    manifests.write("unrelated.yaml", Manifests.ingress("unrelated", "unrelated.test", "web"))
    proxy.wait_generation_above(generation)
    for (backend, set_cookie), host in zip(clients, ["persistent.test"] * 6 + ["balanced.test"] * 6, strict=True):
        assert _get(proxy, host, cookie=_cookie(set_cookie))[0] == backend


def test_a_client_served_by_the_canary_stays_with_the_canary(setup: tuple[Twingress, Manifests]) -> None:
    """
    affinity-canary-behavior "sticky" (the default): users served by canaries continue to be served by
    canaries. The canary's affinity annotations are its own ("except ... annotations related to session
    affinity"): its cookie is CANARY, the main's INGRESSCOOKIE.
    """
    proxy, _ = setup
    sides: dict[str, str] = {}
    for _ in range(40):
        backend, set_cookie = _get(proxy, "sticky.test")
        side = "canary" if backend == "canary-pod" else "main"
        assert set_cookie is not None and set_cookie.startswith("CANARY=" if side == "canary" else "INGRESSCOOKIE=")
        sides.setdefault(side, _cookie(set_cookie))
    assert set(sides) == {"canary", "main"}  # weight 50: both sides served new clients
    assert {_get(proxy, "sticky.test", cookie=sides["canary"])[0] for _ in range(15)} == {"canary-pod"}
    assert "canary-pod" not in {_get(proxy, "sticky.test", cookie=sides["main"])[0] for _ in range(15)}


def test_samesite_none_only_for_clients_that_understand_it(setup: tuple[Twingress, Manifests]) -> None:
    """session-cookie-conditional-samesite-none: an old Chrome gets the cookie without SameSite=None."""
    proxy, _ = setup
    modern = _get(proxy, "samesite.test", agent="Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36")[1]
    old = _get(proxy, "samesite.test", agent="Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/66.0 Safari/537.36")[1]
    assert modern is not None and modern.endswith("SameSite=None")
    assert old is not None and "SameSite" not in old
