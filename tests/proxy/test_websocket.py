"""WebSocket through the proxy: upgrade to the echo backend's /ws, echo messages, close cleanly."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator

import pytest
from wsproto.events import CloseConnection, Ping, Pong

from tests.proxy.clients import RawClient, WSClient, request, route_each
from tests.support import EchoBackend, Manifests, Twingress


@pytest.fixture(scope="module")
def px(tmp_path_factory: pytest.TempPathFactory, echo_pair: tuple[EchoBackend, EchoBackend]) -> Iterator[Twingress]:
    manifests = Manifests(tmp_path_factory.mktemp("manifests"))
    route_each(manifests, "echo", "echo.test", [b.address for b in echo_pair])
    proxy = Twingress(manifests.path)
    yield proxy
    proxy.stop()


def test_upgrade_echo_and_clean_close(px: Twingress) -> None:
    with WSClient(px.http_port, "echo.test") as ws:
        messages: list[str | bytes] = [
            "hello",
            b"\x00\x01\x02binary\xff",
            "ünïcødé ✓",
            b"",
            "x" * 70_000,  # 64-bit length frame
            os.urandom(300_000),
        ]
        for message in messages:
            if isinstance(message, str):
                ws.send_text(message)
            else:
                ws.send_bytes(message)
            assert ws.receive_message() == message
        # several in flight at once come back in order
        for i in range(10):
            ws.send_text(f"burst {i}")
        assert [ws.receive_message() for _ in range(10)] == [f"burst {i}" for i in range(10)]

        ws.send(CloseConnection(code=1000, reason="bye"))
        event = ws.next_event()
        assert isinstance(event, CloseConnection), event
        assert event.code == 1000
        assert ws.wait_closed()  # the proxy closes the client side once the backend has
    with RawClient(px.http_port) as client:
        assert client.exchange("GET", "/after-ws").json()["path"] == "/after-ws"


def test_ping_is_answered_through_the_tunnel(px: Twingress) -> None:
    with WSClient(px.http_port, "echo.test") as ws:
        ws.send(Ping(payload=b"are you there"))
        event = ws.next_event()
        assert isinstance(event, Pong) and event.payload == b"are you there", event
        ws.send_text("after ping")
        assert ws.receive_message() == "after ping"
        ws.send(CloseConnection(code=1000))
        assert isinstance(ws.next_event(), CloseConnection)
        assert ws.wait_closed()


def test_concurrent_websockets_are_independent(px: Twingress) -> None:
    clients = [WSClient(px.http_port, "echo.test") for _ in range(5)]
    try:
        for i, ws in enumerate(clients):
            ws.send_text(f"client {i}")
        for i, ws in reversed(list(enumerate(clients))):
            assert ws.receive_message() == f"client {i}"
    finally:
        for ws in clients:
            ws.sock.close()


def test_plain_get_to_ws_path_is_not_upgraded(px: Twingress) -> None:
    """Without Upgrade the backend answers /ws like any path; the connection stays HTTP."""
    with RawClient(px.http_port) as client:
        client.send(request("GET", "/ws"))
        response = client.read_response()
        assert response.status == 200
        assert response.json()["path"] == "/ws"
        assert client.exchange("GET", "/next").status == 200


def test_handshake_on_the_wire(px: Twingress) -> None:
    """The 101 carries Upgrade, Connection: upgrade and the backend's Sec-WebSocket-Accept."""
    key = base64.b64encode(os.urandom(16)).decode()
    expected = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    with RawClient(px.http_port) as client:
        client.send(
            request(
                "GET",
                "/ws",
                headers=[
                    ("Connection", "Upgrade"),
                    ("Upgrade", "websocket"),
                    ("Sec-WebSocket-Key", key),
                    ("Sec-WebSocket-Version", "13"),
                ],
            )
        )
        head = client.read_head()
        assert head.status == 101
        assert (head.header("Upgrade") or "").lower() == "websocket"
        assert "upgrade" in head.connection_tokens
        assert head.header("Sec-WebSocket-Accept") == expected
        assert not head.has("Content-Length") and not head.has("Transfer-Encoding")
        # a hand-made masked Close(1000) goes through the tunnel; the backend's Close comes back, then EOF
        mask = os.urandom(4)
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(b"\x03\xe8"))
        client.send(b"\x88\x82" + mask + payload)
        assert client.read_exact(4) == b"\x88\x02\x03\xe8"  # unmasked server Close(1000)
        assert client.closed_by_peer(5)
