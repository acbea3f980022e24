"""
What the stream tests share: routes built directly (no Kubernetes), real
upstream servers on loopback sockets in the test's reactor, and waiting.

The proxy under test runs in the test's own reactor (a L{StreamListeners} fed
tables by hand); clients are plain blocking sockets run in threads, so the
reactor keeps turning while they wait.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import DatagramProtocol, Factory, Protocol
from twisted.internet.task import deferLater
from zope.interface import implementer

from ingress.model import ObjectRef
from ingress.observe.metrics import Metrics
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import StreamListeners
from ingress.routing.streams import StreamRoute
from ingress.routing.table import RoutingTable
from ingress.routing.upstream import Upstream
from tests.waiting import eventually_d

Address = tuple[str, int]


def stream_route(
    protocol: str,
    port: int,
    targets: Sequence[Address],
    name: str = "default/stream",
    proxy_protocol: Optional[str] = None,
    idle_timeout: float = 60.0,
) -> StreamRoute:
    """A route as the builder would make it for a StreamIngress C{name} (upstream key from the name)."""
    namespace, object_name = name.split("/")
    return StreamRoute(
        protocol=protocol,
        port=port,
        name=name,
        source=ObjectRef("StreamIngress", namespace, object_name),
        upstream=Upstream(key=f"{name}-upstream", endpoints=tuple(targets)),
        proxy_protocol=proxy_protocol,
        idle_timeout=idle_timeout,
    )


def table(*routes: StreamRoute) -> RoutingTable:
    """A routing table with just these stream routes."""
    return RoutingTable(streams={r.key: r for r in routes})


def stream_listeners(metrics: Metrics, **settings: Any) -> StreamListeners:
    """Listeners on 127.0.0.1 in the test's reactor, with a pool of their own (C{settings}) and a 0.5 s drain."""
    pool = UpstreamPool(reactor, ProxySettings(**settings))
    return StreamListeners(reactor, pool, metrics, interface="127.0.0.1", drain_timeout=0.5)


@pytest.fixture
def listeners(metrics: Metrics) -> Iterator[StreamListeners]:
    """Stream listeners whose pool gives up connecting after 1 s and skips a failed endpoint for 30 s."""
    manager = stream_listeners(metrics, connect_timeout=1.0, fail_timeout=30.0)
    yield manager
    manager.stop()


@pytest.fixture
def metrics() -> Metrics:
    """A registry of the test's own."""
    return Metrics()


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    """Listening ports (TCP or UDP) a test makes, closed after it."""
    ports: list[Any] = []
    yield ports
    for port in ports:
        port.stopListening()


def sleep(seconds: float) -> Deferred[Any]:
    return deferLater(reactor, seconds, lambda: None)


def until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Deferred[Any]:
    """Let the reactor run until C{predicate()} holds (generous: a loaded machine is slow, not wrong): L{eventually_d}."""
    return eventually_d(reactor, predicate, what, timeout=timeout, interval=0.01)


@implementer(IHalfCloseableProtocol)
class EchoProtocol(Protocol):
    """
    Echoes every byte; says its name first if the factory has one.  On the
    client's EOF it sends C{b"<eof>"} and closes: the half-close test's reply.
    """

    def connectionMade(self) -> None:
        self.transport.registerProducer(self.transport, True)  # a full send buffer stops our reads
        self.factory.connections.append(self)
        if self.factory.name:
            self.transport.write(self.factory.name + b"\n")

    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)

    def readConnectionLost(self) -> None:
        self.transport.write(b"<eof>")
        self.transport.loseConnection()

    def writeConnectionLost(self) -> None:
        pass


class EchoFactory(Factory):
    protocol = EchoProtocol
    noisy = False

    def __init__(self, name: bytes = b"") -> None:
        self.name = name
        self.connections: list[EchoProtocol] = []


def tcp_echo(host: str = "127.0.0.1", name: bytes = b"") -> tuple[Any, EchoFactory]:
    """A listening echo server on a free port of C{host}: (port object, factory)."""
    factory = EchoFactory(name)
    port = reactor.listenTCP(0, factory, interface=host)
    return port, factory


class UDPEcho(DatagramProtocol):
    """Answers each datagram with C{prefix + datagram}, to whoever sent it."""

    noisy = False

    def __init__(self, prefix: bytes = b"") -> None:
        self.prefix = prefix
        self.peers: set[Address] = set()

    def datagramReceived(self, data: bytes, addr: Address) -> None:
        self.peers.add(addr)
        self.transport.write(self.prefix + data, addr)


def udp_echo(host: str = "127.0.0.1", prefix: bytes = b"") -> tuple[Any, UDPEcho]:
    echo = UDPEcho(prefix)
    return reactor.listenUDP(0, echo, interface=host, maxPacketSize=65535), echo


def recv_all(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    """Read until EOF (or C{limit} bytes)."""
    chunks, size = [], 0
    while size < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def metric(metrics: Any, name: str, **labels: str) -> float:
    """A sample's value from the registry (0 if it has none yet)."""
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


if __name__ == "__main__":
    # python -m tests.proxy.streams_support PORT: the TCP echo server alone, for a proxy in another process
    import sys

    echo_factory = EchoFactory()
    reactor.listenTCP(int(sys.argv[1]), echo_factory, interface="127.0.0.1")
    reactor.run()


# -- for tests of a twistd process: manifests, and blocking peers in threads


def external_stream(name: str, protocol: str, listen: int, port: int) -> dict[str, Any]:
    """A StreamIngress manifest to a host and port outside the cluster."""
    return {
        "apiVersion": "twingress.io/v1alpha1",
        "kind": "StreamIngress",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"protocol": protocol, "listen": listen, "external": True, "upstream": {"host": "127.0.0.1", "port": port}},
    }


class BlockingEchoes:
    """Blocking TCP and UDP servers in this process that answer with their name (TCP: then close)."""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp_port = self.udp.getsockname()[1]
        for target in (self._serve_tcp, self._serve_udp):
            threading.Thread(target=target, daemon=True).start()

    def _serve_tcp(self) -> None:
        while True:
            try:
                connection, _ = self.tcp.accept()
            except OSError:
                return
            with connection:
                connection.sendall(self.name)

    def _serve_udp(self) -> None:
        while True:
            try:
                data, peer = self.udp.recvfrom(2048)
            except OSError:
                return
            self.udp.sendto(self.name + b":" + data, peer)

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


def tcp_answer(port: int) -> bytes:
    """What a new TCP connection to the port reads first, or the error's name in angle brackets."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return s.recv(100)
    except OSError as error:
        return f"<{type(error).__name__}>".encode()


def udp_answer(port: int) -> bytes:
    """The answer to one datagram from a new socket, or the error's name in angle brackets."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        s.sendto(b"hi", ("127.0.0.1", port))
        try:
            return s.recvfrom(2048)[0]
        except OSError as error:
            return f"<{type(error).__name__}>".encode()


def stream_ingress(name: str, listen: int, ns: str = "default", created: str = "2024-01-01T00:00:00Z", **spec: Any) -> dict:
    """A StreamIngress manifest to the Service C{db} (port 80 unless C{spec} says otherwise)."""
    spec = {"listen": listen, "upstream": {"service": "db", "port": 80}, **spec}
    metadata = {"name": name, "namespace": ns, "creationTimestamp": created}
    return {"apiVersion": "twingress.io/v1alpha1", "kind": "StreamIngress", "metadata": metadata, "spec": spec}


def many_clients(port: int, clients: int, rounds: int) -> list[list[bytes]]:
    """C{clients} sockets in threads, started together, each sending C{rounds} datagrams naming itself."""
    start = threading.Barrier(clients)
    answers: list[list[bytes]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []

    def client(index: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(10)
            start.wait()
            try:
                for n in range(rounds):
                    s.sendto(f"client {index} message {n}".encode(), ("127.0.0.1", port))
                    answers[index].append(s.recvfrom(65535)[0])
            except BaseException as error:  # reported by the test, with the rest
                errors.append(error)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    return answers
