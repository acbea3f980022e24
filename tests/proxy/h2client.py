"""
A blocking HTTP/2 client on the C{h2} library, for the tests that need to see frames:
SETTINGS, GOAWAY codes, resets, windows held closed.  curl and h2load cover ordinary use.
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from h2.config import H2Configuration
from h2.connection import ConnectionState, H2Connection
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    RemoteSettingsChanged,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
)
from h2.exceptions import ProtocolError


class _GracefulClient(H2Connection):
    """
    C{h2} closes its state machine on any GOAWAY, so the frames of the streams a graceful
    GOAWAY (NO_ERROR) lets finish would be protocol errors to it; this client keeps reading them.
    """

    def _receive_goaway_frame(self, frame: Any) -> Any:
        result = super()._receive_goaway_frame(frame)
        if frame.error_code == 0:
            self.state_machine.state = ConnectionState.CLIENT_OPEN
        return result


@dataclass
class Response:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    ended: bool = False
    reset: Optional[int] = None

    @property
    def status(self) -> int:
        return int(self.headers[b":status"])


class H2Client:
    """One connection: TLS with ALPN h2 (C{tls=True}, SNI C{server_name}) or cleartext with prior knowledge."""

    def __init__(self, port: int, tls: bool = True, host: str = "127.0.0.1", auto_ack: bool = True, server_name: str = "h2.test") -> None:
        raw = socket.create_connection((host, port), timeout=10)
        if tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.set_alpn_protocols(["h2"])
            self.sock: socket.socket = context.wrap_socket(raw, server_hostname=server_name)
            assert self.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        else:
            self.sock = raw
        self.conn = _GracefulClient(H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.auto_ack = auto_ack
        self.responses: dict[int, Response] = {}
        self.remote_settings: dict[int, int] = {}
        self.goaway: Optional[ConnectionTerminated] = None
        self.closed = False
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path: str, authority: str = "h2.test", method: str = "GET", body: bytes = b"", headers: tuple[tuple[str, str], ...] = (), end: bool = True) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":path", path), (":scheme", "https"), (":authority", authority), *headers]
        self.conn.send_headers(stream_id, [(k.encode(), v.encode()) for k, v in fields], end_stream=end and not body)
        if body:
            self.send_body(stream_id, body, end)
        self.responses[stream_id] = Response()
        self.flush()
        return stream_id

    def send_body(self, stream_id: int, body: bytes, end: bool = True) -> None:
        view = memoryview(body)
        while view:
            room = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
            if room <= 0:
                self.read_once()
                continue
            self.conn.send_data(stream_id, bytes(view[:room]))
            view = view[room:]
            self.flush()
        if end:
            self.conn.end_stream(stream_id)
        self.flush()

    def read_once(self, timeout: float = 10.0) -> list[Event]:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return []
        try:
            events = self.conn.receive_data(data)
        except ProtocolError:
            self.closed = True
            return []
        for event in events:
            self._apply(event)
        self.flush()
        return events

    def _apply(self, event: Event) -> None:
        stream_id = getattr(event, "stream_id", 0)
        response = self.responses.get(stream_id)
        if isinstance(event, ResponseReceived) and response is not None:
            response.headers = dict(event.headers)
        elif isinstance(event, DataReceived):
            if response is not None:
                response.body += event.data
            if self.auto_ack:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, TrailersReceived) and response is not None:
            response.trailers = dict(event.headers)
        elif isinstance(event, StreamEnded) and response is not None:
            response.ended = True
        elif isinstance(event, StreamReset) and response is not None:
            response.reset = event.error_code
        elif isinstance(event, RemoteSettingsChanged):
            self.remote_settings.update({int(k): v.new_value for k, v in event.changed_settings.items()})
        elif isinstance(event, ConnectionTerminated):
            self.goaway = event

    def wait(self, stream_id: int, timeout: float = 10.0) -> Response:
        """Read until the stream ends or is reset."""
        deadline = time.monotonic() + timeout
        response = self.responses[stream_id]
        while not (response.ended or response.reset is not None):
            if self.closed or time.monotonic() > deadline:
                raise TimeoutError(f"stream {stream_id} did not end (closed={self.closed}, goaway={self.goaway})")
            self.read_once(max(0.1, deadline - time.monotonic()))
        return response

    def get(self, path: str, authority: str = "h2.test", **kwargs: object) -> Response:
        return self.wait(self.request(path, authority, **kwargs))  # type: ignore[arg-type]

    def read_until_closed(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.closed:
            if time.monotonic() > deadline:
                raise TimeoutError("the connection stayed open")
            try:
                self.read_once(max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                continue

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
