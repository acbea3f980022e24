"""TLS passthrough by SNI: the raw stream reaches a TLS backend whose certificate the client sees end-to-end."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator

import pytest

from tests.support import EchoBackend, Manifests, Twingress, free_port, wait_for_port


@pytest.fixture(scope="module")
def tls_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """openssl s_server -www with its own certificate for pt.test (a real TLS peer, not ours)."""
    path = tmp_path_factory.mktemp("backend")
    cert, key = path / "cert.pem", path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
         "-subj", "/CN=pt.test", "-addext", "subjectAltName=DNS:pt.test", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    port = free_port()
    server = subprocess.Popen(
        ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(cert), "-key", str(key), "-www", "-quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_for_port("127.0.0.1", port, server)
    yield port
    server.terminate()
    server.wait(10)


class UntilEOFBackend:
    """A plain TCP peer that reads until the client's EOF, then answers how many bytes it got, then closes."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                received = b""
                while chunk := connection.recv(65536):
                    received += chunk
                connection.sendall(b"got %d bytes" % len(received))

    def close(self) -> None:
        self.listener.close()


def client_hello(server_name: str) -> bytes:
    """The first flight of a real TLS client for C{server_name} (Python's ssl, no socket)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.fixture(scope="module")
def raw_backend() -> Iterator[UntilEOFBackend]:
    backend = UntilEOFBackend()
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def passthrough_proxy(tmp_path_factory: pytest.TempPathFactory, tls_backend: int, raw_backend: UntilEOFBackend) -> Iterator[Twingress]:
    echo = EchoBackend("pod-t")
    path = tmp_path_factory.mktemp("passthrough")
    manifests = Manifests(path)
    passthrough = Manifests.ingress("pt", "pt.test", "tlsbackend")
    passthrough["metadata"]["annotations"] = {"twingress.io/ssl-passthrough": "true"}
    manifests.write("backend.yaml", *manifests.service("tlsbackend", [("127.0.0.1", tls_backend)]), passthrough)
    manifests.write("echo.yaml", *manifests.service("echo", [echo.address]), Manifests.ingress("term", "term.test", "echo"))
    raw = Manifests.ingress("raw", "raw.test", "rawbackend")
    raw["metadata"]["annotations"] = {"twingress.io/ssl-passthrough": "true"}
    manifests.write("raw.yaml", *manifests.service("rawbackend", [("127.0.0.1", raw_backend.port)]), raw)
    https_port = free_port()
    proxy = Twingress(path, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    proxy.https_port = https_port  # type: ignore[attr-defined]
    yield proxy
    proxy.stop()
    echo.stop()


def _served_subject(port: int, name: str) -> str:
    done = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", name],
        input=b"", capture_output=True, timeout=20,
    )  # fmt: skip
    return next((line for line in done.stdout.decode().splitlines() if line.startswith("subject=")), "")


def test_passthrough_host_shows_the_backends_own_certificate(passthrough_proxy: Twingress) -> None:
    assert "CN = pt.test" in _served_subject(passthrough_proxy.https_port, "pt.test")  # type: ignore[attr-defined]


def test_passthrough_carries_the_whole_conversation(passthrough_proxy: Twingress) -> None:
    port = passthrough_proxy.https_port  # type: ignore[attr-defined]
    done = subprocess.run(
        ["curl", "-sk", "--resolve", f"pt.test:{port}:127.0.0.1", f"https://pt.test:{port}/"],
        capture_output=True, timeout=20, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "s_server" in done.stdout  # s_server -www's status page: the backend terminated TLS, not us


def test_other_hosts_on_the_same_listener_are_still_terminated(passthrough_proxy: Twingress) -> None:
    port = passthrough_proxy.https_port  # type: ignore[attr-defined]
    assert "twingress default certificate" in _served_subject(port, "term.test")
    done = subprocess.run(
        ["curl", "-sk", "--resolve", f"term.test:{port}:127.0.0.1", f"https://term.test:{port}/x"],
        capture_output=True, timeout=20, text=True,
    )  # fmt: skip
    assert '"name": "pod-t"' in done.stdout


def test_routes_show_the_passthrough(passthrough_proxy: Twingress) -> None:
    assert passthrough_proxy.routes()["passthrough"] == {"pt.test": "default/tlsbackend:80", "raw.test": "default/rawbackend:80"}


def test_passthrough_passes_a_half_close_on_and_the_answer_back(passthrough_proxy: Twingress) -> None:
    """The client's EOF reaches the backend as EOF (not a close), and the backend's answer still comes back."""
    hello = client_hello("raw.test")
    with socket.create_connection(("127.0.0.1", passthrough_proxy.https_port), timeout=10) as client:  # type: ignore[attr-defined]
        client.sendall(hello + b"x" * 100_000)
        client.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    assert answer == b"got %d bytes" % (len(hello) + 100_000)
    metrics = passthrough_proxy.admin("/metrics")[1].decode()
    assert 'twingress_stream_connections_total{protocol="TCP",route="passthrough/default/rawbackend:80"}' in metrics
