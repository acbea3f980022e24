"""HTTP→HTTPS redirects and HSTS, through real sockets (curl for the TLS side)."""

from __future__ import annotations

import http.client
import subprocess
from collections.abc import Iterator

import pytest

from tests.support import EchoBackend, Manifests, Twingress, free_port


@pytest.fixture(scope="module")
def redirect_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    echo = EchoBackend("pod-r")
    path = tmp_path_factory.mktemp("redirect")
    manifests = Manifests(path)
    secured = Manifests.ingress("secured", "r.test", "echo", tls=[{"hosts": ["r.test"], "secretName": "r-tls"}])
    secured["metadata"]["annotations"] = {"twingress.io/hsts-max-age": "600"}
    optout = Manifests.ingress("optout", "n.test", "echo", tls=[{"hosts": ["n.test"], "secretName": "r-tls"}])
    optout["metadata"]["annotations"] = {"twingress.io/ssl-redirect": "false"}
    manifests.write("all.yaml", *manifests.service("echo", [echo.address]), secured, optout)
    https_port = free_port()
    proxy = Twingress(path, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    proxy.https_port = https_port  # type: ignore[attr-defined]
    yield proxy
    proxy.stop()
    echo.stop()


def _get(port: int, host: str, target: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", target, headers={"Host": host})
    response = conn.getresponse()
    response.read()
    return response


def test_plain_http_to_a_tls_host_is_redirected_with_path_and_query(redirect_proxy: Twingress) -> None:
    """The HTTPS listener is not on 443 here: the redirect names its port, or it would lead nowhere."""
    port = redirect_proxy.https_port  # type: ignore[attr-defined]
    response = _get(redirect_proxy.http_port, "r.test:8080", "/a/b?c=d")
    assert response.status == 308
    assert response.getheader("Location") == f"https://r.test:{port}/a/b?c=d"


def test_the_redirect_keeps_the_path_as_spelled_and_follows_an_absolute_target(redirect_proxy: Twingress) -> None:
    port = redirect_proxy.https_port  # type: ignore[attr-defined]
    assert _get(redirect_proxy.http_port, "r.test", "/x/../a%2Fb").getheader("Location") == f"https://r.test:{port}/x/../a%2Fb"
    assert _get(redirect_proxy.http_port, "other.test", "http://r.test/q").getheader("Location") == f"https://r.test:{port}/q"


@pytest.mark.parametrize(("option", "location"), [("443", "https://r.test/p"), ("8443", "https://r.test:8443/p")])
def test_https_redirect_port_names_the_port_the_clients_reach(tmp_path_factory: pytest.TempPathFactory, option: str, location: str) -> None:
    """--https-redirect-port: the listener's port as clients see it (e.g. behind a NAT mapping 443 to it)."""
    echo = EchoBackend("pod-p")
    manifests = Manifests(tmp_path_factory.mktemp("redirect-port"))
    secured = Manifests.ingress("secured", "r.test", "echo", tls=[{"hosts": ["r.test"], "secretName": "r-tls"}])
    manifests.write("all.yaml", *manifests.service("echo", [echo.address]), secured)
    https_port = free_port()
    proxy = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--https-redirect-port", option)
    try:
        assert _get(proxy.http_port, "r.test", "/p").getheader("Location") == location
    finally:
        proxy.stop()
        echo.stop()


def test_redirect_can_be_turned_off_per_ingress(redirect_proxy: Twingress) -> None:
    assert _get(redirect_proxy.http_port, "n.test", "/").status == 200


@pytest.mark.parametrize(("version", "status_line"), [("--http1.1", "HTTP/1.1 200"), ("--http2", "HTTP/2 200")])
def test_https_answers_carry_hsts_and_x_forwarded_proto(redirect_proxy: Twingress, version: str, status_line: str) -> None:
    port = redirect_proxy.https_port  # type: ignore[attr-defined]
    done = subprocess.run(
        ["curl", "-sk", version, "-D", "-", "--resolve", f"r.test:{port}:127.0.0.1", f"https://r.test:{port}/x"],
        capture_output=True,
        timeout=20,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    head, _, body = done.stdout.partition("\n\n")  # text mode: CRLF arrives as LF
    assert head.startswith(status_line)
    assert "strict-transport-security: max-age=600" in head.lower()
    assert '"X-Forwarded-Proto": ["https"]' in body


def test_a_stalled_handshake_is_closed_and_the_listener_keeps_serving(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A client that connects to the TLS port and never finishes its handshake is cut off by the header timeout."""
    import socket
    import time

    path = tmp_path_factory.mktemp("stall")
    https_port = free_port()
    proxy = Twingress(path, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--header-timeout", "1")
    try:
        with socket.create_connection(("127.0.0.1", https_port), timeout=10) as stalled:
            stalled.sendall(b"\x16\x03\x01\x00")  # the start of a ClientHello record, then nothing
            started = time.monotonic()
            try:
                closed = stalled.recv(1024) == b""  # closed by the server (recv would time out otherwise)
            except ConnectionResetError:
                closed = True  # mid-handshake there is no TLS session to close politely: a reset is a close
            assert closed
            assert time.monotonic() - started < 10
        done = subprocess.run(
            ["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", f"https://127.0.0.1:{https_port}/"],
            capture_output=True,
            timeout=20,
            text=True,
        )
        assert done.stdout == "404"  # the listener still answers (no route in an empty directory)
    finally:
        proxy.stop()
