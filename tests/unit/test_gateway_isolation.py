"""
Tests for L{ingress.routing.listener_names} and L{ingress.routing.gateway.isolation}: which listener a
host belongs to, listener isolation in the table (Gateway API GatewayHTTPListenerIsolation, conformance
tests/gateway-http-listener-isolation.go and its hostname-intersection manifest), and the HTTPS
listeners' names a misdirected request is told by (tests/httproute-https-listener-detect-misdirected-requests.go).
"""

from __future__ import annotations

from typing import Optional

import pytest

from ingress.routing.listener_names import ListenerNames
from ingress.routing.report import Built
from tests.unit.objects import PEM_SHAPED
from tests.unit.test_gateway_routing import backend, gateway, gateway_table, http_route, listener, prefix, serve, services, to

NAMES = ListenerNames.of(["", "*.example.com", "*.foo.example.com", "abc.foo.example.com"])


@pytest.mark.parametrize(
    ("host", "owner"),
    [
        ("bar.com", ""),
        ("bar.example.com", "*.example.com"),
        ("a.b.example.com", "*.example.com"),
        ("bar.foo.example.com", "*.foo.example.com"),
        ("abc.foo.example.com", "abc.foo.example.com"),
        ("example.com", ""),  # a wildcard does not cover its own suffix
        ("*.example.com", "*.example.com"),  # a wildcard host belongs to the listener covering all it stands for
        ("*.foo.example.com", "*.foo.example.com"),
        ("*.x.foo.example.com", "*.foo.example.com"),
    ],
)
def test_a_host_belongs_to_the_most_specific_listener(host: str, owner: Optional[str]) -> None:
    assert NAMES.listener_for(host) == owner


def test_without_a_hostless_listener_some_hosts_belong_to_none() -> None:
    names = ListenerNames.of(["second-example.org", "*.wildcard.org"])
    assert names.listener_for("example.org") is None
    assert not names.misdirected("example.org", "unknown.org")  # neither chose a listener
    assert names.misdirected("second-example.org", "example.org")
    assert not names.misdirected("third.wildcard.org", "fifth.wildcard.org")


LISTENERS = ("empty-hostname", "wildcard-example-com", "wildcard-foo-example-com", "abc-foo-example-com")
HOSTNAMES = {"empty-hostname": None, "wildcard-example-com": "*.example.com", "wildcard-foo-example-com": "*.foo.example.com", "abc-foo-example-com": "abc.foo.example.com"}


def _isolation_table(route_hostnames: tuple[str, ...]) -> Built:
    return gateway_table(
        gateway("gw", *(listener(name, hostname=hostname) for name, hostname in HOSTNAMES.items()), listener("quiet", hostname="*.quiet.example.com")),
        *services("v1"),
        *(http_route(f"attaches-to-{name}", to(backend("v1"), matches=[prefix(f"/{name}")]), hostnames=route_hostnames, parents=({"name": "gw", "sectionName": name},))
          for name in LISTENERS),
    )


@pytest.mark.parametrize("route_hostnames", [(), ("bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com")])
@pytest.mark.parametrize(("host", "owner"), [("bar.com", "empty-hostname"), ("bar.example.com", "wildcard-example-com"),
                                             ("bar.foo.example.com", "wildcard-foo-example-com"), ("abc.foo.example.com", "abc-foo-example-com")])
def test_listener_isolation(route_hostnames: tuple[str, ...], host: str, owner: str) -> None:
    """Each host is served by its own listener's route alone, with or without hostnames on the routes."""
    table = _isolation_table(route_hostnames)
    for name in LISTENERS:
        expected = "default/v1:80" if name == owner else "404"
        assert serve(table.table, host, f"/{name}") == expected, name


def test_a_listener_without_routes_keeps_its_hosts_from_a_less_specific_one() -> None:
    table = _isolation_table(())
    assert serve(table.table, "a.quiet.example.com", "/wildcard-example-com") == "404"
    assert serve(table.table, "a.other.example.com", "/wildcard-example-com") == "default/v1:80"


def test_an_http_listeners_routes_stay_reachable_under_an_https_listeners_hostname() -> None:
    """--http and --https share a table: a routeless HTTPS hostname hides nothing the HTTP listeners serve over http."""
    table = gateway_table(
        gateway("gw", listener("http"), listener("https", 443, "HTTPS", tls={"certificateRefs": [{"name": "cert"}]}),
                listener("https-named", 443, "HTTPS", hostname="named.test", tls={"certificateRefs": [{"name": "cert"}]})),
        *services("v1", "v2"),
        http_route("plain", to(backend("v1")), parents=({"name": "gw", "sectionName": "http"},)),
        http_route("secure", to(backend("v2")), parents=({"name": "gw", "sectionName": "https"},)),
        *_certificate("cert"),
    )
    assert serve(table.table, "named.test", "/", scheme=b"http") == "default/v1:80"
    assert serve(table.table, "named.test", "/", scheme=b"https") == "404"
    assert serve(table.table, "other.test", "/", scheme=b"https") == "default/v2:80"
    assert table.table.https_listeners is not None and table.table.https_listeners.to_json() == ["named.test", ""]


def _certificate(name: str) -> list[dict[str, object]]:
    return [{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": name, "namespace": "default"}, "stringData": PEM_SHAPED}]
