# -*- test-case-name: tests.proxy.test_workers -*-
"""
The primary's worker processes (C{--workers N}): spawned with the shared
listening sockets, fed every table, replaced when they die, drained on SIGTERM.

Each worker is a L{ingress.process.worker} process with a channel
(L{ingress.process.channel}) on a socketpair.  The pool is the primary's
readiness (every worker serves a table), part of its /debug/routes (the
generation each worker serves) and of its /metrics (every worker's families,
summed by L{ingress.observe.merge}); for the drain it is a L{Drainable} whose
open count is the workers still running.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import sys
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Optional

from prometheus_client import Counter, Gauge
from prometheus_client.metrics_core import Metric
from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from ingress.observe.metrics import Metrics
from ingress.process.adoption import Shared, slot_sockets
from ingress.process.channel import Channel, ChannelFactory, encoded
from ingress.process.streamsockets import StreamSockets
from ingress.process.workersettings import WorkerConfig
from ingress.proxy.request.ratelimit import RequestRates
from ingress.routing.delta import table_change
from ingress.routing.table import RoutingTable
from ingress.runtime.reactor import IProcessReactor

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

FIRST_BACKOFF, MAX_BACKOFF = 0.5, 10.0
STABLE_SECONDS = 30.0  # a worker that lived this long restarts without waiting
METRICS_WAIT = 2.0  # a scrape waits this long for a worker's answer, then uses its last one


class WorkerSlot:
    """One of the N workers, across its restarts."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.pid = 0
        self.channel: Optional[Channel] = None
        self.generation = 0
        self.started = 0.0
        self.backoff = 0.0
        self.restarts = 0
        self.process: Any = None
        self.families: list[Metric] = []  # its last metrics answer
        self.retired: list[list[Metric]] = []  # the last answers of its dead predecessors: counters never go back
        self.waiting: dict[int, Deferred[None]] = {}
        self.respawn: Optional[IDelayedCall] = None
        self.served = False  # has served a table once: readiness does not flip while it is replaced
        self.stream_failures: dict[tuple[str, int], str] = {}  # stream ports its last table could not bind
        self.streams: list[str] = []  # the stream ports it listens on ("TCP/9000")
        self.holds: Tally[tuple[str, str]] = Tally()  # limit-connections places its requests hold (zone, address)

    @property
    def alive(self) -> bool:
        return self.process is not None


class WorkerPool(Service):
    """C{count} worker processes sharing C{sockets}; the primary's live table goes to each."""

    name = "workers"

    def __init__(
        self,
        reactor: IProcessReactor,
        count: int,
        listeners: Shared,
        config: WorkerConfig,
        metrics: Metrics,
        announce: Callable[[str, Any, str], None],  # a shared listener's startup line: name, address, what follows
        streams: Optional[StreamSockets] = None,
    ) -> None:
        self.reactor = reactor
        self.announce = announce
        self.listeners = listeners
        self.streams = streams  # the stream and Gateway ports' sockets, sent to the workers over their channels
        if streams is not None:
            streams.sent = self._send_stream_sockets
        self.config = config
        self.slots = [WorkerSlot(i) for i in range(count)]
        self.table: Optional[RoutingTable] = None
        self.stopping = False
        self.shared = False  # a successor holds the sockets too (L{ingress.process.handover}): the workers' drain leaves them be
        self._ids = itertools.count(1)
        self.rates = RequestRates()  # every worker's rate limits, counted here (L{ingress.proxy.request.ratelimit})
        registry = metrics.registry
        self.restarts = Counter("twingress_worker_restarts", "Worker processes replaced after they died", registry=registry)
        self.workers_gauge = Gauge("twingress_workers", "Worker processes configured (--workers)", registry=registry)
        self.up = Gauge("twingress_worker_up", "1 while a worker process runs and serves a table", ["worker"], registry=registry)
        self.workers_gauge.set(count)

    # -- lifecycle

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        for spec, sockets in self.listeners:  # the startup lines of the listeners the workers share
            self.announce(spec.name, sockets[0].getsockname(), f", served by {len(self.slots)} worker processes")

    def startService(self) -> None:
        super().startService()
        for slot in self.slots:
            self._spawn(slot)
        self.reactor.callWhenRunning(self._take_usr1)

    def stopService(self) -> None:
        """Stopped without a drain (twistd, tests): end the workers now."""
        super().stopService()
        self.stopping = True
        self.abort_all()

    def _take_usr1(self) -> None:
        previous = signal.getsignal(signal.SIGUSR1)

        def on_usr1(number: int, frame: Any) -> None:
            self.reactor.callFromThread(self._broadcast, "reopen")
            if callable(previous):
                previous(number, frame)

        signal.signal(signal.SIGUSR1, on_usr1)

    def _spawn(self, slot: WorkerSlot) -> None:
        slot.respawn = None
        if self.stopping:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        channel = Channel(lambda message: self._received(slot, message), lambda: self._channel_lost(slot, channel))
        self.reactor.adoptStreamConnection(ours.fileno(), socket.AF_UNIX, ChannelFactory(channel))
        ours.close()
        child_fds: dict[int, Any] = {0: "w", 1: 1, 2: 2, 3: theirs.fileno()}
        listeners = []
        for (_, sockets), described in zip(self.listeners, self.config.listeners, strict=True):
            fds = []
            for sock in slot_sockets(sockets, slot.index, len(self.slots)):  # the slot's own sockets, kept across restarts
                fds.append(len(child_fds))  # 4, 5, ...: after stdin, stdout, stderr and the channel
                child_fds[fds[-1]] = sock.fileno()
            listeners.append(replace(described, fds=tuple(fds)))
        argv = [sys.executable, "-m", "ingress.process.worker", str(slot.index), str(os.getpid())]  # short: ps shows it
        slot.process = self.reactor.spawnProcess(
            _WorkerProtocol(self, slot), sys.executable, argv, env=dict(os.environ), childFDs=child_fds
        )
        theirs.close()
        slot.process.writeToChild(0, replace(self.config, listeners=tuple(listeners)).to_json())  # the configuration, on the worker's stdin
        slot.process.closeChildFD(0)
        slot.pid, slot.channel, slot.generation, slot.started = slot.process.pid, channel, 0, self.reactor.seconds()
        log.info("worker {index} started (pid {pid})", index=slot.index, pid=slot.pid)
        for key, group in (self.streams.groups if self.streams is not None else {}).items():  # the same sockets its predecessor had
            self._send_stream_share(slot, key, group.sockets)
        if self.table is not None:
            channel.send("table", self.table)

    def _ended(self, slot: WorkerSlot, reason: Failure) -> None:
        slot.process, slot.channel, slot.streams, slot.stream_failures = None, None, [], {}
        self._release_holds(slot)
        self.up.labels(str(slot.index)).set(0)
        if slot.families:  # a dead process's counts still count (counters never go back); its gauges describe nothing now
            slot.retired.append([family for family in slot.families if family.type != "gauge"])
            slot.families = []
        if self.stopping:
            log.info("worker {index} (pid {pid}) exited: {why}", index=slot.index, pid=slot.pid, why=reason.getErrorMessage())
            return
        slot.restarts += 1
        self.restarts.inc()
        lived = self.reactor.seconds() - slot.started
        slot.backoff = 0.0 if lived >= STABLE_SECONDS else min(MAX_BACKOFF, max(FIRST_BACKOFF, slot.backoff * 2))
        log.error(
            "worker {index} (pid {pid}) died: {why}; a new one starts in {delay}s",
            index=slot.index, pid=slot.pid, why=reason.getErrorMessage(), delay=slot.backoff,
        )
        for waiting in slot.waiting.values():
            if not waiting.called:
                waiting.callback(None)
        slot.waiting.clear()
        slot.respawn = self.reactor.callLater(slot.backoff, self._spawn, slot)

    def _channel_lost(self, slot: WorkerSlot, channel: Channel) -> None:
        if slot.channel is channel and slot.process is not None and not self.stopping:  # a draining worker closes it on exit
            with contextlib.suppress(ProcessExitedAlready):
                slot.process.signalProcess("KILL")  # a worker whose channel broke can no longer be fed tables

    # -- messages

    def prepare(self, table: RoutingTable) -> Callable[[], None]:
        """
        The builder's preparer (build thread): the message that makes C{table} the workers' next,
        found and pickled here; the commit queues it on the channels (the reactor writes it on its
        next turn, after the swap's listeners).  On the reactor thread, finding the change of a
        10k-Ingress table (its host mapping compared entry by entry) with the swap's listeners
        before it made an endpoint removal reach the workers p50 6.5 / p90 21 ms after the build
        (python -m bench endpoint-removal).
        Builds are one at a time and each commits before the next starts, so C{self.table} is the
        table the workers have.
        """
        data = self._message(table)
        return lambda: self._send(table, data)

    def publish(self, table: RoutingTable) -> None:
        """A new live table in the primary (reactor thread): sent unless its builder's commit sent it (L{prepare})."""
        if table is not self.table:
            self._send(table, self._message(table))

    def _message(self, table: RoutingTable) -> bytes:
        """C{table} as a change of the workers' one when it shares most of it (an EndpointSlice update), else whole; pickled."""
        change = table_change(self.table, table) if self.table is not None else None
        return encoded("change", change) if change is not None else encoded("table", table)

    def _send(self, table: RoutingTable, data: bytes) -> None:
        """C{table}'s message (L{_message}) to every running worker: it is theirs now."""
        self.table = table
        self._broadcast_encoded(data)

    def _send_stream_sockets(self, key: tuple[str, int], sockets: list[socket.socket]) -> None:
        """A stream port's group is new (or back): each running worker gets its share, before the table that adds the port."""
        for slot in self.slots:
            self._send_stream_share(slot, key, sockets)

    def _send_stream_share(self, slot: WorkerSlot, key: tuple[str, int], sockets: list[socket.socket]) -> None:
        share = slot_sockets(sockets, slot.index, len(self.slots))
        if slot.channel is not None and share:
            slot.channel.send_with_descriptors([sock.fileno() for sock in share], "stream-sockets", key, len(share))

    def _broadcast(self, *message: Any) -> None:
        self._broadcast_encoded(encoded(*message))

    def _broadcast_encoded(self, data: bytes) -> None:
        """One message to every running worker, pickled once."""
        for slot in self.slots:
            if slot.channel is not None:
                slot.channel.send_encoded(data)

    def _received(self, slot: WorkerSlot, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "resync":  # a change it could not apply (it missed the table before): the whole table
            if slot.channel is not None and self.table is not None:
                slot.channel.send("table", self.table)
        elif kind == "serving":
            slot.generation, slot.stream_failures, slot.streams = message[1], message[2], message[3]
            slot.served = True
            self.up.labels(str(slot.index)).set(1)
            if self.streams is not None:
                self.streams.served(min(each.generation for each in self.slots if each.alive))
        elif kind == "rate?":
            if slot.channel is not None:
                slot.channel.send("rate", message[1], self.rates.take(message[2], message[3]))
        elif kind == "conn?":
            entered = self.rates.enter(message[2], message[3], message[4])
            if entered:
                slot.holds[(message[2], message[4])] += 1
            if slot.channel is not None:
                slot.channel.send("rate", message[1], entered)
        elif kind == "conn-":
            self._leave(slot, (message[1], message[2]))
        elif kind == "metrics":
            slot.families = message[2]
            waiting = slot.waiting.pop(message[1], None)
            if waiting is not None and not waiting.called:  # a late answer: the scrape went on without it
                waiting.callback(None)

    def _leave(self, slot: WorkerSlot, hold: tuple[str, str]) -> None:
        if slot.holds[hold] > 0:
            slot.holds[hold] -= 1
            self.rates.leave(*hold)
        if slot.holds[hold] <= 0:
            del slot.holds[hold]

    def _release_holds(self, slot: WorkerSlot) -> None:
        """A worker is gone: the requests it had in progress hold no place under limit-connections."""
        for (zone, address), count in slot.holds.items():
            for _ in range(count):
                self.rates.leave(zone, address)
        slot.holds.clear()

    def collect(self) -> Deferred[list[list[Metric]]]:
        """Every worker's metric families (asked now; the last answer of one that is slow), and the retired ones."""
        asked = []
        for slot in self.slots:
            if slot.channel is not None:
                request = next(self._ids)
                waiting: Deferred[None] = Deferred()
                slot.waiting[request] = waiting
                waiting.addTimeout(METRICS_WAIT, self.reactor)
                waiting.addBoth(_forget, slot, request)
                slot.channel.send("metrics?", request)
                asked.append(waiting)

        def gathered(_: object) -> list[list[Metric]]:
            return [slot.families for slot in self.slots] + [old for slot in self.slots for old in slot.retired]

        return DeferredList(asked, consumeErrors=True).addCallback(gathered)

    def stream_failures(self) -> dict[tuple[str, int], str]:
        """The stream ports a running worker could not bind (as of the last table it served)."""
        merged: dict[tuple[str, int], str] = {}
        for slot in self.slots:
            if slot.alive:
                for key, detail in slot.stream_failures.items():
                    merged.setdefault(key, detail)
        return merged

    # -- admin

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """
        Ready once every worker has served a table.  A worker being replaced
        does not make the pod unready: the others serve, and connections wait
        in the shared accept queue meanwhile.
        """
        return all(slot.served for slot in self.slots), {"workers": self.to_json()}

    def to_json(self) -> list[dict[str, object]]:
        return [
            {"worker": s.index, "pid": s.pid, "alive": s.alive, "generation": s.generation, "restarts": s.restarts, "streams": s.streams}
            for s in self.slots
        ]

    # -- the drain (a Drainable)

    def drain(self) -> None:
        """
        After the primary's shutdown delay: every worker drains on its own (SIGTERM), then exits. The
        primary's copies of the listening sockets (kept to hand a replaced worker its slot's socket)
        close now, no worker being replaced any more: a socket then closes when its worker closes
        it, and a client connecting after that is refused at once. Kept open until the primary
        exits, each went on completing handshakes that no process would accept, and reset them
        when the primary exited (one request of every client sending at the time, on the test node).
        """
        self.stopping = True
        for slot in self.slots:
            if slot.respawn is not None and slot.respawn.active():
                slot.respawn.cancel()
            if self.shared and slot.channel is not None:
                slot.channel.send("hand-over")  # its drain leaves the sockets as they are: a successor serves them
            elif slot.process is not None:
                with contextlib.suppress(ProcessExitedAlready):
                    slot.process.signalProcess("TERM")
        for _, sockets in self.listeners:
            for sock in sockets:
                sock.close()
        if self.streams is not None:
            self.streams.close()

    def open_count(self) -> int:
        return sum(1 for slot in self.slots if slot.alive)

    def open_kinds(self) -> Mapping[str, int]:
        return {"worker process{es} draining": self.open_count()}

    def abort_all(self) -> int:
        alive = [slot for slot in self.slots if slot.process is not None]
        for slot in self.slots:
            if slot.respawn is not None and slot.respawn.active():
                slot.respawn.cancel()
        for slot in alive:
            with contextlib.suppress(ProcessExitedAlready):
                slot.process.signalProcess("KILL")
        return len(alive)


def _forget(result: object, slot: WorkerSlot, request: int) -> object:
    """A metrics request is over (answered or timed out): drop it, pass the result on."""
    slot.waiting.pop(request, None)
    return result


class _WorkerProtocol(ProcessProtocol):
    def __init__(self, pool: WorkerPool, slot: WorkerSlot) -> None:
        self.pool = pool
        self.slot = slot

    def processEnded(self, reason: Failure) -> None:
        self.pool._ended(self.slot, reason)
