"""
The floor of a Twisted reverse proxy on this machine: bytes spliced, nothing parsed.

Each client connection gets one upstream connection of its own and every read
is written to the other side as it is, so a keep-alive HTTP benchmark through it
measures what Twisted's reactor, its transports and the kernel cost per request
with no HTTP work at all.  No proxy built on Twisted can do a request for less
CPU than this (C{python -m bench floor-library} runs it as C{python -m bench.lib.splicefloor PORT BACKEND_PORT}).

``--batched`` writes through twingress's send batch (ingress.speedups.fastwrite)
instead of Twisted's write queue, as twingress does.  ``--tls CERT KEY`` terminates
TLS from clients first (PEM files), with twingress's TLS transport when batched
(ingress.speedups.tlsdirect) and Twisted's own otherwise: the floor of keep-alive
HTTPS, for a load such as ``wrk https://localhost:PORT/``.  ``--churn N`` visits N
objects of a 10 MB working set on each client read: Python work between the TLS calls,
to see what a proxy's own work does to their cost (floor-library's C{--floor-churn}).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from twisted.internet import protocol, reactor, ssl
from twisted.protocols.tls import TLSMemoryBIOFactory

from ingress.speedups.fastwrite import direct_writer
from ingress.speedups.tlsdirect import DirectTLSFactory

BATCHED = False
# --churn: objects of a working set far larger than the caches, visited per request (floor-library --floor-churn)
WORKSET: list[dict[str, int]] = []
CHURN = 0
_offset = [0]


def churn() -> None:
    """
    Python work between a request's TLS calls, as a proxy's own request work is: it visits
    C{CHURN} objects of a 50,000-object working set (about 10 MB), a different run of them each
    time, so what the TLS calls left in the caches is gone when the next one comes.
    """
    start = _offset[0]
    total = 0
    for item in WORKSET[start : start + CHURN]:
        total += item["a"]
    _offset[0] = (start + CHURN) % (len(WORKSET) - CHURN)


def writer(transport: Any) -> Callable[[bytes], None]:
    return direct_writer(transport) if BATCHED else transport.write  # type: ignore[no-any-return]


class Upstream(protocol.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client

    def connectionMade(self) -> None:
        self.transport.setTcpNoDelay(True)  # type: ignore[union-attr]
        self.write = writer(self.transport)
        self.client.upstream_ready(self)

    def dataReceived(self, data: bytes) -> None:
        self.client.write(data)

    def connectionLost(self, reason: object = None) -> None:
        self.client.transport.loseConnection()  # type: ignore[union-attr]


class Client(protocol.Protocol):
    def __init__(self, backend: tuple[str, int]) -> None:
        self.backend = backend
        self.upstream: Optional[Upstream] = None
        self.pending: list[bytes] = []

    def connectionMade(self) -> None:
        self.transport.setTcpNoDelay(True)  # type: ignore[union-attr]
        self.write = writer(self.transport)
        protocol.ClientCreator(reactor, Upstream, self).connectTCP(*self.backend)

    def upstream_ready(self, upstream: Upstream) -> None:
        self.upstream = upstream
        for data in self.pending:
            upstream.write(data)
        self.pending = []

    def dataReceived(self, data: bytes) -> None:
        if CHURN:
            churn()
        if self.upstream is None:
            self.pending.append(data)
        else:
            self.upstream.write(data)

    def connectionLost(self, reason: object = None) -> None:
        if self.upstream is not None:
            self.upstream.transport.loseConnection()  # type: ignore[union-attr]


class Splice(protocol.Factory):
    def __init__(self, backend: tuple[str, int]) -> None:
        self.backend = backend

    def buildProtocol(self, addr: object) -> Client:
        return Client(self.backend)


def main() -> None:
    global BATCHED, CHURN
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("backend_port", type=int)
    parser.add_argument("--batched", action="store_true", help="write through twingress's send batch")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="terminate TLS from clients with these PEM files")
    parser.add_argument("--churn", type=int, default=0, metavar="N", help="visit N objects of a ~10 MB working set per client read (0)")
    args = parser.parse_args()
    BATCHED = args.batched
    CHURN = args.churn
    if CHURN:
        WORKSET.extend({"a": i, "b": i * 2} for i in range(max(50000, 2 * CHURN)))
    factory: protocol.Factory = Splice(("127.0.0.1", args.backend_port))
    if args.tls:
        cert, key = (Path(path).read_bytes() for path in args.tls)
        options = ssl.PrivateCertificate.loadPEM(cert + key).options()
        factory = (DirectTLSFactory if BATCHED else TLSMemoryBIOFactory)(options, False, factory)
    reactor.listenTCP(args.port, factory, interface="127.0.0.1")  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
