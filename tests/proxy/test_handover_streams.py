"""
Issue 63: every listening socket handed over, not only HTTP and HTTPS.  Stream ports (TCP and UDP)
and Gateway listeners on ports of their own are owned by the primary and join the hand-over's
C{sockets} message: under traffic (new TCP connections without pause, one long-lived TCP connection,
UDP datagrams without pause, HTTP to a Gateway port) an upgrade refuses nothing, resets nothing,
and the sockets after it are those before it (their inodes, as ss shows them); the number of
workers may change.  A stream socket bound elsewhere than the successor's options say is not
adopted and the port is bound fresh.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.proxy import handover_support
from tests.proxy.gateway_support import GATEWAY_CLASS, gateway, route
from tests.proxy.handover_support import Node, Traffic, assert_nothing_lost, key_file, print_counts, start_node, wait_for
from tests.proxy.streams_support import external_stream
from tests.support import Manifests, free_port

echo, site, nodes = handover_support.echo, handover_support.site, handover_support.nodes


class StreamEchoes:
    """A TCP echo (every connection echoed until the client ends it, each in a thread) and a UDP echo, on 127.0.0.1."""

    def __init__(self) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.port, self.udp_port = self.tcp.getsockname()[1], self.udp.getsockname()[1]
        for target in (self._accept, self._serve_udp):
            threading.Thread(target=target, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.tcp.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(connection,), daemon=True).start()

    @staticmethod
    def _echo(connection: socket.socket) -> None:
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data)

    def _serve_udp(self) -> None:
        while True:
            try:
                data, peer = self.udp.recvfrom(2048)
            except OSError:
                return
            self.udp.sendto(data, peer)

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


@pytest.fixture
def echoes() -> Iterator[StreamEchoes]:
    servers = StreamEchoes()
    yield servers
    servers.close()


@dataclass
class StreamCounts:
    sent: int = 0
    answered: int = 0
    refused: int = 0
    reset: int = 0
    other: list[str] = field(default_factory=list)
    long_lived_rounds: int = 0
    long_lived_failed: list[str] = field(default_factory=list)
    datagrams: int = 0
    replies: int = 0


class StreamTraffic:
    """
    New TCP connections without pause (each: a line out, the same line back), one long-lived TCP
    connection sending line after line, and one UDP client sending datagram after datagram, each
    waited for up to 5 s: one not answered by then is lost.  (A successor with more workers binds
    the group's new sockets with its first table, before its new workers read them: a flow the
    kernel hashes to one of them waits in its queue until they do, a second or two.)
    """

    def __init__(self, tcp_port: int, udp_port: int) -> None:
        self.tcp_port, self.udp_port = tcp_port, udp_port
        self.counts = StreamCounts()
        self.stopping = threading.Event()
        targets = (self._open_each_time, self._open_each_time, self._long_lived, self._datagrams)
        self.threads = [threading.Thread(target=target, daemon=True) for target in targets]

    def __enter__(self) -> StreamTraffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> StreamCounts:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)
        return self.counts

    def wait_flowing(self, more: int = 30) -> None:
        target, rounds, replies = self.counts.answered + more, self.counts.long_lived_rounds + 5, self.counts.replies + 5
        wait_for(
            lambda: self.counts.answered >= target and self.counts.long_lived_rounds >= rounds and self.counts.replies >= replies,
            20, "stream traffic flowing",
        )

    def _open_each_time(self) -> None:
        while not self.stopping.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.tcp_port), timeout=10) as s:
                    s.sendall(b"ping\n")
                    data = s.recv(100)
                outcome = "answered" if data == b"ping\n" else "reset" if not data else f"answer {data[:20]!r}"
            except ConnectionRefusedError:
                outcome = "refused"
            except (ConnectionResetError, BrokenPipeError):
                outcome = "reset"
            except OSError as error:
                outcome = f"error: {error}"
            self.counts.sent += 1
            if outcome in ("answered", "refused", "reset"):
                setattr(self.counts, outcome, getattr(self.counts, outcome) + 1)
            else:
                self.counts.other.append(outcome)

    def _long_lived(self) -> None:
        with socket.create_connection(("127.0.0.1", self.tcp_port), timeout=10) as s:
            while not self.stopping.is_set():
                line = f"round {self.counts.long_lived_rounds}\n".encode()
                try:
                    s.sendall(line)
                    data = b""
                    while len(data) < len(line):
                        chunk = s.recv(100)
                        if not chunk:
                            raise ConnectionResetError("closed")
                        data += chunk
                except OSError as error:
                    self.counts.long_lived_failed.append(repr(error))
                    return
                self.counts.long_lived_rounds += 1

    def _datagrams(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5.0)
            while not self.stopping.is_set():
                message = f"datagram {self.counts.datagrams}".encode()
                self.counts.datagrams += 1
                s.sendto(message, ("127.0.0.1", self.udp_port))
                try:
                    while s.recvfrom(2048)[0] != message:  # a late reply to an earlier one is not this one's
                        pass
                except OSError:
                    continue
                self.counts.replies += 1


def inodes(port: int, kind: str = "t") -> set[int]:
    """The inodes of the sockets bound to C{port} as listeners (C{ss -l}, TCP C{t} or UDP C{u})."""
    out = subprocess.run(["ss", f"-l{kind}neH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return {int(found) for found in re.findall(r"\bino:(\d+)", out)}


def _handover(tmp: Path) -> tuple[str, ...]:
    return ("--handover", str(tmp / "handover.sock"), "--handover-key-file", str(key_file(tmp)), "--stream-interface", "127.0.0.1")


@pytest.mark.parametrize(("old_workers", "new_workers"), [("2", "2"), ("2", "1"), ("1", "2")])
def test_stream_ports_are_handed_over_under_traffic(
    site: Manifests, nodes: list[Node], tmp_path: Path, echoes: StreamEchoes, old_workers: str, new_workers: str
) -> None:
    tcp_port, udp_port = free_port(), free_port(kind=socket.SOCK_DGRAM)
    site.write("streams.yaml", external_stream("s-tcp", "TCP", tcp_port, echoes.port), external_stream("s-udp", "UDP", udp_port, echoes.udp_port))
    old = start_node(nodes, site, free_port(), *_handover(tmp_path), "--workers", old_workers)
    wait_for(lambda: len(inodes(tcp_port)) == int(old_workers) and len(inodes(udp_port, "u")) == int(old_workers), 20, "the stream ports bound", old)
    tcp_before, udp_before = inodes(tcp_port), inodes(udp_port, "u")
    with StreamTraffic(tcp_port, udp_port) as traffic:
        traffic.wait_flowing()
        new = start_node(nodes, site, old.http_port, *_handover(tmp_path), "--workers", new_workers)
        old.wait_log("handed over: no new connections here")
        traffic.wait_flowing()  # new connections and datagrams to the successor; the long-lived one still in the old process
        counts = traffic.stop()
    assert old.wait_exit() == 0, old.log()[-3000:]  # its last stream closed by the client: the drain is over
    print(
        f"\nhand-over of stream ports, --workers {old_workers} -> {new_workers}: TCP sent {counts.sent}, answered {counts.answered},"
        f" refused {counts.refused}, reset {counts.reset}, other {counts.other[:3]}; long-lived rounds {counts.long_lived_rounds},"
        f" failed {counts.long_lived_failed}; UDP datagrams {counts.datagrams}, replies {counts.replies}, lost {counts.datagrams - counts.replies}"
    )
    assert counts.refused == 0 and counts.reset == 0 and not counts.other and counts.answered == counts.sent > 0, counts
    assert not counts.long_lived_failed and counts.long_lived_rounds > 0, counts  # the old process finished its stream, as a drain does
    assert counts.datagrams - counts.replies <= 1, counts  # one in flight through the old process's session at its drain may be lost
    grown = int(new_workers) - int(old_workers)
    assert tcp_before <= inodes(tcp_port) and len(inodes(tcp_port)) == len(tcp_before) + max(grown, 0)  # the same sockets, and fresh ones for more workers
    assert udp_before <= inodes(udp_port, "u") and len(inodes(udp_port, "u")) == len(udp_before) + max(grown, 0)
    assert "stream:TCP/" in new.log() and "served from" in new.log()


def test_a_gateway_port_is_handed_over_under_traffic(site: Manifests, nodes: list[Node], tmp_path: Path, echo: handover_support.EchoBackend) -> None:
    gateway_port = free_port()
    site.write(
        "gateway.yaml", *site.service("gw-web", [echo.address]), GATEWAY_CLASS, gateway("gw", [{"name": "alt", "port": gateway_port, "protocol": "HTTP"}]),
        route("alt", [{"name": "gw", "sectionName": "alt"}], [{"backendRefs": [{"name": "gw-web", "port": 80}]}], ["w.test"]),
    )
    handover = (*_handover(tmp_path), "--gateway-interface", "127.0.0.1", "--workers", "2")
    old = start_node(nodes, site, free_port(), *handover)
    wait_for(lambda: len(inodes(gateway_port)) == 2, 20, "the Gateway port bound", old)
    before = inodes(gateway_port)
    with Traffic(gateway_port) as traffic:
        traffic.wait_answered(50)
        new = start_node(nodes, site, old.http_port, *handover)
        assert old.wait_exit() == 0, old.log()[-3000:]
        traffic.wait_answered(50)
        counts = traffic.stop()
    print_counts("hand-over of a Gateway listener port, --workers 2 -> 2", counts)
    assert_nothing_lost(counts)
    assert inodes(gateway_port) == before
    assert "gateway-http:TCP/" in new.log()


def test_a_stream_socket_bound_elsewhere_is_not_adopted(site: Manifests, nodes: list[Node], tmp_path: Path, echoes: StreamEchoes) -> None:
    """The successor's --stream-interface differs: the predecessor's socket is refused (logged), the port bound fresh where ours says."""
    tcp_port = free_port()
    site.write("streams.yaml", external_stream("s-tcp", "TCP", tcp_port, echoes.port))
    old = start_node(nodes, site, free_port(), *_handover(tmp_path))
    wait_for(lambda: len(inodes(tcp_port)) == 1, 20, "the stream port bound", old)
    before = inodes(tcp_port)
    new = start_node(nodes, site, old.http_port, *_handover(tmp_path), "--stream-interface", "127.0.0.2")  # the last one wins
    assert old.wait_exit() == 0
    assert f"the predecessor's stream:TCP/{tcp_port} socket is bound to ('127.0.0.1', {tcp_port}), not where this process's options say" in new.log()
    after = inodes(tcp_port)
    assert after and not after & before
    with socket.create_connection(("127.0.0.2", tcp_port), timeout=5) as s:
        s.sendall(b"here\n")
        assert s.recv(100) == b"here\n"


def _get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_the_metrics_listener_serves_metrics_alone_and_is_handed_over(site: Manifests, nodes: list[Node], tmp_path: Path) -> None:
    """--metrics: /metrics only (the admin's exposition), every other path 404; scraped without pause through a hand-over, nothing refused or reset."""
    metrics_port = free_port()
    handover = (*_handover(tmp_path), "--workers", "2", "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1")
    old = start_node(nodes, site, free_port(), *handover)
    scrape = _get(metrics_port, "/metrics")
    assert scrape.startswith(b"HTTP/1.1 200") and b"twingress_workers 2.0" in scrape
    for path in ("/", "/debug/routes", "/readyz", "/metrics/x"):
        assert _get(metrics_port, path).startswith(b"HTTP/1.1 404"), path
    assert f"metrics on 127.0.0.1:{metrics_port} (--metrics tcp:{metrics_port}:interface=127.0.0.1): /metrics only" in old.log()
    before = inodes(metrics_port)
    outcomes: list[str] = []
    stopping = threading.Event()

    def scrapes() -> None:
        while not stopping.is_set():
            try:
                answer = _get(metrics_port, "/metrics")
                outcomes.append("answered" if answer.startswith(b"HTTP/1.1 200") else f"other: {answer[:300]!r}")
            except ConnectionRefusedError:
                outcomes.append("refused")
            except OSError as error:
                outcomes.append(f"reset: {error!r}")

    thread = threading.Thread(target=scrapes, daemon=True)
    thread.start()
    try:
        wait_for(lambda: outcomes.count("answered") >= 20, 20, "scrapes answered")
        start_node(nodes, site, old.http_port, *handover)
        assert old.wait_exit() == 0, old.log()[-3000:]
        answered = outcomes.count("answered")
        wait_for(lambda: outcomes.count("answered") >= answered + 20, 20, "scrapes answered by the successor")
    finally:
        stopping.set()
        thread.join(30)
    counts = {outcome: outcomes.count(outcome) for outcome in set(outcomes)}
    print(f"\nhand-over of the --metrics listener: {counts}")
    assert set(counts) == {"answered"}, counts
    assert inodes(metrics_port) == before
