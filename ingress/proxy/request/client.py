"""
The client side of an exchange: what an L{ingress.proxy.request.exchange.Exchange} asks of
the side that faces its client, which frames the answer for the client's protocol.

Two implementations: the HTTP/1.1 connection (L{ingress.proxy.http1.server}), which serves
its requests one exchange at a time, and the HTTP/2 stream (L{ingress.proxy.http2.stream}),
one per exchange.  Neither inherits from the exchange, nor it from them: this interface is
all they share (as Envoy's ActiveStream talks to its codec through an encoder interface).
"""

from __future__ import annotations

from typing import Any, Protocol

from ingress.proxy.idle import Deadline, retired
from ingress.proxy.message import h1
from ingress.proxy.request.extauth import Verdict
from ingress.proxy.request.forwarding import UNKNOWN_PEER, ForwardedFor


class ClientSide(Protocol):
    """Sending the response to the client, and pausing the request's reading."""

    timer: Deadline  # the client side's progress timer: the exchange sets its body, upstream and send waits on it
    transport: Any  # the client's connection (its TLS certificate, for auth-tls-*)
    client_full: bool  # the client takes no more response for now: an upstream bound meanwhile starts paused
    tunnels: bool  # a 101 response can become a tunnel (HTTP/1.1; HTTP/2 answers it 502)

    def send_interim(self, head: h1.Head) -> None:
        """A 1xx response other than 101 (passed on where the client's protocol has them)."""

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> None:
        """The upstream's final response head (with C{added} fields), and the body bytes read with it."""

    def send_body(self, data: bytes) -> None:
        """More of the upstream's response body."""

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

    def guarded(self, verdict: Verdict) -> None:
        """A guard's verdict, taken by the exchange: answer a denial, or go on with the request."""


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

    def send_head(self, head: h1.Head, body: bytes, complete: bool, added: bytes) -> None:
        pass

    def send_body(self, data: bytes) -> None:
        pass

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

    def guarded(self, verdict: Verdict) -> None:
        pass


DEPARTED: ClientSide = Departed()
"""The one client side of every exchange whose client has ended."""
