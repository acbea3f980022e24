"""
The client side of an exchange: what an L{ingress.proxy.request.exchange.Exchange} asks of
the side that faces its client, which frames the answer for the client's protocol.

Two implementations: the HTTP/1.1 connection (L{ingress.proxy.http1.server}), which serves
its requests one exchange at a time, and the HTTP/2 stream (L{ingress.proxy.http2.stream}),
one per exchange.  Neither inherits from the exchange, nor it from them: this interface is
all they share (as Envoy's ActiveStream talks to its codec through an encoder interface).
A client side hands its exchange a parsed head (C{Exchange.run}) and the body's events
(C{send_upstream}, C{body_done}); the exchange runs the request and asks of the client side
what is below.  A new framing is a new client side (tests/unit/test_toy_framing.py).
"""

from __future__ import annotations

from typing import Any, Protocol

from ingress.proxy.idle import Deadline, retired
from ingress.proxy.message import h1
from ingress.proxy.request.forwarding import UNKNOWN_PEER, ForwardedFor


class ClientSide(Protocol):
    """Where the client reached, its request's body and the response to it, and pausing the request's reading."""

    timer: Deadline  # the client side's progress timer: the exchange sets its body, upstream and send waits on it
    transport: Any  # the client's connection (its TLS certificate, for auth-tls-*)
    client_full: bool  # the client takes no more response for now: an upstream bound meanwhile starts paused
    tunnels: bool  # a 101 response can become a tunnel (HTTP/1.1; HTTP/2 answers it 502)

    def send_interim(self, head: h1.Head) -> None:
        """A 1xx response other than 101 (passed on where the client's protocol has them)."""

    def local_host(self) -> str:
        """The address the client connected to (asked only where a Gateway's own address picks the table)."""

    def local_port(self) -> bytes:
        """The port the client connected to (asked after L{peer}, only where the table trusts forwarding proxies)."""

    def read_body(self, framing: h1.Framing, max_body: int) -> None:
        """The request has a body (delimited by C{framing}, at most C{max_body} bytes): read it, to C{send_upstream} and C{body_done}."""

    def relay_http2(self) -> None:
        """The route's endpoints speak HTTP/2 (gRPC, h2c): the request's frames pass to one as they are (HTTP/2 only)."""

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> int:
        """The upstream's final response head (with C{added} fields), and the body bytes read with it: how many body bytes went out."""

    def send_body(self, data: bytes) -> int:
        """More of the upstream's response body: how many bytes of it went out (after any transform)."""

    def end_response(self) -> None:
        """The upstream's response is complete: end it for the client (then the exchange is done)."""

    def open_tunnel(self, head: h1.Head, body: bytes) -> None:
        """A 101 the client asked for: the head goes out, and from now on bytes pass both ways as they are."""

    def send_tunnel(self, data: bytes) -> None:
        """Upstream bytes of a tunnel."""

    def answer(self, status: int, close: bool, location: bytes, fields: bytes) -> None:
        """An answer of this proxy's own (no upstream response): sent, then the exchange is done."""

    def refuse(self, status: int, detail: str) -> None:
        """A request that cannot be served as sent (413, a bad field): answered as the protocol requires."""

    def cut_off(self) -> None:
        """A response began and cannot be finished: the client sees it cut (HTTP/1.1: the connection; HTTP/2: the stream)."""

    def close(self) -> None:
        """The exchange ended a tunnel: the client's connection closes."""

    def pause_reading(self, reason: str) -> None:
        """Read no more of the request for C{reason} (until L{resume_reading} with it)."""

    def resume_reading(self, reason: str) -> None:
        """C{reason} no longer holds the request back."""

    def peer(self) -> ForwardedFor:
        """The client's connection as it says (a PROXY header's address): the access log's C{$proxy_protocol_addr}."""

    def guarded(self, passed: bool) -> None:
        """
        A guard decided: the request went on (C{passed}: what was held back for the verdict goes on too), or is
        about to be answered (what was held is dropped).
        """


class Departed:
    """
    The client side of an exchange whose client has ended (its connection closed, or its HTTP/2
    stream): whatever the exchange still asks of it, late, is dropped.

    While a request lasts, its client side and its exchange hold each other.  When the client
    side ends, it hands the exchange L{DEPARTED} in its own place, and retires its timer, so
    that no reference cycle outlives the request: reference counting frees the request's
    objects at once, and the cyclic collector, which holds the GIL while it scans, finds nothing
    of the request path to collect.  Before, an HTTP/2 request left about 11 objects in cycles
    and cost some 18 µs of collections; a gRPC call 17 objects and 64 µs
    (bench/library_share.py with a collection census).
    """

    timer = Deadline(None, retired)  # never set: an exchange reads its client's timer when it starts
    transport = None
    client_full = False
    tunnels = False

    def send_interim(self, head: h1.Head) -> None:
        pass

    def local_host(self) -> str:
        return ""

    def local_port(self) -> bytes:
        return b"0"

    def read_body(self, framing: h1.Framing, max_body: int) -> None:
        pass

    def relay_http2(self) -> None:
        pass

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> int:
        return 0

    def send_body(self, data: bytes) -> int:
        return 0

    def end_response(self) -> None:
        pass

    def open_tunnel(self, head: h1.Head, body: bytes) -> None:
        pass

    def send_tunnel(self, data: bytes) -> None:
        pass

    def answer(self, status: int, close: bool, location: bytes, fields: bytes) -> None:
        pass

    def refuse(self, status: int, detail: str) -> None:
        pass

    def cut_off(self) -> None:
        pass

    def close(self) -> None:
        pass

    def pause_reading(self, reason: str) -> None:
        pass

    def resume_reading(self, reason: str) -> None:
        pass

    def peer(self) -> ForwardedFor:
        return UNKNOWN_PEER

    def guarded(self, passed: bool) -> None:
        pass


DEPARTED: ClientSide = Departed()
"""The one client side of every exchange whose client has ended."""
