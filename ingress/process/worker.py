# -*- test-case-name: tests.proxy.test_workers -*-
"""
A worker process: the HTTP and HTTPS listeners, on sockets the primary opened, and a copy of the table.

The primary (L{ingress.process.pool}) runs C{python -m ingress.process.worker
INDEX PRIMARY_PID} (what C{ps} shows: a short line) with its configuration as
JSON on stdin (L{ingress.process.workersettings.WorkerConfig}), the channel on fd 3 and the
listening sockets on fds 4 and up, as each of its C{listeners} lists them (C{fds}).  Every table generation arrives
over the channel; its TLS contexts are built off the reactor thread (cached by
Secret version, as in a single process) and the table is swapped in with one
pointer.

The worker accepts no connection before its first table is live: until then
the shared sockets' accept queues are served by the other workers (or wait),
so a replacement worker never answers 404 or offers the default certificate
for a host the cluster has.

The worker also serves the table's stream and Gateway ports, on its sockets of
each port's C{SO_REUSEPORT} group, which the primary owns and sends over the
channel before the table that adds the port (L{ingress.process.streamsockets}
says why); it reports the ones it could not serve with every table it serves.

A worker drains on SIGTERM exactly as a single process does (the primary
sends it after its own shutdown delay), and exits at once when the channel
closes: a primary that died leaves no worker holding its ports.  It ignores
SIGINT: a terminal's Ctrl-C reaches the whole process group, and the primary
decides when its workers drain (after its shutdown delay, or its wait for a
successor with C{--handover}).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, Optional

from twisted.application.service import IService, MultiService
from twisted.internet.endpoints import AdoptedStreamServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpoint
from twisted.internet.threads import deferToThread
from twisted.logger import Logger, globalLogBeginner, textFileLogObserver
from twisted.protocols.haproxy import proxyEndpoint

from ingress.observe.accesslog import AccessLog
from ingress.observe.logs import in_worker, json_observer
from ingress.observe.metrics import Metrics, created_series
from ingress.observe.nginx_metrics import NginxMetrics, controller_identity, gauge_total, recorder, served_certificates
from ingress.process.channel import Channel, ChannelFactory
from ingress.process.dataplane import DataPlane, ListenerOptions, data_plane
from ingress.process.drain import GracefulShutdown
from ingress.process.workersettings import WorkerConfig, WorkerConfigError
from ingress.proxy.request.accesslines import FORMATS as ACCESS_LOG_FORMATS
from ingress.proxy.request.guards import Guards
from ingress.proxy.request.ratelimit import RemoteRates
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import StreamListeners
from ingress.routing.delta import TableChange, applied
from ingress.routing.streams import stream_key
from ingress.routing.table import RoutingTable
from ingress.runtime.live import LiveTable
from ingress.runtime.reactor import IProcessReactor
from ingress.runtime.sockets import DrainableListener
from ingress.speedups.heap import FrozenWatch, freeze_alive

log = Logger(namespace="ingress.process.worker")  # run as __main__ (python -m)

CHANNEL_FD = 3
FIRST_LISTENER_FD = 4
_PR_SET_PDEATHSIG = 1


class Worker:
    """The worker's side of the channel: tables and rate answers in, readiness, metrics and rate questions out."""

    def __init__(
        self,
        reactor: IProcessReactor,
        live: LiveTable,
        plane: DataPlane,
        streams: StreamListeners,
        metrics: Metrics,
        access_log: Any,
        rates: RemoteRates,
        listening: IService,
        parent: MultiService,
    ) -> None:
        self.reactor = reactor
        self.listening = listening  # the HTTP/HTTPS listeners: added to parent (so started) with the first live table
        self.parent = parent
        self.stopping = False  # set when this worker's own shutdown begins (then a closed channel is expected)
        self.live = live
        self.plane = plane
        self.streams = streams
        self.metrics = metrics
        self.access_log = access_log
        self.channel = Channel(self._received, self._primary_gone)
        self._latest: Optional[RoutingTable] = None  # the last table received: what a change applies to
        self.rates = rates
        rates.send = self.channel.send
        self.hand_over: Callable[[], None] = lambda: None  # the drain that leaves the shared sockets to a successor
        self.sockets: dict[tuple[str, int], list[socket.socket]] = {}  # stream ports' sockets received, not yet listened on

    def _received(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "table":
            self._latest = message[1]
            self._install(message[1])
        elif kind == "change":
            self._change(message[1])
        elif kind == "rate":
            self.rates.answered(message[1], message[2])
        elif kind == "metrics?":
            self.channel.send("metrics", message[1], list(self.metrics.registry.collect()))
        elif kind == "reopen" and self.access_log is not None:
            self.access_log.reopen()
        elif kind == "stream-sockets":
            self._given(message[1], self.channel.take_descriptors(message[2]))
        elif kind == "hand-over":  # the primary's successor serves the sockets: drain, leaving them as they are
            self.hand_over()

    def _given(self, key: tuple[str, int], fds: list[int]) -> None:
        """Our sockets of a stream port, kept until a table opens the port (they replace any not yet used)."""
        for sock in self.sockets.pop(key, []):
            sock.close()
        self.sockets[key] = [socket.socket(fileno=fd) for fd in fds]

    def take_sockets(self, key: tuple[str, int], route: Any) -> list[socket.socket]:
        """The stream listeners' L{ingress.proxy.streams.listeners.GivenSockets}: the port's sockets, now theirs."""
        given = self.sockets.pop(key, None)
        if not given:
            raise OSError(f"the primary has no socket for port {key[1]}")
        return given

    def _change(self, change: TableChange) -> None:
        """The next table as a change of the last one received (installed or still being prepared)."""
        latest = self._latest
        if latest is None or latest.generation != change.base:
            log.warn("table change {generation} is not for table {have}: asking for the whole table", generation=change.generation, have=latest.generation if latest else None)
            self.channel.send("resync")
            return
        self._latest = table = applied(latest, change)
        self._install(table)

    def _install(self, table: RoutingTable) -> None:
        if self.plane.store is None and not table.gateway_ports:
            self._swap(table, None)
            return
        deferToThread(self.plane.prepare, table).addCallbacks(  # contexts off the reactor thread
            lambda commit: self._swap(table, commit),
            lambda failure: log.failure("TLS contexts of table {generation} failed", failure, generation=table.generation),
        )

    def _swap(self, table: RoutingTable, commit: Any) -> None:
        if table.generation < self.live.table.generation:
            return  # an older one finished after a newer one
        if commit is not None:
            commit()
        self.live.swap(table)  # the stream listeners follow it at once
        freeze_alive()  # the table received, and all else alive, out of the collector's scans (ingress.speedups.heap)
        if self.listening.parent is None and not self.stopping:
            self.listening.setServiceParent(self.parent)  # listens only now: a connection accepted earlier would meet no table
            log.info("serving table {generation} on the shared listeners (pid {pid})", generation=table.generation, pid=os.getpid())
        listening = sorted(stream_key(protocol, port) for protocol, port in self.streams.listeners)
        self.channel.send("serving", table.generation, dict(self.streams.failures), listening)

    def shutting_down(self) -> None:
        """This worker's own stop (after its drain): the channel closing now is no news."""
        self.stopping = True

    def _primary_gone(self) -> None:
        if self.stopping:
            return
        log.warn("the primary process is gone: stopping")
        self.stopping = True
        if self.reactor.running:
            self.reactor.stop()




def main(argv: list[str]) -> None:
    index = int(argv[1])
    _die_with_parent(int(argv[2]))
    try:
        config = WorkerConfig.from_json(sys.stdin.buffer.read())  # written by the primary, then closed: a JSON blob in argv filled ps with it
    except WorkerConfigError as error:
        raise SystemExit(f"twingress worker: {error}") from None
    from twisted.internet import reactor as default_reactor

    reactor: Any = default_reactor
    observer = json_observer() if config.log_format == "json" else textFileLogObserver(sys.stdout)
    globalLogBeginner.beginLoggingTo([in_worker(observer, index, config.log_format)], redirectStandardIO=False)
    created_series(config.metrics_created)
    settings = config.settings
    metrics, live = Metrics(worker=index), LiveTable()
    top = MultiService()
    access_log = None
    if config.access_log != "off":
        access_log = AccessLog(reactor, config.access_log, ACCESS_LOG_FORMATS[config.access_log_format])
        access_log.setServiceParent(top)
        live.subscribe(access_log.use_table)  # the ConfigMap's log-format-upstream
    nginx = None
    if config.nginx_metrics:
        nginx = NginxMetrics(controller_identity(controller_class=config.ingress_class), lambda: gauge_total(metrics.open_connections))
        metrics.registry.register(nginx)
    names = [spec.name for spec in config.listeners]
    upstreams = UpstreamPool(reactor, settings)
    rates = RemoteRates(reactor)  # the rate limits are counted in the primary, for every worker
    plane = data_plane(
        reactor, live, upstreams, settings, metrics, recorder(access_log, nginx),
        ListenerOptions(
            http="http" in names, https="https" in names, tls_min_version=config.tls_min_version, tls_ciphers=config.tls_ciphers,
            behind_proxy=frozenset(spec.name for spec in config.listeners if spec.proxy_protocol), http2=config.http2,
        ),
        guards=Guards(reactor, rates),
    )
    if nginx is not None and plane.store is not None:
        nginx.certificates = served_certificates(metrics, plane.store)
    given: list[Worker] = []  # the worker, made below: the stream listeners take the primary's sockets from it
    streams = StreamListeners(
        reactor, upstreams, metrics, config.stream_interface, config.stream_drain_timeout, reuse_port=True,
        gateway_listener=plane.gateway_listener, gateway_interface=config.gateway_interface, announce=index == 0,
        sockets=lambda key, route: given[0].take_sockets(key, route),
    )
    live.subscribe(streams.apply)
    listening = MultiService()  # a child of top from the first table on (Worker._swap)
    listeners: list[IService] = []
    for spec in config.listeners:
        for fd in spec.fds:  # one socket of the listener's SO_REUSEPORT group, or several (L{ingress.process.adoption})
            endpoint: IStreamServerEndpoint = AdoptedStreamServerEndpoint(reactor, fd, spec.family)
            if spec.proxy_protocol:
                endpoint = proxyEndpoint(endpoint)
            service = DrainableListener(endpoint, plane.http if spec.name == "http" else plane.https)
            service.setServiceParent(listening)
            listeners.append(service)
    shutdown = GracefulShutdown(reactor, listeners, [streams, *plane.drainables], 0.0, config.drain_timeout, interrupt=False)  # the primary says when
    shutdown.setServiceParent(top)
    FrozenWatch(reactor, metrics.collector).setServiceParent(top)
    worker = Worker(reactor, live, plane, streams, metrics, access_log, rates, listening, top)
    given.append(worker)
    worker.hand_over = shutdown.hand_over
    reactor.adoptStreamConnection(CHANNEL_FD, socket.AF_UNIX, ChannelFactory(worker.channel))
    os.close(CHANNEL_FD)  # adopted as a copy
    top.startService()
    reactor.addSystemEventTrigger("before", "shutdown", worker.shutting_down)
    reactor.addSystemEventTrigger("before", "shutdown", top.stopService)
    reactor.run()


def _die_with_parent(primary_pid: int) -> None:
    """
    The kernel kills this worker if the primary dies without closing the channel first (a backstop).

    The primary's PID is passed in, not inferred: in a container the primary is PID 1 itself, so
    "my parent is PID 1" does not mean "my parent is gone" (it meant that only outside one).
    """
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != primary_pid:  # the primary died before prctl took effect: we were reparented
        raise SystemExit("twingress worker: the primary process is gone")


if __name__ == "__main__":
    main(sys.argv)
