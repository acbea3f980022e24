"""
The floor of any HTTP/2 server built on the h2 library: its own CPU per request.

A server-side C{h2} connection, configured as twingress's (bytes headers, no
header validation or normalisation: twingress checks header lists itself),
serves the exchange of the proxy scenarios' h2 kind (h2load -m): a client keeps C{--streams}
GET requests in flight on one connection, and every request gets a response
head and a 12-byte body ending the stream.  The client's bytes come from a
client-side C{h2} connection, made before the clock runs; only the server's
calls are timed: C{receive_data} of the client's bytes (requests, the client's
WINDOW_UPDATEs and SETTINGS ACKs), C{send_headers} and C{send_data} of every
response, and C{data_to_send}.  No sockets, no TLS, no routing, no upstream:
what an HTTP/2 request costs in C{h2}, C{hpack} and C{hyperframe} before a
proxy does anything with it, for comparing against the CPU per request that
C{python -m bench node --kinds h2} measures.  The floor-h2 scenario runs it.
"""

from __future__ import annotations

import time

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived, ResponseReceived

from bench.lib.procs import BenchFailed

AUTHORITY = b"bench.local"
BODY = b"hello world\n"
# What twingress answers for the bench backend's response (docs/performance.md).
RESPONSE = [
    (b":status", b"200"),
    (b"server", b"twingress"),
    (b"date", b"Thu, 26 Nov 2026 10:00:00 GMT"),
    (b"content-type", b"text/plain"),
    (b"content-length", b"%d" % len(BODY)),
]
REQUEST = [
    (b":method", b"GET"),
    (b":path", b"/"),
    (b":scheme", b"https"),
    (b":authority", AUTHORITY),
    (b"user-agent", b"h2load nghttp2/1.52.0"),
]


def server() -> H2Connection:
    """A server connection configured as twingress's (ingress.proxy.http2.connection)."""
    config = H2Configuration(
        client_side=False, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False,
        validate_inbound_headers=False, normalize_inbound_headers=False,
    )
    return H2Connection(config)


def client() -> H2Connection:
    """The load side, as h2load: a client that checks nothing it does not need to."""
    return H2Connection(H2Configuration(client_side=True, header_encoding=None))


def measure(requests: int, streams: int) -> dict[str, float]:
    """Serve C{requests} requests, C{streams} in flight at a time; the server's CPU is timed alone."""
    srv, cli = server(), client()
    srv.initiate_connection()
    cli.initiate_connection()
    srv.receive_data(cli.data_to_send())
    cli.receive_data(srv.data_to_send())
    srv.receive_data(cli.data_to_send())  # the client's SETTINGS ACK
    timed = 0
    served = answered = 0
    while served < requests:
        for _ in range(streams):
            cli.send_headers(cli.get_next_available_stream_id(), REQUEST, end_stream=True)
        wire = cli.data_to_send()
        start = time.process_time_ns()
        events = srv.receive_data(wire)
        for event in events:
            if isinstance(event, RequestReceived):
                srv.send_headers(event.stream_id, RESPONSE)
                srv.send_data(event.stream_id, BODY, end_stream=True)
                served += 1
        out = srv.data_to_send()
        timed += time.process_time_ns() - start
        for event in cli.receive_data(out):
            if isinstance(event, DataReceived):
                cli.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, ResponseReceived):
                answered += 1
    if answered != served:
        raise BenchFailed(f"{served} served, {answered} answered")
    return {"requests": served, "streams": streams, "server_cpu_us_per_request": timed / 1000 / served}
