"""
The clients of the node's upgrade tests (tests/kube/test_deployment.py): every kind of connection an edge
node carries, all at once, each counting how its requests ended.

- C{http}, C{tls}: a new connection per request, without pause (every request meets the listening sockets
  as they are at that moment);
- C{keep-alive}: one HTTP/1.1 connection, request after request; when the server ends it after an answer
  (C{Connection: close} in a drain) the next request goes on a new one, and a request that meets a
  connection the server closed while idle is sent again on a new one (RFC 9112 9.3.1 lets a client do so
  for an idempotent request): a C{reconnect}, not a loss;
- C{stream}: a new TCP connection per request through a stream port (a StreamIngress to the same echo
  pods: the request is relayed as bytes, not routed);
- C{h2}: one HTTP/2 connection (TLS, ALPN h2, the h2 library as twingress's upstreams use it), a request at a time; a GOAWAY that does not
  cover a request sent means the server did not process it (RFC 9113 6.8): sent again on a new connection,
  a C{reconnect}.

Each request ends as C{ok} (200), C{refused} (nothing listened), C{reset} (accepted, then reset or closed
before an answer), C{5xx}, C{timeout}, or C{other} (with what it was).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Optional

import h2.config
import h2.events
import h2.exceptions

from ingress.proxy.http2.goaway import GoawayTolerant

TIMEOUT = 10.0
KINDS = ("ok", "refused", "reset", "5xx", "timeout", "other")


class _GoingAway(Exception):
    """The server sent GOAWAY before it took our request: send it again on a new connection."""


def _context(alpn: Optional[list[str]] = None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the test CA's leaf; the route is what is tested
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


def _kind_of(error: BaseException) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, (TimeoutError, socket.timeout)):
        return "timeout"
    if isinstance(error, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected, ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        return "reset"
    return "other"


def _status_kind(status: int) -> str:
    return "ok" if status == 200 else "5xx" if status >= 500 else "other"


class Mix:
    """The clients, from C{start} to C{stop}; C{counts[client][kind]}, C{reconnects[client]}, C{details} of what was not ok."""

    def __init__(self, address: str, http_host: str, tls_host: str, stream_port: int, openers: int = 2) -> None:
        self.address, self.http_host, self.tls_host, self.stream_port = address, http_host, tls_host, stream_port
        self.counts: dict[str, Counter[str]] = {name: Counter() for name in ("http", "tls", "keep-alive", "h2", "stream")}
        self.reconnects: Counter[str] = Counter()
        self.details: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        loops: list[Callable[[], None]] = [self._http] * openers + [self._tls, self._keep_alive, self._h2, self._stream]
        self._threads = [threading.Thread(target=loop, daemon=True) for loop in loops]

    @contextmanager
    def running(self) -> Iterator[Mix]:
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in self._threads:
                thread.join(TIMEOUT + 5)

    def answered(self) -> int:
        return sum(counts["ok"] for counts in self.counts.values())

    def wait_answered(self, more: int, timeout: float = 60.0) -> None:
        """Until every client has had answers and C{more} than now are answered in all."""
        target, deadline = self.answered() + more, time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.answered() >= target and all(counts["ok"] for counts in self.counts.values()):
                return
            time.sleep(0.1)
        raise AssertionError(f"no {more} more answers within {timeout}s: {self.summary()}")

    def lost(self, clients: tuple[str, ...] = ()) -> dict[str, int]:
        """The requests of C{clients} (every client's by default) that did not end in a 200, by kind."""
        total: Counter[str] = Counter()
        for name, counts in self.counts.items():
            if clients and name not in clients:
                continue
            total.update({kind: count for kind, count in counts.items() if kind != "ok"})
        return dict(total)

    def summary(self) -> str:
        parts = [f"{name} " + ", ".join(f"{kind} {counts[kind]}" for kind in KINDS if counts[kind] or kind == "ok") for name, counts in self.counts.items()]
        reconnects = ", ".join(f"{name} {count}" for name, count in self.reconnects.items()) or "none"
        return "; ".join(parts) + f"; reconnects: {reconnects}" + (f"; first failures: {self.details[:5]}" if self.details else "")

    def _count(self, client: str, kind: str, detail: str = "") -> None:
        with self._lock:
            self.counts[client][kind] += 1
            if kind != "ok":
                self.details.append(f"{client} {kind} {detail}"[:160])

    # -- a new connection per request

    def _http(self) -> None:
        self._each_new("http", 80, None)

    def _tls(self) -> None:
        self._each_new("tls", 443, _context())

    def _stream(self) -> None:
        self._each_new("stream", self.stream_port, None)

    def _each_new(self, client: str, port: int, context: Optional[ssl.SSLContext]) -> None:
        host = self.tls_host if context else self.http_host
        while not self._stop.is_set():
            try:
                with socket.create_connection((self.address, port), timeout=TIMEOUT) as raw:
                    sock = context.wrap_socket(raw, server_hostname=host) if context else raw
                    connection = http.client.HTTPConnection(host, timeout=TIMEOUT)
                    connection.sock = sock
                    connection.request("GET", "/", headers={"Host": host, "Connection": "close"})
                    response = connection.getresponse()
                    response.read()
                    self._count(client, _status_kind(response.status), f"status {response.status}")
            except (OSError, http.client.HTTPException) as error:
                kind = _kind_of(error)
                self._count(client, kind, repr(error))
                if kind == "refused":
                    time.sleep(0.05)  # nothing listens: do not spin

    # -- one connection, request after request

    def _keep_alive(self) -> None:
        connection = http.client.HTTPConnection(self.address, 80, timeout=TIMEOUT)
        while not self._stop.is_set():
            for attempt in (1, 2):
                reused = connection.sock is not None
                try:
                    connection.request("GET", "/", headers={"Host": self.http_host})
                    response = connection.getresponse()
                    response.read()
                except (OSError, http.client.HTTPException) as error:
                    connection.close()
                    if reused and attempt == 1 and isinstance(error, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                        self.reconnects["keep-alive"] += 1
                        continue
                    self._count("keep-alive", _kind_of(error), repr(error))
                    if isinstance(error, ConnectionRefusedError):
                        time.sleep(0.05)  # nothing listens: do not spin
                    break
                self._count("keep-alive", _status_kind(response.status), f"status {response.status}")
                if response.will_close:
                    connection.close()
                break
        connection.close()

    def _h2(self) -> None:
        connection: Optional[_H2] = None
        while not self._stop.is_set():
            try:
                if connection is None:
                    connection = _H2(self.address, self.tls_host)
                status = connection.get("/")
                self._count("h2", _status_kind(status), f"status {status}")
            except _GoingAway:
                self.reconnects["h2"] += 1
                connection = _close(connection)
            except (OSError, h2.exceptions.ProtocolError) as error:
                kind = _kind_of(error)
                self._count("h2", kind, repr(error))
                connection = _close(connection)
                if kind == "refused":
                    time.sleep(0.05)  # nothing listens: do not spin
        _close(connection)


def _close(connection: Optional[_H2]) -> None:
    """Close C{connection} (if any); None, the connection the caller has now."""
    if connection is not None:
        connection.sock.close()
    return None


class _H2:
    """A blocking HTTP/2 client connection: one GET at a time."""

    def __init__(self, address: str, host: str) -> None:
        raw = socket.create_connection((address, 443), timeout=TIMEOUT)
        self.sock = _context(["h2"]).wrap_socket(raw, server_hostname=host)
        if self.sock.selected_alpn_protocol() != "h2":
            self.sock.close()
            raise OSError(f"ALPN chose {self.sock.selected_alpn_protocol()!r}, not h2")
        self.host = host
        # h2's own connection closes its state machine on any GOAWAY; twingress's tolerant one reads on (a
        # graceful GOAWAY lets the streams it names finish), as nghttp2 and browsers do
        self.h2 = GoawayTolerant(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.sock.sendall(self.h2.data_to_send())
        self.gone_after: Optional[int] = None  # the GOAWAY's last stream id, once one came

    def get(self, path: str) -> int:
        if self.gone_after is not None:
            raise _GoingAway()
        stream = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream, [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", self.host)], end_stream=True)
        self.sock.sendall(self.h2.data_to_send())
        status = 0
        while True:
            data = self.sock.recv(65536)
            if not data:
                if self.gone_after is not None and stream > self.gone_after:
                    raise _GoingAway()
                raise ConnectionResetError("closed before the answer")
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    status = int(dict(event.headers)[":status"])
                elif isinstance(event, h2.events.DataReceived):
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    self.sock.sendall(self.h2.data_to_send())
                    return status
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                    if self.gone_after is not None and stream > self.gone_after:
                        raise _GoingAway()
                    raise ConnectionResetError(f"stream reset ({event.error_code})")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.gone_after = event.last_stream_id if event.last_stream_id is not None else 0
                    if stream > self.gone_after:
                        raise _GoingAway()
            self.sock.sendall(self.h2.data_to_send())
