"""
HTTP/2 from clients, through twistd: ALPN on the TLS listener, prior knowledge in
cleartext, the same routing as HTTP/1.1, flow control both ways, limits, abuse,
and the drain.  Real clients: curl, h2load, and an C{h2}-library client for frames.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import ContinuationFrame, HeadersFrame

from tests.proxy.h2client import H2Client, Response
from tests.support import EchoBackend, Manifests, Twingress, free_port
from tests.waiting import eventually


class Proxy:
    def __init__(self, twingress: Twingress, https_port: int, access_log: Path) -> None:
        self.twingress = twingress
        self.https_port = https_port
        self.http_port = twingress.http_port
        self.access_log = access_log

    def metric(self, name: str, **labels: str) -> float:
        return self.twingress.metric(name, **labels)


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoBackend]:
    backend = EchoBackend("pod-h2")
    yield backend
    backend.stop()


def _start(tmp: Path, echo: EchoBackend, *args: str) -> Proxy:
    manifests = Manifests(tmp)
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        Manifests.ingress("named", "h2.test", "echo"),
        Manifests.ingress("any", "", "echo"),
        Manifests.nginx_ingress("cors", "cors.test", "echo", {"enable-cors": "true", "cors-allow-origin": "https://app.example"}),
        Manifests.nginx_ingress("slow", "slow.test", "echo", {"proxy-read-timeout": "1"}),
    )
    https_port = free_port()
    access_log = tmp.parent / f"access-{https_port}.log"
    twingress = Twingress(tmp, "--https", f"tcp:{https_port}:interface=127.0.0.1", "--access-log", str(access_log), *args)
    return Proxy(twingress, https_port, access_log)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, echo: EchoBackend) -> Iterator[Proxy]:
    started = _start(tmp_path_factory.mktemp("h2"), echo, "--http2-cleartext", "--client-body-timeout", "5")
    yield started
    started.twingress.stop()


def _curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["curl", "-sS", "--max-time", "20", *args], capture_output=True, text=True, timeout=30)


# -- curl: ALPN and prior knowledge ---------------------------------------------


def test_curl_negotiates_h2_over_tls_and_the_request_is_routed_as_http1_would_be(proxy: Proxy) -> None:
    result = _curl("-k", "--http2", "-w", "\n%{http_version}", "-H", "X-Test: 1", f"https://h2.test:{proxy.https_port}/a/b?c=d",
                   "--resolve", f"h2.test:{proxy.https_port}:127.0.0.1")
    body, version = result.stdout.rsplit("\n", 1)
    assert version == "2", result.stderr
    seen = json.loads(body)
    assert seen["uri"] == "/a/b?c=d" and seen["method"] == "GET" and seen["protocol"] == "HTTP/1.1"  # HTTP/1.1 upstream
    headers = seen["headers"]
    assert headers["Host"] == [f"h2.test:{proxy.https_port}"]  # :authority is the Host
    assert headers["X-Forwarded-Proto"] == ["https"] and headers["X-Forwarded-For"] == ["127.0.0.1"]
    assert headers["X-Test"] == ["1"]


def test_http1_clients_on_the_tls_listener_are_unchanged(proxy: Proxy) -> None:
    result = _curl("-k", "--http1.1", "-w", "\n%{http_version}", f"https://127.0.0.1:{proxy.https_port}/")
    assert result.stdout.rsplit("\n", 1)[1] == "1.1"


def test_prior_knowledge_h2c_on_the_plain_listener_when_asked(proxy: Proxy) -> None:
    result = _curl("--http2-prior-knowledge", "-w", "\n%{http_version}", "-H", "Host: h2.test", f"http://127.0.0.1:{proxy.http_port}/x")
    body, version = result.stdout.rsplit("\n", 1)
    assert version == "2", result.stderr
    assert json.loads(body)["headers"]["X-Forwarded-Proto"] == ["http"]
    assert _curl("-w", "%{http_version}", "-o", "/dev/null", f"http://127.0.0.1:{proxy.http_port}/").stdout == "1.1"


def test_without_the_option_the_plain_listener_refuses_the_preface(tmp_path_factory: pytest.TempPathFactory, echo: EchoBackend) -> None:
    """h2c is off by default: the preface is an HTTP/2.0 request line to HTTP/1.1, answered 505 and closed."""
    off = _start(tmp_path_factory.mktemp("h2c-off"), echo)
    try:
        with socket.create_connection(("127.0.0.1", off.http_port), timeout=5) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 505 ")
    finally:
        off.twingress.stop()


def test_http2_false_offers_only_http1(tmp_path_factory: pytest.TempPathFactory, echo: EchoBackend) -> None:
    off = _start(tmp_path_factory.mktemp("h2-off"), echo, "--http2", "false")
    try:
        result = _curl("-k", "--http2", "-w", "\n%{http_version}", f"https://127.0.0.1:{off.https_port}/")
        assert result.stdout.rsplit("\n", 1)[1] == "1.1"
    finally:
        off.twingress.stop()


def test_bodies_both_ways_and_local_answers(proxy: Proxy, tmp_path: Path) -> None:
    upload = tmp_path / "upload"
    upload.write_bytes(bytes(range(256)) * 8192)  # 2 MiB
    result = _curl("-k", "--http2", "--data-binary", f"@{upload}", f"https://127.0.0.1:{proxy.https_port}/up")
    seen = json.loads(result.stdout)
    assert seen["body_bytes"] == 2 << 20
    assert seen["body_sha256"] == hashlib.sha256(upload.read_bytes()).hexdigest()
    download = _curl("-k", "--http2", "-o", str(tmp_path / "down"), "-w", "%{size_download} %{http_code}",
                     f"https://127.0.0.1:{proxy.https_port}/?size=5000000&chunked=1")
    assert download.stdout == "5000000 200"
    missing = _curl("-k", "--http2", "-w", "\n%{http_code}", "-H", "Host: nowhere.test", f"https://127.0.0.1:{proxy.https_port}/",
                    "--resolve", f"nowhere.test:{proxy.https_port}:127.0.0.1")
    assert missing.stdout.rsplit("\n", 1)[1] == "200"  # the catch-all rule serves any host
    head = _curl("-k", "--http2", "-I", f"https://127.0.0.1:{proxy.https_port}/?size=100")
    assert re.search(r"^HTTP/2 200", head.stdout, re.M) and re.search(r"^content-length: 100", head.stdout, re.M)


def test_access_log_and_metrics_name_the_protocol(proxy: Proxy) -> None:
    before = proxy.metric("twingress_http_requests_total", route="default/named", protocol="h2")
    client = H2Client(proxy.https_port)
    for _ in range(3):
        assert client.get("/logged").status == 200
    client.close()
    eventually(lambda: '"GET /logged HTTP/2.0" 200' in proxy.access_log.read_text(), "the h2 request's access-log line", timeout=5, interval=0.1)
    assert proxy.metric("twingress_http_requests_total", route="default/named", protocol="h2") == before + 3


# -- h2load: many streams over few connections -----------------------------------


def test_h2load_ten_thousand_requests_over_ten_connections_of_a_hundred_streams(proxy: Proxy) -> None:
    result = subprocess.run(
        ["h2load", "-n", "10000", "-c", "10", "-m", "100", f"https://127.0.0.1:{proxy.https_port}/"],
        capture_output=True, text=True, timeout=300,
    )
    summary = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", result.stdout)
    assert summary is not None, result.stdout + result.stderr
    assert summary.groups() == ("10000", "10000", "10000", "10000", "0", "0"), result.stdout
    assert "status codes: 10000 2xx" in result.stdout


# -- the header list, the SETTINGS, malformed requests ---------------------------


def test_settings_advertise_the_limits(proxy: Proxy) -> None:
    client = H2Client(proxy.https_port)
    client.get("/")
    assert client.remote_settings[3] == 100  # SETTINGS_MAX_CONCURRENT_STREAMS
    assert client.remote_settings[4] == 65535  # SETTINGS_INITIAL_WINDOW_SIZE
    assert client.remote_settings[6] == 32768  # SETTINGS_MAX_HEADER_LIST_SIZE: the HTTP/1.1 head limit
    client.close()


def test_cookies_are_joined_and_a_bad_request_gets_400_on_its_stream_only(proxy: Proxy) -> None:
    client = H2Client(proxy.https_port)
    seen = json.loads(bytes(client.get("/c", headers=(("cookie", "a=1"), ("cookie", "b=2"))).body))
    assert seen["headers"]["Cookie"] == ["a=1; b=2"]  # RFC 9113 8.2.3
    assert client.get("/", authority="bad host").status == 400
    assert client.get("/", authority="h2.test").status == 200  # the connection serves on
    client.close()


def test_too_large_a_header_list_closes_the_connection(proxy: Proxy) -> None:
    client = H2Client(proxy.https_port)
    client.get("/")
    client.request("/", headers=(("x-big", "v" * 40000),))
    client.read_until_closed()
    assert client.goaway is not None and client.goaway.error_code != ErrorCodes.NO_ERROR
    client.close()


@pytest.mark.parametrize(
    "extra",
    [
        [(b"X-Up", b"1")],  # RFC 9113 8.2.1: an upper-case name
        [(b"x-split", b"a\r\nx-injected: 1")],  # 8.2.1: CR LF in a value (would be a second field in HTTP/1.1)
        [(b"connection", b"close")],  # 8.2.2: a connection-specific field
        [(b"te", b"gzip")],  # 8.2.2: TE other than trailers
        [(b"accept", b"*/*"), (b":method", b"POST")],  # 8.3: a pseudo-header field after a regular one
    ],
)
def test_a_malformed_header_list_is_a_protocol_error(proxy: Proxy, extra: list[tuple[bytes, bytes]]) -> None:
    """The whole connection ends with GOAWAY PROTOCOL_ERROR (RFC 9113 8.1.1, 5.4.1), counted; the stream gets no answer."""
    before = proxy.metric("twingress_http2_connection_errors_total", reason="protocol")
    client = H2Client(proxy.https_port)
    client.get("/")
    stream_id = client.conn.get_next_available_stream_id()
    client.conn.config.validate_outbound_headers = False
    client.conn.config.normalize_outbound_headers = False
    headers = [(b":method", b"GET"), (b":path", b"/malformed"), (b":scheme", b"https"), (b":authority", b"h2.test"), *extra]
    client.conn.send_headers(stream_id, headers, end_stream=True)
    client.responses[stream_id] = Response()
    client.flush()
    client.read_until_closed()
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.PROTOCOL_ERROR
    assert client.responses[stream_id].headers == {} and not client.responses[stream_id].body
    client.close()
    assert proxy.metric("twingress_http2_connection_errors_total", reason="protocol") == before + 1


# -- flow control -----------------------------------------------------------------


def test_a_stream_whose_client_gives_no_window_holds_no_more_than_the_window(proxy: Proxy, echo: EchoBackend) -> None:
    """
    The client never acknowledges stream 1's data (100 MB asked): the proxy holds about a window
    and stops reading that upstream; another stream on the same connection is served meanwhile.
    """
    client = H2Client(proxy.https_port, auto_ack=False)
    client.conn.increment_flow_control_window(1 << 30)  # the connection's window is open: only the stream's is shut
    client.flush()
    rss = proxy.twingress.rss_bytes()
    stalled = client.request("/?size=100000000")
    deadline = time.monotonic() + 3  # not a wait: 3 s in which the proxy would read on if it did not hold the upstream
    while time.monotonic() < deadline:
        try:
            client.read_once(0.2)
        except TimeoutError:
            pass
    assert len(client.responses[stalled].body) <= 65535
    other = client.request("/other")
    while not client.responses[other].ended:
        for event in client.read_once():
            if getattr(event, "stream_id", 0) == other and hasattr(event, "flow_controlled_length"):
                client.conn.acknowledge_received_data(event.flow_controlled_length, other)
    assert json.loads(bytes(client.responses[other].body))["uri"] == "/other"
    time.sleep(1)  # not a wait: a second more for the held upstream to grow the proxy's memory if it were read
    assert proxy.twingress.rss_bytes() - rss < 30 << 20
    client.close()


def test_a_small_whole_response_larger_than_the_stream_window_waits_for_the_window(proxy: Proxy) -> None:
    """
    A response that came whole from the upstream and would fit one DATA frame, on a stream whose
    window (10 bytes, the client's SETTINGS) is smaller: sent as the window opens, none of it lost.
    """
    client = H2Client(proxy.https_port)
    client.conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 10})
    response = client.get("/small-window")
    seen = json.loads(bytes(response.body))
    assert response.status == 200 and seen["uri"] == "/small-window"
    assert int(response.headers[b"content-length"]) == len(response.body) > 10
    client.close()


def test_an_upload_to_a_slow_upstream_is_held_by_the_window_not_buffered(proxy: Proxy) -> None:
    """The upstream does not read (delay=3 answers before reading): the client's window closes, no 413, no loss."""
    client = H2Client(proxy.https_port)
    body = b"z" * (3 << 20)
    stream_id = client.request("/slow?delay=0.5", method="POST", body=body)
    response = client.wait(stream_id, timeout=30)
    seen = json.loads(bytes(response.body))
    assert seen["body_bytes"] == len(body)
    client.close()


def test_each_stream_times_out_on_its_own_read_timeout_and_the_others_are_served(proxy: Proxy) -> None:
    """
    The streams' deadlines share their connection's one timer (idle.DeadlineGroup): a stream whose
    upstream is silent past proxy-read-timeout gets 504 at its time, while a stream opened after it
    and answered in time, and one on a route of 60 s, are served.
    """
    client = H2Client(proxy.https_port)
    silent = client.request("/silent?delay=4", authority="slow.test")
    time.sleep(0.5)  # not a wait: the silent stream's deadline runs half a second ahead of the others
    in_time = client.request("/in-time?delay=0.2", authority="slow.test")
    patient = client.request("/patient?delay=2", authority="h2.test")
    assert client.wait(in_time).status == 200
    assert client.wait(silent).status == 504
    # Its 504 came at its own deadline, not at the connection's next event: the patient stream (2 s upstream) is still open.
    assert not client.responses[patient].ended
    assert client.wait(patient).status == 200
    client.close()


# -- abuse: rapid reset, CONTINUATION flood ----------------------------------------


def test_rapid_reset_ends_in_goaway_enhance_your_calm_while_others_are_served(proxy: Proxy) -> None:
    before = proxy.metric("twingress_http2_connection_errors_total", reason="rapid-reset")
    attacker = H2Client(proxy.https_port)
    bystander = H2Client(proxy.https_port)
    for _ in range(1000):
        if attacker.closed or attacker.goaway is not None:
            break
        stream_id = attacker.request("/?delay=1")
        attacker.conn.reset_stream(stream_id)
        try:
            attacker.flush()
        except OSError:
            break
    attacker.read_until_closed()
    assert attacker.goaway is not None and attacker.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert bystander.get("/still").status == 200
    assert proxy.metric("twingress_http2_connection_errors_total", reason="rapid-reset") == before + 1
    attacker.close()
    bystander.close()


def test_continuation_flood_ends_in_goaway_enhance_your_calm(proxy: Proxy) -> None:
    before = proxy.metric("twingress_http2_connection_errors_total", reason="continuation-flood")
    attacker = H2Client(proxy.https_port)
    attacker.get("/")
    headers = HeadersFrame(3)
    headers.data = attacker.conn.encoder.encode([(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"https"), (b":authority", b"h2.test")])
    frames = [headers.serialize()]
    for _ in range(200):
        continuation = ContinuationFrame(3)
        continuation.data = b"\x00\x01a\x01b"  # a literal field, never indexed: more header block, never its end
        frames.append(continuation.serialize())
    try:
        attacker.sock.sendall(b"".join(frames))
    except OSError:
        pass
    attacker.read_until_closed()
    assert attacker.goaway is not None and attacker.goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    bystander = H2Client(proxy.https_port)
    assert bystander.get("/").status == 200
    assert proxy.metric("twingress_http2_connection_errors_total", reason="continuation-flood") == before + 1
    attacker.close()
    bystander.close()


@pytest.mark.parametrize(
    "field",
    [
        b"\xff\xe9\x06",  # an indexed field at index 1000: past the static table and any dynamic one (RFC 7541 2.3.3)
        b"\x7f\xa9\x07\x00",  # a literal field with incremental indexing whose name is at index 1000, an empty value
    ],
)
def test_a_field_block_that_cannot_be_decoded_ends_in_goaway_compression_error(proxy: Proxy, field: bytes) -> None:
    """RFC 9113 4.3: a decoding error in a field block is a connection error of type COMPRESSION_ERROR (h2spec v2.6.0's hpack/2.3.3)."""
    before = proxy.metric("twingress_http2_connection_errors_total", reason="protocol")
    client = H2Client(proxy.https_port)
    client.get("/")
    headers = HeadersFrame(client.conn.get_next_available_stream_id(), flags=["END_HEADERS", "END_STREAM"])
    headers.data = client.conn.encoder.encode([(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"https"), (b":authority", b"h2.test")]) + field
    client.sock.sendall(headers.serialize())
    client.read_until_closed()
    assert client.goaway is not None and client.goaway.error_code == ErrorCodes.COMPRESSION_ERROR
    assert proxy.metric("twingress_http2_connection_errors_total", reason="protocol") == before + 1
    client.close()


# -- drain ----------------------------------------------------------------------------


def test_sigterm_sends_goaway_and_open_streams_finish(tmp_path_factory: pytest.TempPathFactory, echo: EchoBackend) -> None:
    draining = _start(tmp_path_factory.mktemp("h2-drain"), echo, "--shutdown-delay", "0.5")
    try:
        client = H2Client(draining.https_port)
        assert client.get("/").status == 200
        # The first request's upstream connection parked; the next request takes it (or opens another) once forwarded.
        eventually(lambda: draining.metric("twingress_upstream_idle_connections") == 1, "the first request's upstream connection parked")
        stream_id = client.request("/?delay=2")
        eventually(
            lambda: draining.metric("twingress_upstream_idle_connections") == 0 or draining.metric("twingress_upstream_connections_opened_total", protocol="http/1.1") > 1,
            "the stream's request forwarded before the signal",
        )
        draining.twingress.process.send_signal(signal.SIGTERM)
        response = client.wait(stream_id, timeout=15)
        assert response.status == 200 and json.loads(bytes(response.body))["uri"] == "/?delay=2"
        client.read_until_closed()
        assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
        client.close()  # TLS: the proxy's close_notify is answered by closing (the drain waits for the socket)
        assert draining.twingress.process.wait(15) == 0
    finally:
        draining.twingress.stop()


def test_worker_processes_serve_http2_too(tmp_path_factory: pytest.TempPathFactory, echo: EchoBackend) -> None:
    workers = _start(tmp_path_factory.mktemp("h2-workers"), echo, "--workers", "2", "--http2-cleartext")
    try:
        for _ in range(4):
            result = _curl("-k", "--http2", "-w", "\n%{http_version}", f"https://127.0.0.1:{workers.https_port}/w")
            assert result.stdout.rsplit("\n", 1)[1] == "2", result.stderr
        result = _curl("--http2-prior-knowledge", "-w", "\n%{http_version}", f"http://127.0.0.1:{workers.http_port}/w")
        assert result.stdout.rsplit("\n", 1)[1] == "2", result.stderr
        assert workers.metric("twingress_http_requests_total", route="default/any", protocol="h2") == 5
    finally:
        workers.twingress.stop()


def test_an_idle_connection_gets_goaway_after_the_keepalive_timeout(tmp_path_factory: pytest.TempPathFactory, echo: EchoBackend) -> None:
    idle = _start(tmp_path_factory.mktemp("h2-idle"), echo, "--keepalive-timeout", "1")
    try:
        client = H2Client(idle.https_port)
        assert client.get("/").status == 200
        started = time.monotonic()
        client.read_until_closed(timeout=10)
        assert client.goaway is not None and client.goaway.error_code == ErrorCodes.NO_ERROR
        assert time.monotonic() - started >= 0.5
        client.close()
    finally:
        idle.twingress.stop()


def test_policies_apply_to_http2_requests_too(proxy: Proxy) -> None:
    """The same routing decision: a CORS preflight answered here (204, no body), the fields on an allowed origin's response."""
    client = H2Client(proxy.https_port)
    preflight = client.get("/x", authority="cors.test", method="OPTIONS", headers=(("origin", "https://app.example"),))
    assert preflight.status == 204 and bytes(preflight.body) == b""
    assert preflight.headers[b"access-control-allow-origin"] == b"https://app.example"
    response = client.get("/x", authority="cors.test", headers=(("origin", "https://app.example"),))
    assert response.status == 200 and response.headers[b"access-control-allow-origin"] == b"https://app.example"
    client.close()


def test_a_local_answer_to_a_request_whose_body_ended_in_the_same_read(proxy: Proxy) -> None:
    """
    HEADERS, DATA and END_STREAM in one read, answered here (a CORS preflight) while the END_STREAM
    event is not handled yet: the stream is already closed both ways, so no RST_STREAM follows
    (h2 refused it with StreamClosedError and the connection broke; a grpcio client's call to a
    GRPCRoute method without a rule found it), and the connection serves on.
    """
    client = H2Client(proxy.https_port)
    stream_id = client.conn.get_next_available_stream_id()
    fields = [(":method", "OPTIONS"), (":path", "/x"), (":scheme", "https"), (":authority", "cors.test"), ("origin", "https://app.example")]
    client.conn.send_headers(stream_id, [(k.encode(), v.encode()) for k, v in fields])
    client.conn.send_data(stream_id, b"a body", end_stream=True)
    client.responses[stream_id] = Response()
    client.flush()  # one write
    assert client.wait(stream_id).status == 204
    assert client.get("/", authority="h2.test").status == 200
    client.close()
    assert "StreamClosedError" not in proxy.twingress.log()


def test_a_client_going_away_gracefully_still_gets_its_open_streams_answers(proxy: Proxy) -> None:
    """The client's GOAWAY (NO_ERROR) stops new streams; those it named finish, then the connection closes."""
    client = H2Client(proxy.https_port)
    stream_id = client.request("/?delay=0.5")
    client.conn.close_connection(last_stream_id=0)  # a client's GOAWAY names the server's streams: none
    client.conn.state_machine.state = __import__("h2.connection", fromlist=["ConnectionState"]).ConnectionState.CLIENT_OPEN
    client.flush()
    response = client.wait(stream_id)
    assert response.status == 200 and json.loads(bytes(response.body))["uri"] == "/?delay=0.5"
    client.read_until_closed()
    client.close()
