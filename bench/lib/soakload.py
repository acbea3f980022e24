"""The soak benchmark's load: one asyncio process, three kinds of traffic at bounded rates.

Started by the soak scenario (bench/scenarios/soak.py) as ``python -m bench.lib.soakload`` (its own interpreter, so neither side's GIL slows the
other's clocks), it reads a JSON config (ports, hosts, the CA, rates, duration) and sends, until the
duration is over or SIGTERM:

- ``keepalive``: ``connections`` HTTP/1.1 connections kept open, each sending one ``GET`` every
  ``connections / keepalive_rate`` seconds (open loop, random phase) to a random plain host;
- ``new-conn``: ``new_conn_rate`` requests/s, each on a new TCP connection (``Connection: close``);
- ``tls``: ``tls_rate`` requests/s, each on a new TLS connection (full handshake, SNI and ``Host``
  a random TLS host, the chain verified against the bench's CA).

A request is ok when it answers 200 from one of the echo backends (their ``X-Backend`` header).
Latencies go into a log-bucketed histogram (2% wide buckets), so memory stays flat over hours;
failures are kept with their monotonic start and end times (CLOCK_MONOTONIC is system-wide, so the
parent can match them against the times it killed a backend). At the end the results are written
as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import signal
import ssl
import sys
import time
from pathlib import Path
from typing import Any, Optional

KINDS = ("keepalive", "new-conn", "tls")
BUCKET = math.log(1.02)  # histogram buckets are 2% wide
MAX_FAILURE_RECORDS = 20000
MAX_IN_FLIGHT = 64  # per stream of new connections: beyond it a tick is skipped (and counted)
REQUEST_TIMEOUT = 10.0
# what one exchange may raise (OSError covers TimeoutError and ssl.SSLError; ValueError, IndexError: a bad response)
EXCHANGE_ERRORS = (OSError, ValueError, IndexError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)


def bucket_of(seconds: float) -> int:
    """The histogram bucket of a latency (bucket b holds [1.02**b, 1.02**(b+1)) microseconds)."""
    return int(math.log(max(seconds * 1e6, 1.0)) / BUCKET)


def percentile_ms(histogram: dict[str, int], q: float) -> Optional[float]:
    """The q-th percentile (0..100) of a bucketed histogram, in ms (the bucket's upper edge)."""
    total = sum(histogram.values())
    if not total:
        return None
    rank = max(1, math.ceil(total * q / 100.0))
    seen = 0
    for key in sorted(histogram, key=int):
        seen += histogram[key]
        if seen >= rank:
            return math.exp((int(key) + 1) * BUCKET) / 1000.0
    raise AssertionError("unreachable")


class Stats:
    """Per-kind counts and latency histograms, and the failures with their times."""

    def __init__(self) -> None:
        self.ok = dict.fromkeys(KINDS, 0)
        self.failed = dict.fromkeys(KINDS, 0)
        self.skipped = dict.fromkeys(KINDS, 0)
        self.histograms: dict[str, dict[str, int]] = {k: {} for k in KINDS}
        self.failures: list[tuple[str, float, float, str]] = []
        self.failures_dropped = 0

    def done(self, kind: str, started: float, error: Optional[str]) -> None:
        ended = time.monotonic()
        if error is None:
            self.ok[kind] += 1
            key = str(bucket_of(ended - started))
            self.histograms[kind][key] = self.histograms[kind].get(key, 0) + 1
            return
        self.failed[kind] += 1
        if len(self.failures) < MAX_FAILURE_RECORDS:
            self.failures.append((kind, started, ended, error))
        else:
            self.failures_dropped += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failed": self.failed,
            "skipped": self.skipped,
            "histograms": self.histograms,
            "failures": self.failures,
            "failures_dropped": self.failures_dropped,
        }


# --- one exchange --------------------------------------------------------------------------------


def request_bytes(host: str, close: bool) -> bytes:
    connection = "Connection: close\r\n" if close else ""
    return f"GET /soak HTTP/1.1\r\nHost: {host}\r\n{connection}\r\n".encode()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes], bytes]:
    """One HTTP/1.1 response: status, lower-cased headers, body (Content-Length, chunked or until close)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if b"content-length" in headers:
        body = await reader.readexactly(int(headers[b"content-length"]))
    elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await reader.readexactly(size + 2))
        await reader.readuntil(b"\r\n")  # no trailers from the echo backend
        body = b"".join(p[:-2] for p in parts)
    else:
        body = await reader.read()
    return status, headers, body


def verdict(status: int, headers: dict[bytes, bytes], backends: frozenset[bytes]) -> Optional[str]:
    """None when the answer is a 200 from an echo backend, else what was wrong."""
    if status != 200:
        return f"status {status}"
    if headers.get(b"x-backend") not in backends:
        return "200 not from an echo backend"
    return None


def describe(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, asyncio.IncompleteReadError):
        return "connection closed before the response ended"
    return f"{type(error).__name__}: {error}"[:200]


# --- the three streams ---------------------------------------------------------------------------


class Load:
    """The running load: its config, its stats, and the stop flag."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.stats = Stats()
        self.stopping = asyncio.Event()
        self.backends = frozenset(name.encode() for name in config["backends"])
        self.tls_context = ssl.create_default_context(cadata=config["ca_pem"])

    async def sleep_until(self, when: float) -> bool:
        """Sleep until WHEN (monotonic); False when the load stopped meanwhile."""
        delay = when - time.monotonic()
        if delay > 0:
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
            except TimeoutError:
                pass
        return not self.stopping.is_set()

    async def keepalive(self, period: float) -> None:
        """One keep-alive connection: a request every PERIOD seconds, reconnecting after a failure."""
        hosts, port = self.config["http_hosts"], self.config["http_port"]
        reader: Optional[asyncio.StreamReader] = None
        writer: Optional[asyncio.StreamWriter] = None
        next_at = time.monotonic() + random.uniform(0, period)
        while await self.sleep_until(next_at):
            next_at += period
            started, error = time.monotonic(), None
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), REQUEST_TIMEOUT)
                assert reader is not None
                writer.write(request_bytes(random.choice(hosts), close=False))
                status, headers, _ = await asyncio.wait_for(read_response(reader), REQUEST_TIMEOUT)
                error = verdict(status, headers, self.backends)
                if headers.get(b"connection", b"").lower() == b"close":
                    error = error or "the proxy closed a keep-alive connection"
            except EXCHANGE_ERRORS as e:
                error = describe(e)
            self.stats.done("keepalive", started, error)
            if error is not None and writer is not None:
                writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    async def one_shot(self, kind: str) -> None:
        """One request on a new connection (TLS for kind "tls"), then close."""
        tls = kind == "tls"
        host = random.choice(self.config["tls_hosts" if tls else "http_hosts"])
        port = self.config["https_port" if tls else "http_port"]
        started, error, writer = time.monotonic(), None, None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=self.tls_context if tls else None, server_hostname=host if tls else None),
                REQUEST_TIMEOUT,
            )
            writer.write(request_bytes(host, close=True))
            status, headers, _ = await asyncio.wait_for(read_response(reader), REQUEST_TIMEOUT)
            error = verdict(status, headers, self.backends)
        except EXCHANGE_ERRORS as e:
            error = describe(e)
        finally:
            if writer is not None:
                writer.close()
        self.stats.done(kind, started, error)

    async def stream(self, kind: str, rate: float) -> None:
        """RATE new connections per second (open loop); a tick with MAX_IN_FLIGHT still open is skipped."""
        if rate <= 0:
            return
        in_flight: set[asyncio.Task[None]] = set()
        next_at = time.monotonic()
        while await self.sleep_until(next_at):
            next_at += 1.0 / rate
            if len(in_flight) >= MAX_IN_FLIGHT:
                self.stats.skipped[kind] += 1
                continue
            task = asyncio.ensure_future(self.one_shot(kind))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight, timeout=REQUEST_TIMEOUT + 1)

    async def run(self) -> None:
        c = self.config
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        loop.call_later(c["duration"], self.stopping.set)
        period = c["connections"] / c["keepalive_rate"] if c["keepalive_rate"] > 0 else 0.0
        tasks = [self.keepalive(period) for _ in range(c["connections"] if period else 0)]
        tasks += [self.stream("new-conn", c["new_conn_rate"]), self.stream("tls", c["tls_rate"])]
        await asyncio.gather(*tasks)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, required=True, help="JSON written by the soak scenario")
    p.add_argument("--out", type=Path, required=True, help="where the results go (JSON)")
    args = p.parse_args(argv)
    load = Load(json.loads(args.config.read_text()))
    asyncio.run(load.run())
    args.out.write_text(json.dumps(load.stats.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
