"""
Gateway API listeners on ports other than twingress's --http and --https, through twistd in
manifests mode, in one process and with worker processes: each HTTP or HTTPS listener on a port
of its own is opened on --gateway-interface when a table asks for it, answers with that port's
routes (and certificates) only, and is closed when a table drops it
(sigs.k8s.io/gateway-api v1.7.0, apis/v1/gateway_types.go: Listener "port").
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.gateway_support import GATEWAY_CLASS, apply, gateway, route
from tests.support import EchoBackend, Manifests, Twingress, free_port, wait_for_port
from tests.waiting import eventually


def _gateway(listeners: list[dict[str, Any]]) -> dict[str, Any]:
    return gateway("gw", listeners)


def _route(name: str, service: str, section: str, hostname: str) -> dict[str, Any]:
    return route(name, [{"name": "gw", "sectionName": section}], [{"backendRefs": [{"name": service, "port": 80}]}], [hostname])


def _pod(port: int, host: str, target: str = "/") -> str:
    """Which echo pod answered on 127.0.0.1:port (or the status, when not 200)."""
    status, location, body = _get(port, host, target)
    return str(json.loads(body)["name"]) if status == 200 else str(status)


def _get(port: int, host: str, target: str = "/") -> tuple[int, str, bytes]:
    """A GET to 127.0.0.1:port: the status, the Location field (or ""), the body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", target, headers={"Host": host})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, response.getheader("Location") or "", body


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def echoes() -> Iterator[dict[str, EchoBackend]]:
    found = {name: EchoBackend(f"pod-{name}") for name in ("v1", "v2", "v3")}
    yield found
    for echo in found.values():
        echo.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_http_and_https_listeners_on_ports_of_their_own(tmp_path: Path, echoes: dict[str, EchoBackend], workers: int) -> None:
    """
    An HTTP listener on one port and an HTTPS one on another serve their own routes there (and not
    on --http); removing a listener closes its port, adding it back opens it, in every worker.
    """
    (tmp_path / "manifests").mkdir()
    manifests = Manifests(tmp_path / "manifests")
    manifests.write("services.yaml", *(obj for name, echo in echoes.items() for obj in manifests.service(name, [echo.address])))
    root = CertificateAuthority("gateway ports root")
    cafile = root.write(tmp_path / "root.pem")
    alt_port, secure_port = free_port(), free_port()
    process = Twingress(manifests.path, "--workers", str(workers), "--gateway-interface", "127.0.0.1")
    try:
        wait_for_port("127.0.0.1", process.http_port, process.process)
        listeners = [
            {"name": "alt", "port": alt_port, "protocol": "HTTP"},
            {"name": "secure", "port": secure_port, "protocol": "HTTPS", "hostname": "secure.ports.test", "tls": {"certificateRefs": [{"name": "secure-tls"}]}},
        ]
        generation = process.generation()
        manifests.write(
            "gateway.yaml", GATEWAY_CLASS, _gateway(listeners), tls_secret("secure-tls", root.issue(["secure.ports.test"], "ec")),
            _route("alt", "v1", "alt", "alt.ports.test"), _route("secure", "v2", "secure", "secure.ports.test"),
        )
        process.wait_generation_above(generation)
        wait_for_port("127.0.0.1", alt_port, process.process)
        wait_for_port("127.0.0.1", secure_port, process.process)
        for _ in range(8):  # new connections: every worker serves the port's routes
            assert _pod(alt_port, "alt.ports.test") == "pod-v1"
        assert _pod(alt_port, "secure.ports.test") == "404"  # another listener's host
        assert _pod(process.http_port, "alt.ports.test") == "404"  # not on --http
        done = subprocess.run(
            ["curl", "-sS", "--max-time", "15", "--resolve", f"secure.ports.test:{secure_port}:127.0.0.1", "--cacert", str(cafile),
             f"https://secure.ports.test:{secure_port}/"],
            capture_output=True, timeout=30,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["name"] == "pod-v2"
        routes = process.routes()
        assert routes["streams"][f"TCP/{alt_port}"]["serves"] == "http"
        assert "alt.ports.test" in routes["gatewayPorts"][str(alt_port)]["hosts"]

        generation = process.generation()
        manifests.write("gateway.yaml", GATEWAY_CLASS, _gateway(listeners[1:]), tls_secret("secure-tls", root.issue(["secure.ports.test"], "ec")))
        process.wait_generation_above(generation)
        eventually(lambda: _refused(alt_port), "the removed listener's port closed (when the worker's table arrives)")
        assert not _refused(secure_port)

        generation = process.generation()
        manifests.write("gateway.yaml", GATEWAY_CLASS, _gateway(listeners[:1]), _route("alt", "v1", "alt", "alt.ports.test"))
        process.wait_generation_above(generation)
        wait_for_port("127.0.0.1", alt_port, process.process)
        eventually(lambda: all(_pod(alt_port, "alt.ports.test") == "pod-v1" for _ in range(8)), "the listener back on its port, serving its route")
        eventually(lambda: _refused(secure_port), "the removed HTTPS listener's port closed")
    finally:
        process.stop()


def test_a_port_that_cannot_be_bound_is_reported(tmp_path: Path) -> None:
    """A port another process holds: the listener is not served, the failure is in /debug/routes, the rest keeps working."""
    (tmp_path / "manifests").mkdir()
    manifests = Manifests(tmp_path / "manifests")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    process = Twingress(manifests.path, "--gateway-interface", "127.0.0.1")
    try:
        wait_for_port("127.0.0.1", process.http_port, process.process)
        generation = process.generation()
        manifests.write("gateway.yaml", GATEWAY_CLASS, _gateway([{"name": "alt", "port": port, "protocol": "HTTP"}]))
        process.wait_generation_above(generation)
        routes = process.routes()
        assert routes["streams"][f"TCP/{port}"]["listening"] is False
        assert any(p["reason"] == "PortUnavailable" and p["object"] == "Gateway/default/gw" for p in routes["problems"])
        assert _pod(process.http_port, "any.example") == "404"  # the --http listener is untouched
    finally:
        process.stop()
        taken.close()


@contextlib.contextmanager
def _twingress(tmp_path: Path, echoes: dict[str, EchoBackend], *args: str) -> Iterator[tuple[Manifests, Twingress]]:
    """twistd serving the echo Services from a manifests directory, Gateway ports on 127.0.0.1."""
    (tmp_path / "manifests").mkdir()
    manifests = Manifests(tmp_path / "manifests")
    manifests.write("services.yaml", *(obj for name, echo in echoes.items() for obj in manifests.service(name, [echo.address])))
    process = Twingress(manifests.path, "--gateway-interface", "127.0.0.1", *args)
    try:
        wait_for_port("127.0.0.1", process.http_port, process.process)
        yield manifests, process
    finally:
        process.stop()


def _to(service: str, path: str = "/") -> dict[str, Any]:
    return {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": [{"name": service, "port": 80}]}


def test_httproute_multiple_gateways(tmp_path: Path, echoes: dict[str, EchoBackend]) -> None:
    """
    HTTPRouteMultipleGateways (httproute-multiple-gateways.go): a route attached to two Gateways is
    served by each (one on --http, one on a port of its own: two Gateways of ours share one
    address), and each Gateway's dedicated route only by its own.
    """
    with _twingress(tmp_path, echoes) as (manifests, process):
        own = free_port()
        apply(
            manifests, process,
            gateway("same-namespace", [{"name": "http", "port": process.http_port, "protocol": "HTTP"}]),
            gateway("all-namespaces", [{"name": "http", "port": own, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]),
            route("multiple-gateways-shared-route", [{"name": "same-namespace"}, {"name": "all-namespaces"}], [_to("v1", "/shared")]),
            route("same-namespace-dedicated-route", [{"name": "same-namespace"}], [_to("v2")]),
            route("all-namespaces-dedicated-route", [{"name": "all-namespaces"}], [_to("v3")]),
        )
        wait_for_port("127.0.0.1", own, process.process)
        assert [_pod(process.http_port, "any.example", "/shared"), _pod(process.http_port, "any.example", "/")] == ["pod-v1", "pod-v2"]
        assert [_pod(own, "any.example", "/shared"), _pod(own, "any.example", "/")] == ["pod-v1", "pod-v3"]
        listeners = process.routes()["gatewayAPI"]["gateways"]
        assert [listeners[f"default/{name}"]["listeners"][0]["attachedRoutes"] for name in ("same-namespace", "all-namespaces")] == [2, 2]


def test_httproute_listener_port_matching(tmp_path: Path, echoes: dict[str, EchoBackend]) -> None:
    """
    HTTPRouteListenerPortMatching (httproute-listener-port-matching.go), on the wire: parentRef
    ports pick the listeners, each port answers its own listeners' hosts (the Host's port is not
    part of the host).
    """
    with _twingress(tmp_path, echoes) as (manifests, process):
        second, third = free_port(), free_port()
        listeners = [
            {"name": name, "port": port, "protocol": "HTTP", "hostname": host}
            for name, port, host in (
                ("listener-1", process.http_port, "foo.com"), ("listener-2", second, "foo.com"), ("listener-3", second, "bar.com"),
                ("listener-4", third, "foo.com"), ("listener-5", third, "bar.com"),
            )
        ]
        apply(
            manifests, process, gateway("gw", listeners),
            route("backend-v1", [{"name": "gw", "port": process.http_port}], [_to("v1")]),
            route("backend-v2", [{"name": "gw", "port": second}], [_to("v2")]),
            route("backend-v3", [{"name": "gw", "port": third, "sectionName": "listener-4"}], [_to("v3")]),
        )
        wait_for_port("127.0.0.1", second, process.process)
        wait_for_port("127.0.0.1", third, process.process)
        assert _pod(process.http_port, "foo.com") == "pod-v1"
        assert _pod(second, f"foo.com:{second}") == "pod-v2"
        assert _pod(second, f"bar.com:{second}") == "pod-v2"
        assert _pod(third, f"foo.com:{third}") == "pod-v3"
        assert _pod(third, f"bar.com:{third}") == "404"


def _redirects(*cases: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rules: each path prefix answers a RequestRedirect to example.org with the given scheme and port."""
    return [
        {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org", **given}}]}
        for path, given in cases
    ]


def _https_redirect(port: int, cafile: Path, target: str) -> tuple[int, str]:
    """A GET over TLS (SNI and Host example.org) to 127.0.0.1:port: the status and the Location field."""
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "15", "-o", "/dev/null", "-D", "-", "--resolve", f"example.org:{port}:127.0.0.1", "--cacert", str(cafile),
         f"https://example.org:{port}{target}"],
        capture_output=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    head = done.stdout.decode("latin-1").split("\r\n")
    fields = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in head[1:] if line)}
    return int(head[0].split()[1]), fields.get("location", "")


def test_httproute_redirect_port_and_scheme(tmp_path: Path, echoes: dict[str, EchoBackend]) -> None:
    """
    HTTPRouteRedirectPortAndScheme (httproute-redirect-port-and-scheme.go), with free ports for 80,
    8080 and 443: without a port the Location has the scheme's well-known port when a scheme is
    given, else the port of the listener the request came to (--http, a port of its own, --https);
    a well-known port is left out, any other kept.
    """
    root = CertificateAuthority("redirect root")
    cafile = root.write(tmp_path / "root.pem")
    https_port = free_port()
    with _twingress(tmp_path, echoes, "--https", f"tcp:{https_port}:interface=127.0.0.1") as (manifests, process):
        own = free_port()
        wait_for_port("127.0.0.1", https_port, process.process)
        apply(
            manifests, process,
            gateway("same-namespace", [{"name": "http", "port": process.http_port, "protocol": "HTTP"}]),
            gateway("same-namespace-with-http-listener-on-8080", [{"name": "http", "port": own, "protocol": "HTTP"}]),
            gateway("same-namespace-with-https-listener", [
                {"name": "https", "port": https_port, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "tls-validity-checks-certificate"}]}},
            ]),
            tls_secret("tls-validity-checks-certificate", root.issue(["example.org"], "ec")),
            route("http-route-for-listener-on-port-80", [{"name": "same-namespace"}], _redirects(
                ("/scheme-nil-and-port-nil", {}), ("/scheme-nil-and-port-80", {"port": 80}), ("/scheme-nil-and-port-8080", {"port": 8080}),
                ("/scheme-https-and-port-nil", {"scheme": "https"}), ("/scheme-https-and-port-443", {"scheme": "https", "port": 443}),
                ("/scheme-https-and-port-8443", {"scheme": "https", "port": 8443}),
            )),
            route("http-route-for-listener-on-port-8080", [{"name": "same-namespace-with-http-listener-on-8080"}], _redirects(
                ("/scheme-nil-and-port-nil", {}), ("/scheme-nil-and-port-80", {"port": 80}), ("/scheme-https-and-port-nil", {"scheme": "https"}),
            )),
            route("http-route-for-listener-on-port-443", [{"name": "same-namespace-with-https-listener"}], _redirects(
                ("/scheme-nil-and-port-nil", {}), ("/scheme-nil-and-port-443", {"port": 443}), ("/scheme-nil-and-port-8443", {"port": 8443}),
                ("/scheme-http-and-port-nil", {"scheme": "http"}), ("/scheme-http-and-port-80", {"scheme": "http", "port": 80}),
                ("/scheme-http-and-port-8080", {"scheme": "http", "port": 8080}),
            )),
        )
        wait_for_port("127.0.0.1", own, process.process)
        on_http = {
            "/scheme-nil-and-port-nil": f"http://example.org:{process.http_port}/scheme-nil-and-port-nil",
            "/scheme-nil-and-port-80": "http://example.org/scheme-nil-and-port-80",
            "/scheme-nil-and-port-8080": "http://example.org:8080/scheme-nil-and-port-8080",
            "/scheme-https-and-port-nil": "https://example.org/scheme-https-and-port-nil",
            "/scheme-https-and-port-443": "https://example.org/scheme-https-and-port-443",
            "/scheme-https-and-port-8443": "https://example.org:8443/scheme-https-and-port-8443",
        }
        assert {target: _get(process.http_port, "any.example", target)[:2] for target in on_http} == {t: (302, location) for t, location in on_http.items()}
        on_own = {
            "/scheme-nil-and-port-nil": f"http://example.org:{own}/scheme-nil-and-port-nil",
            "/scheme-nil-and-port-80": "http://example.org/scheme-nil-and-port-80",
            "/scheme-https-and-port-nil": "https://example.org/scheme-https-and-port-nil",
        }
        assert {target: _get(own, "any.example", target)[:2] for target in on_own} == {t: (302, location) for t, location in on_own.items()}
        on_https = {
            "/scheme-nil-and-port-nil": f"https://example.org:{https_port}/scheme-nil-and-port-nil",
            "/scheme-nil-and-port-443": "https://example.org/scheme-nil-and-port-443",
            "/scheme-nil-and-port-8443": "https://example.org:8443/scheme-nil-and-port-8443",
            "/scheme-http-and-port-nil": "http://example.org/scheme-http-and-port-nil",
            "/scheme-http-and-port-80": "http://example.org/scheme-http-and-port-80",
            "/scheme-http-and-port-8080": "http://example.org:8080/scheme-http-and-port-8080",
        }
        assert {target: _https_redirect(https_port, cafile, target) for target in on_https} == {t: (302, location) for t, location in on_https.items()}
