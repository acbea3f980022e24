"""
twingress's HTTP/2 request path in one process, with no socket, no TLS and no reactor: its CPU per
request, steady enough to compare two trees a few µs apart, and a function profile of it.

The proxy scenarios (pairs, node) measure the whole process under h2load on this
2-CPU guest, whose speed moves by a fifth from one minute to the next: a change of a few µs per
request is inside their spread.  This bench runs only the code an h2 request runs in twingress
once its bytes are read, and times it with the process's CPU clock:

- the real L{ingress.proxy.http2.connection.H2ServerProtocol}, on the factory, pool, settings and
  metrics the data plane builds (access log off, as the peers benches run it; hpack's debug
  calls dropped and h2's state-machine Enums hashed by identity, as the data plane does),
  routing the benches' Ingress (C{bench.local /} to one endpoint, L{objects});
- the client's bytes made beforehand by the same libraries (C{hpack}'s encoder, C{hyperframe}'s
  frames): batches of C{--streams} GETs as h2load sends them (its header fields, one HEADERS
  frame each with END_STREAM), and the WINDOW_UPDATE that gives the connection back what the
  previous batch's responses took; nothing of the client runs while the clock runs;
- idle upstream connections (L{ingress.proxy.request.upstream.UpstreamConnection} on a memory
  transport) in the pool; after each batch is read, every one a request was written to reads the
  benches' nginx backend's response, as the reactor's reads of the backend's sockets would;
  then the reactor's turn: its timers, the calls before its next poll (the connection's flush,
  which writes the batch's responses at once), and a poll that returns at once.

What it leaves out, and the proxy benches include: the TLS transport, the socket reads and
writes, the reactor's poll and dispatch, and the client's and backend's own CPU.  So its figure
is below the h2 row's, by those.  Before the timed rounds a short run is checked: every response
(status 200, the backend's body, the stream ended; read back with hyperframe and hpack, or with
twingress's response parser for HTTP/1.1) and every upstream request's head.

Run by the h2-path scenario (bench/scenarios/h2_path.py: C{python -m bench h2-path}); with
C{--instructions} it runs this module twice under valgrind (L{count_instructions}).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

from hpack import Decoder, Encoder
from hyperframe.frame import DataFrame, Frame, HeadersFrame, SettingsFrame, WindowUpdateFrame
from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Protocol
from twisted.internet.testing import StringTransport

from bench.lib.procs import BenchFailed
from bench.lib.results import interpreter
from ingress.model.parse import state_from_objects
from ingress.observe.metrics import Metrics
from ingress.proxy.http1.factory import HTTPProxyFactory
from ingress.proxy.http2.connection import PREFACE, H2ServerProtocol
from ingress.proxy.message import h1
from ingress.proxy.request.settings import HTTP2Settings, ProxySettings
from ingress.proxy.request.upstream import _DONE, UpstreamConnection, UpstreamPool
from ingress.routing import build
from ingress.runtime.live import LiveTable
from ingress.speedups.librarylog import drop_hpack_debug
from ingress.speedups.statehash import hash_states_by_identity

BACKEND_PORT = 8080
BODY = b"hello world\n"
# The benches' nginx backend's answer to GET / (bench/lib/site.py start_backends), as it sends it.
RESPONSE = (b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 28 Nov 2026 09:00:00 GMT\r\n"
            b"Content-Type: text/plain\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s") % (len(BODY), BODY)
# The responses the backend sends, in turn: its one answer again and again (as nginx answers the benches' GET /
# within a second), or with --distinct-heads each head new (an ETag of its own), the worst case for h1's
# remembered field sections.
backend_responses: Iterator[bytes] = itertools.repeat(RESPONSE)


def distinct_responses(count: int) -> Iterator[bytes]:
    """C{count} responses alike but for each head's own ETag, made before the clock runs."""
    made = [RESPONSE.replace(b"Content-Type:", b'ETag: "%08d"\r\nContent-Type:' % number, 1) for number in range(count)]
    return itertools.cycle(made)
# What h2load sends for https://bench.local:PORT/ (nghttp2 1.52's h2load: these fields, this order).
REQUEST_FIELDS = [(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"https"), (b":authority", b"bench.local"),
                  (b"accept", b"*/*"), (b"accept-encoding", b"gzip, deflate"), (b"user-agent", b"h2load nghttp2/1.52.0")]


class Transport(StringTransport):
    """A memory transport of a TCP connection that forgets what was written unless kept (a long run writes a lot)."""

    keep = False

    def setTcpNoDelay(self, enabled: bool) -> None:  # noqa: N802 (Twisted's name)
        pass

    def write(self, data: bytes) -> None:
        if self.keep:
            super().write(data)  # type: ignore[no-untyped-call]  # Twisted's StringTransport is not annotated


class Upstream:
    """The pool's idle connections to the endpoint; each answers the request written to it when L{answer} runs."""

    def __init__(self, pool: UpstreamPool, count: int) -> None:
        self.waiting: list[UpstreamConnection] = []  # written to since the last answer, in order
        self.answered = 0
        self.bad_heads = 0
        for _ in range(count):
            connection = UpstreamConnection(pool, ("127.0.0.1", BACKEND_PORT))
            transport = Transport(peerAddress=IPv4Address("TCP", "127.0.0.1", BACKEND_PORT))  # type: ignore[no-untyped-call]  # Twisted's StringTransport is not annotated
            connection.makeConnection(transport)  # type: ignore[no-untyped-call]  # Twisted's Protocol.makeConnection is not annotated
            connection.write = self._written(connection)  # the data plane's direct_writer, on a memory transport
            connection._state, connection._keep_alive = _DONE, True  # a finished exchange: idle and reusable
            pool.release(connection)

    def _written(self, connection: UpstreamConnection) -> Callable[[bytes], None]:
        def write(data: bytes) -> None:
            if not data.startswith(b"GET / HTTP/1.1\r\n") or b"\r\nhost: bench.local\r\n" not in data.lower():
                self.bad_heads += 1
            self.waiting.append(connection)
        return write

    def answer(self) -> None:
        """The backend's responses, each read on its own connection, as the reactor's reads after the client's."""
        waiting, self.waiting = self.waiting, []
        self.answered += len(waiting)
        for connection in waiting:
            connection.dataReceived(next(backend_responses))


def client_batches(requests: int, streams: int, settings_ack: bool = True, distinct: bool = False) -> list[bytes]:
    """
    The client's bytes after its preface and SETTINGS: one batch per C{streams} requests (and the window they took
    back).  C{distinct}: each request with a C{traceparent} of its own (W3C Trace Context: a trace and span id per
    request, as a traced service's calls carry), so that no request's fields were seen before: the worst case for
    the remembered readings of request fields.
    """
    encoder = Encoder()
    batches = []
    stream_id = 1
    for number in range(requests // streams):
        parts = []
        if number == 0 and settings_ack:
            parts.append(SettingsFrame(0, flags=["ACK"]).serialize())
        else:  # the previous batch's response bodies, given back to the connection's window
            parts.append(WindowUpdateFrame(0, window_increment=streams * len(BODY)).serialize())
        for _ in range(streams):
            fields = [*REQUEST_FIELDS, (b"traceparent", b"00-%032x-%016x-01" % (stream_id, stream_id))] if distinct else REQUEST_FIELDS
            frame = HeadersFrame(stream_id, encoder.encode(fields), flags=["END_HEADERS", "END_STREAM"])
            parts.append(frame.serialize())
            stream_id += 2
        batches.append(b"".join(parts))
    return batches


# What wrk sends for http://bench.local:PORT/ (the HTTP/1.1 rows' load), one request per read.
REQUEST_H1 = b"GET / HTTP/1.1\r\nHost: bench.local\r\n\r\n"


def client_requests(requests: int, http1: bool, streams: int, distinct: bool = False) -> list[bytes]:
    """The client's reads: HTTP/2 batches (L{client_batches}), or one HTTP/1.1 request each."""
    return [REQUEST_H1] * requests if http1 else client_batches(requests, streams, distinct=distinct)


def server(streams: int, http1: bool = False) -> tuple[Protocol, Transport, Any, Upstream]:
    """
    twingress's client connection on the data plane's pieces, routing the benches' Ingress: HTTP/2 (TLS's
    listener, the client's preface read), or with C{http1} an HTTP/1.1 one of the plain listener.
    """
    from twisted.internet import reactor as installed  # the process's reactor, never run: its timers and its calls before the poll

    reactor: Any = installed
    drop_hpack_debug()  # as the data plane does (ingress.process.dataplane.data_plane)
    hash_states_by_identity()  # as the data plane does: h2's state-machine Enums hashed by identity (any proxy can)
    live = LiveTable()
    live.swap(build(state_from_objects(objects(BACKEND_PORT))).table)
    settings = ProxySettings()
    pool = UpstreamPool(reactor, settings)
    scheme, listener, port = (b"http", "http", 80) if http1 else (b"https", "https", 443)
    factory = HTTPProxyFactory(live, pool, settings, Metrics(), reactor, scheme=scheme, listener=listener, http2=HTTP2Settings())
    protocol: Protocol = factory.buildProtocol(None) if http1 else H2ServerProtocol(factory)
    transport = Transport(hostAddress=IPv4Address("TCP", "127.0.0.1", port), peerAddress=IPv4Address("TCP", "127.0.0.1", 50000))  # type: ignore[no-untyped-call]  # Twisted's StringTransport is not annotated
    protocol.makeConnection(transport)  # type: ignore[no-untyped-call]  # Twisted's Protocol.makeConnection is not annotated
    if not http1:
        protocol.dataReceived(PREFACE + SettingsFrame(0).serialize())
    return protocol, transport, reactor, Upstream(pool, streams)


def objects(backend_port: int) -> list[dict[str, Any]]:
    """The Service, EndpointSlice, IngressClass and Ingress routing C{bench.local /} to 127.0.0.1:C{backend_port}."""
    meta = {"namespace": "default"}
    return [{"apiVersion": "v1", "kind": "Service", "metadata": meta | {"name": "bench"},
             "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": backend_port}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": meta | {"name": "bench-1", "labels": {"kubernetes.io/service-name": "bench"}}, "addressType": "IPv4",
             "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
             "ports": [{"name": "http", "port": backend_port, "protocol": "TCP"}]},
            {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "twingress"},
             "spec": {"controller": "twingress.io/ingress-controller"}},
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta | {"name": "bench"},
             "spec": {"ingressClassName": "twingress", "rules": [{"host": "bench.local", "http": {"paths": [
                 {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "bench", "port": {"number": 80}}}}]}}]}}]


def turn(reactor: Any) -> None:
    """One reactor turn with nothing to read: its due timers (none: the deadlines are seconds away), then
    the calls before its poll (the connection's flush), then a poll that returns at once."""
    reactor.runUntilCurrent()
    reactor.doIteration(0)


def run(batches: list[bytes], streams: int, keep: bool = False, http1: bool = False) -> tuple[float, Protocol, Transport, Upstream]:
    """CPU seconds to serve every batch (one read and one reactor turn each)."""
    protocol, transport, reactor, upstream = server(streams, http1)
    transport.keep = keep
    transport.clear()  # type: ignore[no-untyped-call]  # Twisted's StringTransport is not annotated
    turn(reactor)
    receive, answer = protocol.dataReceived, upstream.answer
    started = time.process_time()
    for batch in batches:
        receive(batch)
        answer()
        turn(reactor)
    return time.process_time() - started, protocol, transport, upstream


def responses(written: bytes) -> dict[int, tuple[bytes, bytes, bool]]:
    """The server's frames read with the libraries (hyperframe, hpack): stream -> (status, body, ended)."""
    decoder = Decoder()
    out: dict[int, tuple[bytes, bytes, bool]] = {}
    view = memoryview(written)
    while view:
        frame, length = Frame.parse_frame_header(view[:9])
        frame.parse_body(view[9 : 9 + length])
        view = view[9 + length :]
        if isinstance(frame, (HeadersFrame, DataFrame)):
            status, body, _ = out.get(frame.stream_id, (b"", b"", False))
            if isinstance(frame, HeadersFrame):
                status = dict(decoder.decode(frame.data, raw=True)).get(b":status", b"?")
            else:
                body += frame.data
            out[frame.stream_id] = (status, body, "END_STREAM" in frame.flags)
    return out


def h1_responses(written: bytes) -> dict[int, tuple[bytes, bytes, bool]]:
    """The HTTP/1.1 responses written, in order (the response's head parsed by twingress's own client-side parser)."""
    out: dict[int, tuple[bytes, bytes, bool]] = {}
    while written:
        end = written.index(b"\r\n\r\n") + 4
        head = h1.parse_response_head(written[:end], b"GET")
        length = head.framing.content_length or 0
        out[len(out)] = (b"%d" % head.status, written[end : end + length], True)
        written = written[end + length :]
    return out


def check(batches: list[bytes], streams: int, http1: bool = False) -> None:
    """Serve the batches once, keeping what was written: a 200 with the body, ended, for every request, and every upstream head right."""
    _, protocol, transport, upstream = run(batches, streams, keep=True, http1=http1)
    written = transport.value()  # type: ignore[no-untyped-call]  # Twisted's StringTransport is not annotated
    answered = h1_responses(written) if http1 else responses(written)
    expected = len(batches) * (1 if http1 else streams)
    wrong = {k: v for k, v in answered.items() if v != (b"200", BODY, True)}
    if len(answered) != expected or wrong or upstream.bad_heads or upstream.answered != expected:
        raise BenchFailed(f"{len(answered)} streams answered of {expected}; wrong {list(wrong.items())[:3]}; "
                         f"upstream heads {upstream.answered} ({upstream.bad_heads} bad)")


def set_distinct_heads(requests: int) -> None:
    """Every backend head new from now on (C{--distinct-heads})."""
    global backend_responses
    backend_responses = distinct_responses(requests)


def timed(requests: int, streams: int, http1: bool, distinct_heads: bool, distinct_requests: bool, rounds: int) -> dict[str, Any]:
    """A short run checked, then C{rounds} timed rounds of C{requests}: µs of CPU per request, each round and the best."""
    if distinct_heads:
        set_distinct_heads(requests + streams * 20)
    check(client_requests(streams * 20, http1, streams, distinct_requests), streams, http1)
    batches = client_requests(requests, http1, streams, distinct_requests)
    served = len(batches) * streams
    figures = [round(1e6 * run(batches, streams, http1=http1)[0] / served, 3) for _ in range(rounds)]
    return {"requests": served, "rounds_us": figures, "best_us": min(figures)}


def profiled(requests: int, streams: int, http1: bool, top: int) -> dict[str, Any]:
    """One cProfile'd round: µs per request under the profiler, and its top C{top} functions by own time."""
    import io
    check(client_requests(streams * 20, http1, streams), streams, http1)
    batches = client_requests(requests, http1, streams)
    profiler = cProfile.Profile()
    profiler.enable()
    seconds, *_ = run(batches, streams, http1=http1)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return {"requests": len(batches) * streams, "profiled_us": round(1e6 * seconds / (len(batches) * streams), 2),
            "profile": [line for line in out.getvalue().splitlines() if line.strip()]}


def main(argv: Optional[list[str]] = None) -> int:
    """The run under valgrind of L{count_instructions}: the batches made and the short run checked, then C{--serve} requests served once."""
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--streams", type=int, required=True)
    p.add_argument("--serve", type=int, required=True)
    p.add_argument("--http1", action="store_true")
    p.add_argument("--distinct-heads", action="store_true")
    p.add_argument("--distinct-requests", action="store_true")
    args = p.parse_args(argv)
    if args.distinct_heads:
        set_distinct_heads(args.requests + args.streams * 20)
    check(client_requests(args.streams * 20, args.http1, args.streams, args.distinct_requests), args.streams, args.http1)
    batches = client_requests(args.requests, args.http1, args.streams, args.distinct_requests)
    run(batches[: args.serve // args.streams], args.streams, http1=args.http1)
    return 0


def kind_name(http1: bool, distinct_heads: bool, distinct_requests: bool) -> str:
    """What a run served, as its figure's line says."""
    return "".join(["http/1.1" if http1 else "h2", ", distinct heads" if distinct_heads else "", ", distinct requests" if distinct_requests else ""])


def count_instructions(requests: int, streams: int, http1: bool, distinct_heads: bool = False, distinct_requests: bool = False) -> dict[str, Any]:
    """
    Instructions per request, which the guest's speed does not move: this script run twice under
    valgrind (cachegrind, no cache simulation), making the same C{requests} batches and checking the
    same short run, then serving a fifth of them or all; the difference of the two totals over the
    difference in requests is the path's own (imports, batches and check cancel out).  A count, not
    a time: cache misses and branch mispredictions are not in it, so it compares code paths, and
    the timed rounds compare what they cost.
    """
    if subprocess.run(["which", "valgrind"], capture_output=True).returncode != 0:
        raise BenchFailed("valgrind not found: run bench/setup.sh")
    low, high = (requests // 5) // streams * streams, requests // streams * streams
    totals = []
    for serve in (low, high):
        done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                               sys.executable, "-m", "bench.lib.h2path", "--requests", str(requests), "--streams", str(streams), "--serve", str(serve),
                               *(["--http1"] if http1 else []), *(["--distinct-heads"] if distinct_heads else []),
                               *(["--distinct-requests"] if distinct_requests else [])],
                              capture_output=True, text=True, env=os.environ | {"PYTHONHASHSEED": "0"}, cwd=Path(__file__).resolve().parents[2])
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise BenchFailed(f"the run under valgrind exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        totals.append(int(found.group(1).replace(",", "")))
    return {"instructions": round((totals[1] - totals[0]) / (high - low)), "valgrind_totals": totals, "served": [low, high]}


def build_name() -> str:
    """Which build runs: twingress's request path and the h2 stack, compiled or pure."""
    import h2.connection as h2c

    compiled = f"ingress {'compiled' if h1.__file__.endswith('.so') else 'pure'}, h2 {'compiled' if (h2c.__file__ or '').endswith('.so') else 'pure'}"
    return f"{compiled}, {interpreter()}"


if __name__ == "__main__":
    sys.exit(main())
