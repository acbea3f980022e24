"""
Gateway listeners told apart through twistd in manifests mode, real sockets: listener isolation
(GatewayHTTPListenerIsolation) on HTTP listeners of one port, and 421 for a request whose Host
belongs to another HTTPS listener than the one its connection's SNI name chose
(GatewayHTTPSListenerDetectMisdirectedRequests), over HTTP/1.1 and a coalesced HTTP/2 connection.

The cases restate the upstream conformance tests (sigs.k8s.io/gateway-api/conformance v1.6.3):
tests/gateway-http-listener-isolation.go (with its hostname-intersection manifest) and
tests/httproute-https-listener-detect-misdirected-requests.go.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.gateway_support import apply, gateway, route
from tests.proxy.h2client import H2Client
from tests.support import EchoBackend, Manifests, Twingress, free_port, wait_for_port


@dataclass
class ListenerProxy:
    process: Twingress
    https_port: int


def _to(service: str, path: str) -> dict[str, Any]:
    return {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": [{"name": service, "port": 80}]}


def _parent(section: str) -> list[dict[str, Any]]:
    return [{"name": "gw", "sectionName": section}]


@pytest.fixture(scope="module")
def listener_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenerProxy]:
    echoes = {name: EchoBackend(f"pod-{name}") for name in ("v1", "v2", "v3")}
    manifests = Manifests(tmp_path_factory.mktemp("gateway-listeners"))
    manifests.write("services.yaml", *(obj for name, echo in echoes.items() for obj in manifests.service(name, [echo.address])))
    root = CertificateAuthority("listener test root")
    https_port = free_port()
    process = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    wait_for_port("127.0.0.1", https_port, process.process)
    http, tls = process.http_port, {"certificateRefs": [{"name": "every-name"}]}
    apply(
        manifests, process,
        tls_secret("every-name", root.issue(["example.org", "second-example.org", "*.wildcard.org"], "ec")),
        gateway("gw", [
            {"name": "empty-hostname", "port": http, "protocol": "HTTP"},
            {"name": "wildcard-example-com", "port": http, "protocol": "HTTP", "hostname": "*.example.com"},
            {"name": "wildcard-foo-example-com", "port": http, "protocol": "HTTP", "hostname": "*.foo.example.com"},
            {"name": "abc-foo-example-com", "port": http, "protocol": "HTTP", "hostname": "abc.foo.example.com"},
            {"name": "no-routes", "port": http, "protocol": "HTTP", "hostname": "*.quiet.example.com"},
            {"name": "https", "port": https_port, "protocol": "HTTPS", "tls": tls},
            {"name": "https-with-hostname", "port": https_port, "protocol": "HTTPS", "hostname": "second-example.org", "tls": tls},
            {"name": "https-with-wildcard-hostname", "port": https_port, "protocol": "HTTPS", "hostname": "*.wildcard.org", "tls": tls},
            {"name": "https-with-hostname-matching-wildcard", "port": https_port, "protocol": "HTTPS", "hostname": "fourth-example.wildcard.org", "tls": tls},
        ]),
        # every route names every hostname: each listener keeps those that are its own (the intersection manifest)
        *(route(f"attaches-to-{section}", _parent(section), [_to("v1", f"/{section}")], hostnames=["bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com"])
          for section in ("empty-hostname", "wildcard-example-com", "wildcard-foo-example-com", "abc-foo-example-com")),
        route("misdirect-1", _parent("https"), [_to("v1", "/detect")], hostnames=["example.org"]),
        route("misdirect-2", _parent("https-with-hostname"), [_to("v2", "/detect")]),
        route("misdirect-3", _parent("https-with-wildcard-hostname"), [_to("v3", "/detect")]),
        route("misdirect-4", _parent("https-with-hostname-matching-wildcard"), [_to("v1", "/detect")]),
    )
    yield ListenerProxy(process, https_port)
    process.stop()
    for echo in echoes.values():
        echo.stop()


def _answer(status: int, body: bytes) -> str:
    return str(json.loads(body)["name"]) if status == 200 else str(status)


def _http(proxy: ListenerProxy, host: str, path: str) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.process.http_port, timeout=10)
    connection.request("GET", path, headers={"Host": host})
    response = connection.getresponse()
    return _answer(response.status, response.read())


LISTENERS = ("empty-hostname", "wildcard-example-com", "wildcard-foo-example-com", "abc-foo-example-com")
ISOLATION = [  # host → the one listener whose route answers it
    ("bar.com", "empty-hostname"),
    ("bar.example.com", "wildcard-example-com"),
    ("bar.foo.example.com", "wildcard-foo-example-com"),
    ("abc.foo.example.com", "abc-foo-example-com"),
]


@pytest.mark.parametrize(("host", "owner"), ISOLATION)
def test_a_host_is_served_by_its_most_specific_listeners_routes_only(listener_proxy: ListenerProxy, host: str, owner: str) -> None:
    """GatewayHTTPListenerIsolation: the owner's route answers; every other listener's route is 404 for that host, whatever its hostnames say."""
    for section in LISTENERS:
        assert _http(listener_proxy, host, f"/{section}") == ("pod-v1" if section == owner else "404"), section


def test_a_listener_without_routes_still_owns_its_hosts(listener_proxy: ListenerProxy) -> None:
    """*.quiet.example.com has a listener and no route: its hosts are 404, not served by the *.example.com listener's route."""
    assert _http(listener_proxy, "a.quiet.example.com", "/wildcard-example-com") == "404"
    assert _http(listener_proxy, "a.other.example.com", "/wildcard-example-com") == "pod-v1"


def _https(proxy: ListenerProxy, server_name: str, host: str) -> str:
    """One HTTP/1.1 request over TLS with SNI C{server_name} and Host C{host}."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", proxy.https_port), timeout=10) as raw, context.wrap_socket(raw, server_hostname=server_name) as sock:
        sock.sendall(f"GET /detect HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
        response.begin()
        return _answer(response.status, response.read())


MISDIRECTED = [  # (SNI, Host, answer): the conformance test's cases
    ("example.org", "example.org", "pod-v1"),
    ("example.org", "second-example.org", "421"),
    ("example.org", "unknown-example.org", "404"),
    ("second-example.org", "second-example.org", "pod-v2"),
    ("second-example.org", "example.org", "421"),
    ("second-example.org", "unknown-example.org", "421"),
    ("third-example.wildcard.org", "third-example.wildcard.org", "pod-v3"),
    ("third-example.wildcard.org", "fith-example.wildcard.org", "pod-v3"),
    ("third-example.wildcard.org", "fourth-example.wildcard.org", "421"),
    ("third-example.wildcard.org", "second-example.org", "421"),
    ("fourth-example.wildcard.org", "fourth-example.wildcard.org", "pod-v1"),
    ("fourth-example.wildcard.org", "fith-example.wildcard.org", "421"),
    ("unknown-example.org", "example.org", "pod-v1"),
    ("unknown-example.org", "unknown-example.org", "404"),
]


@pytest.mark.parametrize(("server_name", "host", "answer"), MISDIRECTED)
def test_https_listener_detects_misdirected_requests_over_http1(listener_proxy: ListenerProxy, server_name: str, host: str, answer: str) -> None:
    assert _https(listener_proxy, server_name, host) == answer


def test_a_coalesced_http2_connection_gets_421_for_another_listeners_host(listener_proxy: ListenerProxy) -> None:
    """RFC 9110 15.5.20: on one HTTP/2 connection (SNI second-example.org), its own host is served and another listener's is 421."""
    client = H2Client(listener_proxy.https_port, server_name="second-example.org")
    try:
        assert client.get("/detect", authority="example.org").status == 421
        own = client.get("/detect", authority="second-example.org")
        assert own.status == 200 and json.loads(bytes(own.body))["name"] == "pod-v2"
    finally:
        client.close()


def test_without_sni_nothing_is_misdirected(listener_proxy: ListenerProxy) -> None:
    """A client that sends no server name chose no listener: routing alone answers."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", listener_proxy.https_port), timeout=10) as raw, context.wrap_socket(raw) as sock:
        sock.sendall(b"GET /detect HTTP/1.1\r\nHost: second-example.org\r\nConnection: close\r\n\r\n")
        response = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
        response.begin()
        assert _answer(response.status, response.read()) == "pod-v2"
