"""
HTTP/1.x behaviour of the proxy as real clients see it on the wire:
persistence and pipelining, body framing both ways, HEAD and 100-continue,
forwarding fields, round-robin balancing and passive health.

One twingress and one pair of echo backends serve the whole module; each
test uses its own Host (route) where shared state could interfere.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy.clients import (
    RawClient,
    ScriptedBackend,
    chunked,
    pattern_block,
    read_request_head,
    request,
    route_each,
    sha256,
)
from tests.support import EchoBackend, Manifests, Twingress


def _bare_backend(sock: socket.socket, backend: ScriptedBackend) -> None:
    """Answers every request with a response that has neither Date nor Server."""
    while True:
        head = read_request_head(sock)
        if not head:
            return
        backend.record(head)
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Bare: 1\r\n\r\nok")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[dict]:
    a, b = echo_pair
    manifests = Manifests(tmp_path_factory.mktemp("manifests"))
    route_each(manifests, "echo", "echo.test", [a.address, b.address])
    route_each(manifests, "rr", "rr.test", [a.address, b.address])
    # A dead endpoint on the live one's port: nothing listens on 127.0.0.3.
    manifests.route("halfdead", "halfdead.test", [("127.0.0.3", a.port), a.address])
    bare = ScriptedBackend(_bare_backend)
    manifests.route("bare", "bare.test", [bare.address])
    proxy = Twingress(manifests.path)
    yield {"proxy": proxy, "bare": bare, "a": a, "b": b}
    proxy.stop()
    bare.stop()


@pytest.fixture
def px(world: dict) -> Twingress:
    return world["proxy"]


def metric(proxy: Twingress, name: str, **labels: str) -> float:
    """A sample from the admin /metrics page (0 when absent)."""
    text = proxy.admin("/metrics")[1].decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:]+)(?:\{(.*)\})? (\S+)", line)
        if match and match.group(1) == name:
            got = ",".join(sorted(p for p in (match.group(2) or "").split(",") if p))
            if got == want:
                return float(match.group(3))
    return 0.0


# -- persistence and pipelining ----------------------------------------------


def test_keep_alive_serves_several_requests_on_one_connection(px: Twingress) -> None:
    with RawClient(px.http_port) as client:
        port = client.local_port
        for i in range(5):
            response = client.exchange("GET", f"/keep/{i}")
            assert response.status == 200
            assert "close" not in response.connection_tokens
            echoed = response.json()
            assert echoed["path"] == f"/keep/{i}"  # the backend saw this very request
            assert echoed["headers"]["X-Forwarded-For"] == ["127.0.0.1"]
            assert client.local_port == port
        assert client.still_open(), "the proxy closed an idle keep-alive connection at once"
        # and it is still usable after the pause
        assert client.exchange("GET", "/keep/after-pause").json()["path"] == "/keep/after-pause"


def test_pipelined_requests_are_answered_in_order(px: Twingress) -> None:
    paths = [f"/pipe/{i}-{'x' * i}" for i in range(10)]
    with RawClient(px.http_port) as client:
        client.send(b"".join(request("GET", p) for p in paths))
        responses = [client.read_response() for _ in paths]
        assert [r.status for r in responses] == [200] * 10
        assert [r.json()["path"] for r in responses] == paths
        assert client.still_open()


def test_pipelined_requests_with_bodies_stay_in_order(px: Twingress) -> None:
    bodies = [pattern_block(i, 1000 + 37 * i) for i in range(6)]
    data = b""
    for i, body in enumerate(bodies):
        if i % 2:
            data += request("POST", f"/pbody/{i}", headers=[("Transfer-Encoding", "chunked")]) + chunked([body[:300], body[300:]])
        else:
            data += request("POST", f"/pbody/{i}", body=body)
    with RawClient(px.http_port) as client:
        client.send(data)
        for i, body in enumerate(bodies):
            echoed = client.read_response("POST").json()
            assert echoed["path"] == f"/pbody/{i}"
            assert (echoed["body_bytes"], echoed["body_sha256"]) == (len(body), sha256(body))


def test_pipelined_mixed_methods_and_framings_stay_in_order(px: Twingress) -> None:
    exchanges = [
        ("HEAD", "/mix/h1?size=5000", None),
        ("GET", "/mix/g1?size=2000000", 2_000_000),
        ("GET", "/mix/g2", "/mix/g2"),
        ("HEAD", "/mix/h2", None),
        ("GET", "/mix/g3?size=3000&chunked=1", 3000),
        ("POST", "/mix/p", "/mix/p"),
    ]
    with RawClient(px.http_port) as client:
        client.send(b"".join(request(m, t, body=b"abc" if m == "POST" else b"") for m, t, _ in exchanges))
        for method, target, expect in exchanges:
            response = client.read_response(method)
            assert response.status == 200, (method, target)
            if expect is None:
                assert response.body == b""
            elif isinstance(expect, int):
                assert response.body == b"x" * expect
            else:
                assert response.json()["path"] == expect
        assert client.still_open()


def test_deep_pipeline_is_answered_in_order(px: Twingress) -> None:
    """2000 requests (~80 KB) at once: more than one read, more than the head limit of buffering."""
    count = 2000
    data = b"".join(request("GET", f"/deep/{i}") for i in range(count))
    with RawClient(px.http_port, timeout=20) as client:
        sender = threading.Thread(target=client.send, args=(data,))
        sender.start()
        paths = [client.read_response().json()["path"] for _ in range(count)]
        sender.join(20)
        assert paths == [f"/deep/{i}" for i in range(count)]


def test_http10_request_gets_close_semantics(px: Twingress) -> None:
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", "/ten", version="HTTP/1.0")
        assert response.status == 200
        assert response.json()["path"] == "/ten"
        assert "close" in response.connection_tokens
        assert client.closed_by_peer(), "an HTTP/1.0 connection without keep-alive must be closed"


def test_http10_without_host_is_routed_by_nothing_and_gets_404(px: Twingress) -> None:
    # HTTP/1.0 may omit Host; there is no default backend, so: 404, closed.
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", "/nohost", host=None, version="HTTP/1.0")
        assert response.status == 404
        assert client.closed_by_peer()


def test_http10_keep_alive_when_asked(px: Twingress) -> None:
    with RawClient(px.http_port) as client:
        for i in range(3):
            response = client.exchange("GET", f"/ten-ka/{i}", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
            assert response.status == 200
            assert response.framing == "length"
            assert "keep-alive" in response.connection_tokens
            assert response.json()["path"] == f"/ten-ka/{i}"
        assert client.still_open()


def test_connection_close_from_http11_client_is_honoured(px: Twingress) -> None:
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", "/bye", headers=[("Connection", "close")])
        assert response.status == 200
        assert "close" in response.connection_tokens
        assert client.closed_by_peer()


def test_http_client_library_reuses_connection(px: Twingress) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", px.http_port, timeout=5)
    try:
        conn.request("GET", "/lib/1", headers={"Host": "echo.test"})
        first = conn.getresponse()
        assert first.status == 200 and first.read()
        sock = conn.sock
        conn.request("GET", "/lib/2", headers={"Host": "echo.test"})
        second = conn.getresponse()
        assert second.status == 200 and b'"/lib/2"' in second.read()
        assert conn.sock is sock, "http.client had to reconnect: the proxy closed a keep-alive connection"
    finally:
        conn.close()


# -- body framing -------------------------------------------------------------


def test_chunked_request_body_arrives_intact(px: Twingress) -> None:
    pieces = [pattern_block(i, size) for i, size in enumerate([1, 100, 65536, 7, 200_000, 3])]
    body = b"".join(pieces)
    with RawClient(px.http_port) as client:
        client.send(request("POST", "/upload-chunked", headers=[("Transfer-Encoding", "chunked")]))
        framed = chunked(pieces, trailer=b"X-Trailer: yes\r\n")
        for i in range(0, len(framed), 9999):  # arbitrary split points, across chunk boundaries
            client.send(framed[i : i + 9999])
        response = client.read_response("POST")
        assert response.status == 200
        echoed = response.json()
        assert echoed["body_bytes"] == len(body)
        assert echoed["body_sha256"] == sha256(body)
        # the connection goes on after a chunked body
        assert client.exchange("GET", "/after-chunked").json()["path"] == "/after-chunked"


def test_chunked_response_stays_chunked_for_http11(px: Twingress) -> None:
    size = 300_000
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", f"/c?size={size}&chunked=1")
        assert response.status == 200
        assert response.framing == "chunked"
        assert not response.has("Content-Length")
        assert response.body == b"x" * size
        assert response.raw_body.endswith(b"0\r\n\r\n")
        assert client.exchange("GET", "/after-chunked-response").status == 200


def test_chunked_response_is_dechunked_for_http10(px: Twingress) -> None:
    size = 300_000
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", f"/c?size={size}&chunked=1", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
        assert response.status == 200
        assert not response.has("Transfer-Encoding")
        assert response.framing == "close"  # the body ends with the connection
        assert response.body == b"x" * size  # no chunk framing left in it
        assert client.eof


def test_content_length_response_keeps_its_length(px: Twingress) -> None:
    size = 300_000
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", f"/cl?size={size}")
        assert response.status == 200
        assert response.framing == "length"
        assert response.header("Content-Length") == str(size)
        assert not response.has("Transfer-Encoding")
        assert response.body == b"x" * size
        assert client.still_open()


def test_head_has_length_and_no_body(px: Twingress) -> None:
    with RawClient(px.http_port) as client:
        response = client.exchange("HEAD", "/head?size=1234")
        assert response.status == 200
        assert response.header("Content-Length") == "1234"
        assert response.header("X-Backend") in ("pod-a", "pod-b")
        # no body bytes followed: the next response starts right away and parses
        nxt = client.exchange("GET", "/after-head")
        assert nxt.status == 200 and nxt.json()["path"] == "/after-head"
        assert client.still_open()


def test_expect_100_continue(px: Twingress) -> None:
    body = pattern_block(7, 150_000)
    with RawClient(px.http_port, timeout=5) as client:
        client.send(request("PUT", "/expect", headers=[("Expect", "100-continue"), ("Content-Length", str(len(body)))]))
        interim = client.read_response("PUT", interim=True)  # times out (fails) if no 100 comes
        assert interim.status == 100
        assert interim.version == b"HTTP/1.1"
        client.send(body)
        final = client.read_response("PUT")
        assert final.status == 200
        echoed = final.json()
        assert echoed["method"] == "PUT"
        assert (echoed["body_bytes"], echoed["body_sha256"]) == (len(body), sha256(body))


def test_curl_post_with_expect_continue(px: Twingress, tmp_path: Path) -> None:
    """curl sends Expect: 100-continue for big bodies; it must not have to wait it out."""
    body = pattern_block(11, 2_000_000)
    payload = tmp_path / "payload.bin"
    payload.write_bytes(body)
    result = subprocess.run(
        [
            "curl", "-sS", "--fail", "-v", "--max-time", "20", "--expect100-timeout", "15",
            "-H", "Host: echo.test", "--data-binary", f"@{payload}",
            f"http://127.0.0.1:{px.http_port}/curl-upload",
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"< HTTP/1.1 100 Continue" in result.stderr
    echoed = json.loads(result.stdout)
    assert (echoed["body_bytes"], echoed["body_sha256"]) == (len(body), sha256(body))


# -- forwarding ---------------------------------------------------------------


def test_forwarding_fields_replaced_and_host_unchanged(px: Twingress) -> None:
    spoofed = [
        ("X-Forwarded-For", "6.6.6.6"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "evil.example"),
        ("X-Forwarded-Port", "1"),
        ("X-Real-IP", "6.6.6.6"),
    ]
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", "/fwd?q=1", host="Echo.Test:%d" % px.http_port, headers=spoofed)
    assert response.status == 200
    echoed = response.json()
    headers = echoed["headers"]
    assert echoed["host"] == "Echo.Test:%d" % px.http_port  # forwarded as received
    assert echoed["uri"] == "/fwd?q=1"
    assert headers["X-Forwarded-For"] == ["127.0.0.1"]
    assert headers["X-Real-Ip"] == ["127.0.0.1"]
    assert headers["X-Forwarded-Proto"] == ["http"]
    assert headers["X-Forwarded-Port"] == [str(px.http_port)]
    assert len(headers["X-Forwarded-Host"]) == 1
    assert headers["X-Forwarded-Host"][0].lower().startswith("echo.test")
    assert "evil.example" not in str(headers) and "6.6.6.6" not in str(headers)


def test_hop_by_hop_fields_not_forwarded(px: Twingress) -> None:
    hop = [
        ("Connection", "keep-alive, X-Private-Hop"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("X-Private-Hop", "secret"),
        ("Proxy-Connection", "keep-alive"),
        ("X-End-To-End", "kept"),
    ]
    with RawClient(px.http_port) as client:
        response = client.exchange("GET", "/hop", headers=hop)
    headers = {k.lower() for k in response.json()["headers"]}
    for name in ("connection", "keep-alive", "te", "x-private-hop", "proxy-connection"):
        assert name not in headers, f"{name} was forwarded"
    assert "x-end-to-end" in headers


def test_response_always_has_date_and_server(px: Twingress, world: dict) -> None:
    with RawClient(px.http_port) as client:
        bare = client.exchange("GET", "/bare", host="bare.test")
        assert bare.status == 200 and bare.body == b"ok" and bare.header("X-Bare") == "1"
        assert world["bare"].received, "the scripted backend saw no request"
        proxied = client.exchange("GET", "/echoed")
        missing = client.exchange("GET", "/", host="no-such-host.test")
    for response in (bare, proxied, missing):
        assert response.has("Date"), response
        assert response.has("Server"), response
        assert len(response.headers("Date")) == 1 and len(response.headers("Server")) == 1
    assert bare.header("Server") == "twingress"
    assert missing.status == 404


# -- balancing and passive health -----------------------------------------------


def test_round_robin_across_both_backends(px: Twingress) -> None:
    seen: dict[str, int] = {}
    for i in range(20):
        with RawClient(px.http_port) as client:
            response = client.exchange("GET", f"/rr/{i}", host="rr.test")
            assert response.status == 200
            name = response.json()["name"]
            seen[name] = seen.get(name, 0) + 1
    assert set(seen) == {"pod-a", "pod-b"}, seen
    assert seen["pod-a"] >= 8 and seen["pod-b"] >= 8, seen


def test_round_robin_on_one_keep_alive_connection(px: Twingress) -> None:
    with RawClient(px.http_port) as client:
        names = [client.exchange("GET", f"/rr-ka/{i}", host="rr.test").json()["name"] for i in range(20)]
    assert names.count("pod-a") >= 8 and names.count("pod-b") >= 8, names


def test_dead_endpoint_is_retried_then_skipped(px: Twingress) -> None:
    before = metric(px, "twingress_upstream_failures_total", reason="connect")
    statuses = []
    for i in range(30):
        with RawClient(px.http_port) as client:
            response = client.exchange("GET", f"/health/{i}", host="halfdead.test")
            statuses.append(response.status)
            if response.status == 200:
                assert response.json()["name"] == "pod-a"
    assert statuses == [200] * 30, statuses
    failures = metric(px, "twingress_upstream_failures_total", reason="connect") - before
    # the dead endpoint was tried (and failed) at least once, then skipped while marked down
    assert 1 <= failures <= 2, failures
