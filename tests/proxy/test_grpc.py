"""
gRPC through twistd: a real grpcio server behind an Ingress annotated backend-protocol GRPC
(h2c to the endpoint), real grpcio clients over TLS (ALPN h2) and over h2c prior knowledge.

gRPC's wire protocol ("gRPC over HTTP2", grpc/grpc doc/PROTOCOL-HTTP2.md) is the spec: the
status travels in trailers (grpc-status, grpc-message), a cancelled call is RST_STREAM, and a
proxy that cannot reach the server answers UNAVAILABLE (14).  ingress-nginx's "Backend
Protocol" annotation (annotations.md) names GRPC and GRPCS.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import RequestReceived

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.proxy.grpc_support import SERVICE, Backend, h2c_channel
from tests.support import Manifests, Twingress, accept_in_threads, free_port, refusing_address
from tests.waiting import eventually


class Proxy:
    def __init__(self, twingress: Twingress, https_port: int, ca: CertificateAuthority) -> None:
        self.twingress = twingress
        self.https_port = https_port
        self.ca = ca

    def tls_channel(self, host: str = "grpc.test") -> grpc.Channel:
        credentials = grpc.ssl_channel_credentials(root_certificates=self.ca.pem())
        return grpc.secure_channel(f"127.0.0.1:{self.https_port}", credentials, options=[("grpc.ssl_target_name_override", host), ("grpc.default_authority", host)])

    def h2c_channel(self, host: str = "grpc.test") -> grpc.Channel:
        return h2c_channel(self.twingress.http_port, host)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    started = Backend(tmp_path_factory.mktemp("grpc-backend"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def tls_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """A gRPC server over TLS (its certificate from a CA of its own, unchecked: ingress-nginx's proxy-ssl-verify default)."""
    directory = tmp_path_factory.mktemp("grpcs-backend")
    leaf = CertificateAuthority("backend-ca").issue(["greeter-tls.default.svc"])
    (directory / "cert.pem").write_bytes(leaf.fullchain_pem())
    (directory / "key.pem").write_bytes(leaf.key_pem())
    started = Backend(directory, str(directory / "cert.pem"), str(directory / "key.pem"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, backend: Backend, tls_backend: Backend) -> Iterator[Proxy]:
    directory = tmp_path_factory.mktemp("grpc")
    ca = CertificateAuthority("grpc-ca")
    manifests = Manifests(directory)
    grpcs = Manifests.ingress("grpcs", "grpcs.test", "greeter-tls", tls=[{"hosts": ["grpcs.test"], "secretName": "grpc-tls"}])
    grpcs["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/backend-protocol": "GRPCS", "nginx.ingress.kubernetes.io/ssl-redirect": "false"}
    grpc_ingress = Manifests.ingress("grpc", "grpc.test", "greeter", tls=[{"hosts": ["grpc.test"], "secretName": "grpc-tls"}])
    grpc_ingress["metadata"]["annotations"] = {"twingress.io/backend-protocol": "GRPC", "twingress.io/ssl-redirect": "false"}
    slow = Manifests.ingress("slow", "slow.test", "greeter")
    slow["metadata"]["annotations"] = {"twingress.io/backend-protocol": "GRPC", "twingress.io/proxy-read-timeout": "1"}
    down = Manifests.ingress("down", "down.test", "nowhere")
    down["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/backend-protocol": "grpc"}
    manifests.write(
        "all.yaml",
        tls_secret("grpc-tls", ca.issue(["grpc.test", "down.test", "grpcs.test"])),
        *manifests.service("greeter", [("127.0.0.1", backend.port)]),
        *manifests.service("greeter-tls", [("127.0.0.1", tls_backend.port)]),
        grpcs,
        *manifests.service("nowhere", [refusing_address()]),
        grpc_ingress,
        slow,
        down,
    )
    https_port = free_port()
    twingress = Twingress(directory, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--http2-cleartext")
    yield Proxy(twingress, https_port, ca)
    twingress.stop()


def _unary(channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(SERVICE + "Unary")


@pytest.mark.parametrize("transport", ["tls", "h2c"])
def test_unary_with_metadata_and_trailers_both_ways(proxy: Proxy, transport: str) -> None:
    with proxy.tls_channel() if transport == "tls" else proxy.h2c_channel() as channel:
        reply, call = _unary(channel).with_call(b"hello", metadata=(("x-echo", "abc"),), timeout=10)
    assert reply == b"hello"
    assert ("x-echo", "abc") in call.initial_metadata()
    assert ("x-trailer", "t-abc") in call.trailing_metadata()
    assert call.code() == grpc.StatusCode.OK


def test_grpcs_speaks_h2_over_tls_to_the_endpoint(proxy: Proxy) -> None:
    with proxy.tls_channel("grpcs.test") as channel:
        reply, call = _unary(channel).with_call(b"over tls", metadata=(("x-echo", "s"),), timeout=10)
    assert reply == b"over tls" and ("x-trailer", "t-s") in call.trailing_metadata()


def test_an_error_status_and_message_reach_the_client(proxy: Proxy) -> None:
    with proxy.tls_channel() as channel, pytest.raises(grpc.RpcError) as caught:
        _unary(channel)(b"fail", timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == "no such thing"


def test_server_streaming_100_mb_with_bounded_memory(proxy: Proxy) -> None:
    rss = proxy.twingress.rss_bytes()
    size = 100 << 20
    with proxy.tls_channel() as channel:
        received = sum(len(message) for message in channel.unary_stream(SERVICE + "Download")(str(size).encode(), timeout=120))
    assert received == size
    assert proxy.twingress.rss_bytes() - rss < 30 << 20


def test_client_streaming_100_mb_with_bounded_memory(proxy: Proxy) -> None:
    rss = proxy.twingress.rss_bytes()
    block = b"u" * 65536

    def blocks() -> Iterator[bytes]:
        for _ in range(1600):  # 100 MiB
            yield block

    with proxy.tls_channel() as channel:
        count = channel.stream_unary(SERVICE + "Upload")(blocks(), timeout=120)
    assert int(count) == 1600 * 65536
    assert proxy.twingress.rss_bytes() - rss < 30 << 20


def test_bidirectional_streaming(proxy: Proxy) -> None:
    with proxy.h2c_channel() as channel:
        replies = list(channel.stream_stream(SERVICE + "Chat")(iter([b"abc", b"hello", b"xyz"]), timeout=10))
    assert replies == [b"cba", b"olleh", b"zyx"]


def test_a_thousand_concurrent_calls_on_one_connection(proxy: Proxy) -> None:
    """The proxy's 100 streams per client connection hold the rest back; every call completes."""
    with proxy.tls_channel() as channel:
        unary = _unary(channel)
        calls = [unary.future(b"n%d" % i, timeout=60) for i in range(1000)]
        assert [call.result() for call in calls] == [b"n%d" % i for i in range(1000)]


def test_a_cancelled_call_is_cancelled_on_the_server(proxy: Proxy, backend: Backend) -> None:
    backend.marker.unlink(missing_ok=True)
    backend.started.unlink(missing_ok=True)
    with proxy.tls_channel() as channel:
        future = channel.unary_unary(SERVICE + "Wait").future(b"", timeout=30)
        eventually(backend.started.exists, "the call to reach the server")
        future.cancel()
        eventually(backend.cancelled, "the server to see the cancellation")
    assert backend.marker.read_text() == "cancelled"


def test_deadline_exceeded(proxy: Proxy, backend: Backend) -> None:
    backend.marker.unlink(missing_ok=True)
    with proxy.tls_channel() as channel, pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary(SERVICE + "Wait")(b"", timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    eventually(backend.cancelled, "the server to see the cancellation")
    assert backend.marker.read_text() == "cancelled"  # the grpc-timeout header (and the reset) reached it


def test_an_exchange_silent_both_ways_past_the_read_timeout_is_ended(proxy: Proxy, backend: Backend) -> None:
    """proxy-read-timeout (annotations.md "Custom timeouts"; nginx's grpc_read_timeout): UNAVAILABLE, and the server's call is cancelled."""
    backend.marker.unlink(missing_ok=True)
    with proxy.h2c_channel("slow.test") as channel, pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary(SERVICE + "Wait")(b"", timeout=20)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "timed out" in (caught.value.details() or "")
    eventually(backend.cancelled, "the server to see the cancellation")
    assert backend.marker.read_text() == "cancelled"


def test_an_endpoint_that_refuses_gives_unavailable(proxy: Proxy) -> None:
    with proxy.tls_channel("down.test") as channel, pytest.raises(grpc.RpcError) as caught:
        _unary(channel)(b"x", timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_an_http1_client_is_told_http2_is_needed(proxy: Proxy) -> None:
    result = subprocess.run(
        ["curl", "-sS", "--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: grpc.test", f"http://127.0.0.1:{proxy.twingress.http_port}/test.Echo/Unary"],
        capture_output=True, text=True, timeout=20,
    )
    assert result.stdout == "426"


def _proxy_of(directory: Path, backend: Backend) -> Proxy:
    """A twingress of its own (h2c) with one GRPC route to C{backend}: for tests that stop or age their endpoint."""
    manifests = Manifests(directory / "manifests")
    manifests.path.mkdir()
    ingress = Manifests.ingress("grpc", "grpc.test", "greeter")
    ingress["metadata"]["annotations"] = {"twingress.io/backend-protocol": "GRPC"}
    manifests.write("all.yaml", *manifests.service("greeter", [("127.0.0.1", backend.port)]), ingress)
    return Proxy(Twingress(manifests.path, "--http2-cleartext"), 0, CertificateAuthority("unused"))


def test_an_upstream_killed_mid_stream_gives_unavailable(tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("grpc-kill")
    backend = Backend(directory)
    proxy = _proxy_of(directory, backend)
    twingress = proxy.twingress
    try:
        with proxy.h2c_channel() as channel:
            stream = channel.unary_stream(SERVICE + "Download")(str(1 << 30).encode(), timeout=60)
            first = next(stream)
            assert len(first) == 65536
            threading.Timer(0.2, backend.stop).start()
            with pytest.raises(grpc.RpcError) as caught:
                for _ in stream:
                    pass
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        with proxy.h2c_channel() as channel, pytest.raises(grpc.RpcError) as again:
            _unary(channel)(b"x", timeout=10)
        assert again.value.code() == grpc.StatusCode.UNAVAILABLE  # the endpoint is gone: refused
    finally:
        twingress.stop()
        backend.stop()


def test_an_endpoint_that_ends_its_connections_gracefully_loses_no_call(tmp_path_factory: pytest.TempPathFactory) -> None:
    """
    A server with a maximum connection age sends GOAWAY (NO_ERROR) and lets its open streams finish:
    the calls under way complete on the old connection, the next ones go to a new one.
    """
    directory = tmp_path_factory.mktemp("grpc-max-age")
    backend = Backend(directory, max_age_ms=300)
    proxy = _proxy_of(directory, backend)
    twingress = proxy.twingress
    try:
        with proxy.h2c_channel() as channel:
            unary, download = _unary(channel), channel.unary_stream(SERVICE + "Download")
            deadline = time.monotonic() + 2.5  # not a wait: calls for several connection ages (300 ms each)
            calls = 0
            while time.monotonic() < deadline:
                assert unary(b"c%d" % calls, timeout=10) == b"c%d" % calls
                calls += 1
            assert sum(len(m) for m in download(str(100 << 20).encode(), timeout=60)) == 100 << 20  # spans a GOAWAY
        assert calls > 10
        opened = twingress.metric("twingress_upstream_connections_opened_total", protocol="h2")
        assert 2 <= opened < calls  # a new connection after each GOAWAY, and many calls on each
    finally:
        twingress.stop()
        backend.stop()


class _MalformedEndpoint:
    """
    An h2c endpoint (the h2 library, its own checks off) that answers every request with a header
    list RFC 9113 calls malformed (an upper-case field name, 8.2.1), on a thread of its own.
    """

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answered = 0
        accept_in_threads(self.listener, self._answer)

    def _answer(self, client: socket.socket) -> None:
        h2 = H2Connection(H2Configuration(client_side=False, validate_outbound_headers=False, normalize_outbound_headers=False))
        h2.initiate_connection()
        client.sendall(h2.data_to_send())
        with client, contextlib.suppress(OSError):  # the proxy resets the connection once it sees the answer
            while data := client.recv(65536):
                for event in h2.receive_data(data):
                    if isinstance(event, RequestReceived):
                        h2.send_headers(event.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc"), (b"X-Bad", b"1")])
                        self.answered += 1
                client.sendall(h2.data_to_send())

    def stop(self) -> None:
        self.listener.close()


def test_a_malformed_response_from_the_endpoint_gives_unavailable(tmp_path_factory: pytest.TempPathFactory) -> None:
    """
    RFC 9113 8.1.1: a malformed response is a stream error; the client is told UNAVAILABLE (gRPC's
    PROTOCOL-HTTP2.md: the proxy could not get an answer), and no malformed field reaches it.
    """
    directory = tmp_path_factory.mktemp("grpc-malformed")
    endpoint = _MalformedEndpoint()
    manifests = Manifests(directory / "manifests")
    manifests.path.mkdir()
    ingress = Manifests.ingress("grpc", "grpc.test", "greeter")
    ingress["metadata"]["annotations"] = {"twingress.io/backend-protocol": "GRPC"}
    manifests.write("all.yaml", *manifests.service("greeter", [("127.0.0.1", endpoint.port)]), ingress)
    twingress = Twingress(manifests.path, "--http2-cleartext")
    try:
        with h2c_channel(twingress.http_port, "grpc.test") as channel, pytest.raises(grpc.RpcError) as caught:
            _unary(channel)(b"x", timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert endpoint.answered >= 1  # the request reached the endpoint; its answer was refused
    finally:
        twingress.stop()
        endpoint.stop()
