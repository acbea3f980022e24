"""
Requests leave no reference cycles in a real C{twistd -n ingress}: over HTTP/1.1 (a connection
per request, and keep-alive), HTTPS/1.1, HTTP/2 over TLS and gRPC (HTTP/2 to the endpoint), with
connections that end cleanly and ones cut without TLS's close_notify, and through the guards that
wait on something (basic auth, an external auth service).

Why it matters: an object in a cycle is freed only when the cyclic collector finds it, and the
collector holds the GIL while it scans, the routing table's objects too (hundreds of milliseconds
at 10k Ingresses).  Before this was tested, an HTTP/2 request left about 11 objects in cycles
(its stream and exchange held each other, and its timer held the stream), a gRPC call more, and
every connection its own; python -m bench floor-library measured 18 µs of collections per HTTP/2
request, and 400 ms pauses at 10k Ingresses under gRPC load.  And a process that freezes its
long-lived objects (C{gc.freeze}) leaks any cycle frozen with them.

The census (tests/proxy/cycleprobe) runs inside the process: on SIGUSR2 it collects every
generation, frozen objects included, and reports what it found unreachable since the last one.
A first round of each kind of traffic warms the process up (modules imported on first use leave
cycles of their own, once); the second round is the one counted.
"""

from __future__ import annotations

import base64
import http.client
import json
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from passlib.hash import ldap_sha1

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.grpc_support import SERVICE, Backend
from tests.proxy.h2client import H2Client
from tests.proxy.test_external_auth import Service as AuthService
from tests.support import ROOT, EchoBackend, Manifests, Twingress, free_port
from tests.waiting import eventually

PROBE = ROOT / "tests" / "proxy" / "cycleprobe"
ROUNDS = 40  # requests of each kind per round
# Types of the request path: none of them may be found in a cycle.  Other garbage (a module
# imported late, Twisted's own bookkeeping) is allowed up to OTHER_ALLOWED objects in all.
REQUEST_PATH_MODULES = ("ingress.", "h2.", "hpack.", "hyperframe.", "OpenSSL.", "twisted.internet.", "twisted.protocols.", "twisted.python.failure.")
OTHER_ALLOWED = 60


class Proxy:
    def __init__(self, twingress: Twingress, https_port: int, ca: CertificateAuthority, census: Path) -> None:
        self.twingress, self.https_port, self.ca, self.census_path = twingress, https_port, ca, census

    def census(self) -> dict:
        """What the process found in cycles since the last census (after its connections have closed)."""
        self._wait_for_no_connections()
        lines = self.census_path.read_text().splitlines() if self.census_path.exists() else []
        self.twingress.process.send_signal(signal.SIGUSR2)

        def written() -> list[str]:
            now = self.census_path.read_text().splitlines() if self.census_path.exists() else []
            return now if len(now) > len(lines) else []

        now = eventually(written, "a census line after SIGUSR2", context=lambda: self.twingress.log()[-3000:])
        return json.loads(now[-1])  # type: ignore[no-any-return]

    def _wait_for_no_connections(self) -> None:
        eventually(lambda: self.twingress.metric("twingress_open_connections") == 0, "no client connections open")
        time.sleep(0.2)  # the upstream side of the last ones


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    directory = tmp_path_factory.mktemp("cycles")
    echo = EchoBackend("pod-a")
    grpc_backend = Backend(tmp_path_factory.mktemp("grpc-backend"))
    auth = AuthService()
    ca = CertificateAuthority("cycles-ca")
    manifests = Manifests(directory)
    tls = [{"hosts": ["echo.test", "grpc.test"], "secretName": "cycles-tls"}]
    echo_ingress = Manifests.ingress("echo", "echo.test", "echo", tls=tls)
    echo_ingress["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/ssl-redirect": "false"}
    grpc_ingress = Manifests.ingress("grpc", "grpc.test", "greeter", tls=tls)
    grpc_ingress["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/backend-protocol": "GRPC"}
    manifests.write(
        "all.yaml",
        tls_secret("cycles-tls", ca.issue(["echo.test", "grpc.test"])),
        *manifests.service("echo", [echo.address]),
        *manifests.service("greeter", [("127.0.0.1", grpc_backend.port)]),
        echo_ingress,
        grpc_ingress,
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "basic-auth", "namespace": "default"},
         "stringData": {"auth": f"sam:{ldap_sha1.hash('s-pass')}\n"}},
        Manifests.nginx_ingress("basic", "basic.test", "echo", {"auth-type": "basic", "auth-secret": "basic-auth"}),
        Manifests.nginx_ingress("extauth", "extauth.test", "echo", {"auth-url": auth.url("/allow")}),
    )
    https_port, census = free_port(), directory / "census.jsonl"
    twingress = Twingress(
        directory, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--access-log", "off",
        env={"PYTHONPATH": str(PROBE), "TWINGRESS_CYCLE_CENSUS": str(census)},
    )
    yield Proxy(twingress, https_port, ca, census)
    twingress.stop()
    auth.stop()
    grpc_backend.stop()
    echo.stop()


def _http(proxy: Proxy) -> None:
    """A connection per request, then keep-alive on one."""
    for _ in range(ROUNDS):
        connection = http.client.HTTPConnection("127.0.0.1", proxy.twingress.http_port, timeout=10)
        connection.request("GET", "/", headers={"Host": "echo.test", "Connection": "close"})
        response = connection.getresponse()
        response.read()
        assert response.status == 200
        connection.close()
    connection = http.client.HTTPConnection("127.0.0.1", proxy.twingress.http_port, timeout=10)
    for _ in range(ROUNDS):
        connection.request("GET", "/", headers={"Host": "echo.test"})
        response = connection.getresponse()
        response.read()
        assert response.status == 200
    connection.close()


def _https(proxy: Proxy) -> None:
    """Keep-alive over TLS on a few connections; half of them closed without close_notify."""
    context = ssl.create_default_context(cadata=proxy.ca.pem().decode())
    for n in range(4):
        raw = socket.create_connection(("127.0.0.1", proxy.https_port), timeout=10)
        tls = context.wrap_socket(raw, server_hostname="echo.test")
        for _ in range(ROUNDS // 4):
            tls.sendall(b"GET / HTTP/1.1\r\nHost: echo.test\r\n\r\n")
            assert _read_response(tls).startswith(b"HTTP/1.1 200")
        if n % 2:
            tls.unwrap()  # close_notify, then the TCP close
        raw.close()


def _read_response(tls: ssl.SSLSocket) -> bytes:
    """One response of the echo backend (its head and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += tls.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += tls.recv(65536)
    return head


def _h2(proxy: Proxy) -> None:
    """HTTP/2 over TLS: a few connections with several streams each, all closed by the client."""
    for _ in range(4):
        client = H2Client(proxy.https_port, server_name="echo.test")
        streams = [client.request("/", authority="echo.test") for _ in range(ROUNDS // 4)]
        for stream_id in streams:
            assert client.wait(stream_id).status == 200
        client.close()


def _grpc(proxy: Proxy) -> None:
    """gRPC unary calls over TLS (HTTP/2 to the endpoint too)."""
    credentials = grpc.ssl_channel_credentials(root_certificates=proxy.ca.pem())
    options = [("grpc.ssl_target_name_override", "grpc.test"), ("grpc.default_authority", "grpc.test")]
    with grpc.secure_channel(f"127.0.0.1:{proxy.https_port}", credentials, options=options) as channel:
        unary = channel.unary_unary(SERVICE + "Unary")
        for _ in range(ROUNDS):
            assert unary(b"hello", timeout=10) == b"hello"


def _guarded(proxy: Proxy, host: str, fields: dict[str, str], first: int) -> None:
    """Keep-alive requests a guard decides on: the first without C{fields} (answered C{first}), the rest with them."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.twingress.http_port, timeout=10)
    for n in range(ROUNDS):
        connection.request("GET", "/", headers={"Host": host, **(fields if n else {})})
        response = connection.getresponse()
        response.read()
        assert response.status == (200 if n else first)
    connection.close()


def _basic_auth(proxy: Proxy) -> None:
    _guarded(proxy, "basic.test", {"Authorization": "Basic " + base64.b64encode(b"sam:s-pass").decode()}, 401)


def _external_auth(proxy: Proxy) -> None:
    _guarded(proxy, "extauth.test", {}, 200)  # the service allows every request; each is asked


TRAFFIC = {"http/1.1": _http, "https/1.1": _https, "h2": _h2, "grpc": _grpc, "basic-auth": _basic_auth, "external-auth": _external_auth}


@pytest.mark.parametrize("kind", list(TRAFFIC))
def test_requests_leave_no_reference_cycles(proxy: Proxy, kind: str) -> None:
    TRAFFIC[kind](proxy)  # warm-up: what is imported or cached on first use
    proxy.census()
    TRAFFIC[kind](proxy)
    found = proxy.census()
    request_path = {name: count for name, count in found["types"] if name.startswith(REQUEST_PATH_MODULES)}
    assert not request_path, f"{kind}: objects of the request path in cycles: {request_path}"
    assert found["objects"] <= OTHER_ALLOWED, f"{kind}: {found['objects']} objects in cycles: {found['types'][:20]}"
