"""
The floor of any HTTP/2 server built on the h2 library: its own CPU per request.

A server-side C{h2} connection, configured as twingress's (bytes headers, no
header validation or normalisation: twingress checks header lists itself),
serves the exchange of C{h2_bench.py}'s h2 row: a client keeps C{--streams}
GET requests in flight on one connection, and every request gets a response
head and a 12-byte body ending the stream.  The client's bytes come from a
client-side C{h2} connection, made before the clock runs; only the server's
calls are timed: C{receive_data} of the client's bytes (requests, the client's
WINDOW_UPDATEs and SETTINGS ACKs), C{send_headers} and C{send_data} of every
response, and C{data_to_send}.  No sockets, no TLS, no routing, no upstream:
what an HTTP/2 request costs in C{h2}, C{hpack} and C{hyperframe} before a
proxy does anything with it, for comparing against the CPU per request that
C{h2_bench.py} measures:

  .venv/bin/python -m bench floor-h2 [--requests 200000] [--streams 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Optional

import h2
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived, ResponseReceived

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
        raise SystemExit(f"FAILED: {served} served, {answered} answered")
    return {"requests": served, "streams": streams, "server_cpu_us_per_request": timed / 1000 / served}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--streams", type=int, default=10, help="requests in flight on the connection (h2_bench's -m)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds after one warm-up round; the best is reported")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    measure(min(args.requests, 20_000), args.streams)  # warm-up
    rounds = [measure(args.requests, args.streams)["server_cpu_us_per_request"] for _ in range(args.rounds)]
    result = {"h2": h2.__version__, "python": sys.version.split()[0], "streams": args.streams,
              "requests_per_round": args.requests, "rounds_us_per_request": rounds, "best_us_per_request": min(rounds)}
    print(f"h2 {h2.__version__}: {min(rounds):.1f} us of CPU per request in the h2 library alone "
          f"(rounds: {', '.join(f'{r:.1f}' for r in rounds)}; {args.streams} streams in flight)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
