"""
Gateway API listeners on ports other than twingress's --http and --https, through twistd in
manifests mode, in one process and with worker processes: each HTTP or HTTPS listener on a port
of its own is opened on --gateway-interface when a table asks for it, answers with that port's
routes (and certificates) only, and is closed when a table drops it
(sigs.k8s.io/gateway-api v1.7.0, apis/v1/gateway_types.go: Listener "port").
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.support import EchoBackend, Manifests, Twingress, free_port, wait_for_port

GW = "gateway.networking.k8s.io/v1"
GATEWAY_CLASS = {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}}


def _gateway(listeners: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "default"}, "spec": {"gatewayClassName": "twingress", "listeners": listeners}}


def _route(name: str, service: str, section: str, hostname: str) -> dict[str, Any]:
    return {
        "apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": name, "namespace": "default"},
        "spec": {"parentRefs": [{"name": "gw", "sectionName": section}], "hostnames": [hostname], "rules": [{"backendRefs": [{"name": service, "port": 80}]}]},
    }


def _pod(port: int, host: str) -> str:
    """Which echo pod answered on 127.0.0.1:port (or the status, when not 200)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/", headers={"Host": host})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return str(json.loads(body)["name"]) if response.status == 200 else str(response.status)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def echoes() -> Iterator[dict[str, EchoBackend]]:
    found = {name: EchoBackend(f"pod-{name}") for name in ("v1", "v2")}
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
        assert _wait(lambda: _refused(alt_port))
        assert not _refused(secure_port)

        generation = process.generation()
        manifests.write("gateway.yaml", GATEWAY_CLASS, _gateway(listeners[:1]), _route("alt", "v1", "alt", "alt.ports.test"))
        process.wait_generation_above(generation)
        wait_for_port("127.0.0.1", alt_port, process.process)
        assert _wait(lambda: all(_pod(alt_port, "alt.ports.test") == "pod-v1" for _ in range(8)))
        assert _wait(lambda: _refused(secure_port))
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


def _wait(check: Any, timeout: float = 10.0) -> bool:
    """Whether C{check()} holds within C{timeout} (a port closes when the worker's table arrives)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())
