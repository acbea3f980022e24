# -*- test-case-name: tests.proxy.test_handover -*-
"""
The HTTP and HTTPS listening sockets a primary serves from: bound here, or taken over from a
predecessor (C{--handover}, L{ingress.process.handover}) and checked against our own options.

A socket received is adopted when it serves a listener we have, bound where our option says
(family, address, port); one bound elsewhere (the option changed between the two versions) is not
adopted: it is logged, our copy is closed (the predecessor's copy keeps it, and its queue, until the
predecessor drains) and the listener is bound fresh.  Every socket the predecessor had for a listener
is served: with fewer workers than sockets, a worker serves several; with more, the rest are bound
fresh into the same SO_REUSEPORT group.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Optional

from twisted.application.service import IService, MultiService
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python import usage

from ingress.process.drain import GracefulShutdown
from ingress.process.handover import HandoverListener
from ingress.process.handoverwire import EXCHANGE_SECONDS, NOT_YET, HandoverRefused, read_key
from ingress.process.takeover import HandoverFailed, Taken, take_listeners
from ingress.proxy.options import seconds
from ingress.runtime.live import LiveTable
from ingress.runtime.sockets import AdoptedListener, ListenerSpec, listen, open_listener, parse_listener, refuse_start, say_now

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

Shared = list[tuple[ListenerSpec, list[socket.socket]]]
LISTENERS = ("http", "https")  # the listeners of options; stream and Gateway ports' sockets are the stream sockets' (L{ingress.process.streamsockets})


def handover_key(path: str, key_file: Optional[str], key_secret: Optional[str] = None) -> Optional[bytes]:
    """
    With --handover, the key of --handover-key-file (both processes of a hand-over prove they hold it); None without,
    and None with --handover-key-secret (the key is read from the cluster once the client exists).
    """
    if key_secret and not path:
        raise usage.UsageError("--handover-key-secret needs --handover (the key guards its rendezvous)")
    if not path:
        return None
    if not path.startswith("@") and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise usage.UsageError(f"--handover {path!r}: its directory does not exist")
    if key_file and key_secret:
        raise usage.UsageError("give either --handover-key-file or --handover-key-secret, not both")
    if key_secret:
        return None
    if not key_file:
        raise usage.UsageError("--handover needs --handover-key-file or --handover-key-secret (the key both processes prove they hold)")
    try:
        return read_key(key_file)
    except ValueError as error:
        raise usage.UsageError(f"--handover-key-file {error}") from None


def handover_options(options: Any) -> None:
    """
    The hand-over's options, checked (a usage error each): C{handover-key} (None until read from the cluster with
    --handover-key-secret, whose NAMESPACE/NAME goes to C{handover-key-secret-ref}), C{handover-wait} in seconds,
    C{after-handover}.
    """
    path, secret = options["handover"], options["handover-key-secret"]
    options["handover-key"] = handover_key(path, options["handover-key-file"], secret)
    options["handover-wait"] = handover_wait(path, options["handover-wait"])
    if options["after-handover"] not in ("exit", "wait"):
        raise usage.UsageError(f"--after-handover must be exit or wait, not {str(options['after-handover'])[:40]!r}")
    options["handover-key-secret-ref"] = None
    if secret:
        if secret.count("/") != 1 or not all(secret.split("/")):
            raise usage.UsageError("--handover-key-secret takes NAMESPACE/NAME")
        if options["source"] == "manifests":
            raise usage.UsageError("--handover-key-secret needs a cluster (--kubeconfig, or in a pod its service account), not --manifests")
        options["handover-key-secret-ref"] = tuple(secret.split("/"))


HANDOVER_WAIT = 30.0  # a surge pod's start on a node whose image is pulled: scheduled, its container started, its first table live


def handover_wait(path: str, given: Optional[str]) -> float:
    """
    --handover-wait in seconds: C{HANDOVER_WAIT} by default with --handover, 0 without it (nothing to wait for);
    given without --handover it would be silently ignored, so it is an error.
    """
    if given is None:
        return HANDOVER_WAIT if path else 0.0
    if not path:
        raise usage.UsageError("--handover-wait needs --handover (a successor can take the sockets only there)")
    try:
        return seconds(str(given))
    except ValueError as error:
        raise usage.UsageError(f"--handover-wait: {error}") from None


def take_over(options: Mapping[str, Any]) -> tuple[Optional[Taken], bool]:
    """
    With C{--handover}: the predecessor's sockets (None when there is none, or it went away first) and
    whether a hand-over failed midway (then bind while the ports free up). A process at the rendezvous
    that does not authenticate stops the start: one line, exit status 1.
    """
    path = options["handover"]
    if not path:
        return None, False
    try:
        taken = _taken_in_turn(path, options["handover-key"])
    except HandoverRefused as error:
        refuse_start(f"twistd ingress: --handover {path}: refused the process there: {error}")
    except HandoverFailed as error:
        log.warn("handover: no sockets from the predecessor at {path} ({why}): binding fresh", path=path, why=str(error))
        return None, True
    if taken is None:
        log.info("handover: no predecessor at {path}: binding fresh", path=path)
    else:
        log.info("handover: received {count} listening sockets from the predecessor at {path}", count=len(taken.sockets), path=path)
    return taken, False


TURN_SECONDS = 120.0  # how long a successor waits for another's hand-over to end (a predecessor waits as long for "ready")
_TURN_POLL = 0.5


def _taken_in_turn(path: str, key: bytes) -> Optional[Taken]:
    """
    The predecessor's sockets, waiting while it is busy with another successor (two new processes at once:
    one wins, the other waits, then takes them from whoever serves at C{path} by then).  Once it has
    waited, a predecessor that is not serving (draining after it handed over) and an empty rendezvous are
    the gap until the winner serves there, not the absence of a predecessor, until L{TURN_SECONDS}.  Not
    serving without another successor first (a predecessor starting, or draining on SIGTERM) refuses us
    at once, as before.
    """
    deadline = time.monotonic() + TURN_SECONDS
    waited = False
    while True:
        try:
            taken = take_listeners(path, key)
        except HandoverRefused as error:
            wait_on = NOT_YET if waited else NOT_YET[:1]
            if not any(reason in str(error) for reason in wait_on) or time.monotonic() > deadline:
                raise
            if not waited:  # said at once on stderr: twistd's log starts only after makeService, where this waits
                say_now(f"twistd ingress: --handover {path}: the predecessor is busy ({error}): waiting for our turn (up to {TURN_SECONDS:.0f} s)")
            waited = True
        else:
            if taken is not None or not waited or time.monotonic() > deadline:
                return taken
        time.sleep(_TURN_POLL)


def opened_sockets(options: Mapping[str, Any], pooled: bool) -> tuple[Optional[Taken], Shared]:
    """
    What the primary listens with, opened before the services are built: with --handover, the predecessor's
    sockets and fresh ones for the rest; with worker processes, fresh ones; else none (each listener binds its
    own endpoint, as it starts).
    """
    taken, ports_freeing = take_over(options)
    if not (options["handover"] or pooled):
        return None, []
    return taken, listener_sockets(options, options["worker-count"], taken, ports_freeing)


def bound_as(sock: socket.socket, spec: ListenerSpec) -> bool:
    """Whether C{sock} is bound where C{spec} says: family, port, and address (as an IP, "" being every IPv4 one)."""
    host, port = sock.getsockname()[:2]
    if sock.family != spec.family or port != spec.port:
        return False
    wanted = spec.interface or ("::" if spec.family == socket.AF_INET6 else "0.0.0.0")
    try:
        return ipaddress.ip_address(str(host).split("%")[0]) == ipaddress.ip_address(wanted)
    except ValueError:
        return False


def listener_sockets(options: Mapping[str, Any], count: int, taken: Optional[Taken] = None, ports_freeing: bool = False) -> Shared:
    """
    The sockets of each of --http and --https (those not off): those of C{taken} that fit, and fresh ones
    up to C{count} (one per worker, a SO_REUSEPORT group). A port another process holds ends the start
    with one line naming it.
    """
    received = [(entry.listener, sock) for entry, sock in taken.sockets if entry.listener in LISTENERS] if taken is not None else []
    shared: Shared = []
    for name in LISTENERS:
        if not options[name]:
            continue
        spec = parse_listener(name, options[name])
        adopted = [sock for listener, sock in received if listener == name and _fits(sock, spec)]
        try:
            fresh = [_bind(spec, ports_freeing) for _ in range(count - len(adopted))]
        except OSError as error:
            refuse_start(f"twistd ingress: --{name} {options[name]}: cannot listen: {error}")
        shared.append((spec, adopted + fresh))
    for listener, sock in received:
        if listener not in [spec.name for spec, _ in shared]:
            log.warn("handover: the predecessor's {name} socket is not adopted: --{name} is off here", name=listener)
            sock.close()
    return shared


def _fits(sock: socket.socket, spec: ListenerSpec) -> bool:
    if bound_as(sock, spec):
        return True
    log.warn(
        "handover: the predecessor's {name} socket is bound to {address}, not where --{name} {description} says: not adopted",
        name=spec.name, address=sock.getsockname()[:2], description=spec.description,
    )
    sock.close()
    return False


def _bind(spec: ListenerSpec, ports_freeing: bool) -> socket.socket:
    bind = partial(open_listener, spec, reuse_port=True)
    return bind_retrying(bind, EXCHANGE_SECONDS) if ports_freeing else bind()


def serve_adopted(
    reactor: Any, shared: Shared, factories: Mapping[str, Any], announce: Callable[[str], Callable[[Any], None]], live: LiveTable, top: MultiService
) -> list[IService]:
    """A single process's listeners with --handover: one per socket opened (or received) beforehand, each adopted."""
    listeners: list[IService] = [
        AdoptedListener(reactor, spec, sock, factories[spec.name], announce(spec.name), index)
        for spec, sockets in shared
        for index, sock in enumerate(sockets)
    ]
    serve_after_first_table(live, top, listeners)
    return listeners


def serve_after_first_table(live: LiveTable, top: MultiService, listeners: Sequence[IService]) -> None:
    """
    The listeners start once a table is live, as a worker's do: a socket received from a predecessor already
    has clients queued (the predecessor's too, until it stops accepting), and one accepted before our first
    table would be answered 404, or offered the default certificate, for a host the cluster has.
    """
    listening = MultiService()
    for listener in listeners:
        listener.setServiceParent(listening)

    def swapped(_: object) -> None:
        if listening.parent is None:
            listening.setServiceParent(top)

    if live.ready:
        swapped(None)
    else:
        live.subscribe(swapped)


def serve_metrics(reactor: Any, options: Mapping[str, Any], handing: Handing, factory: Any, top: MultiService, announce: Callable[[Any], None]) -> list[IService]:
    """
    The --metrics listener, in the primary: with --handover on a socket of ours (the predecessor's, when it
    is bound where our option says, else a fresh one) that a successor is handed in turn.
    """
    received = [sock for entry, sock in (handing.taken.sockets if handing.taken is not None else []) if entry.listener == "metrics"]
    if not options["metrics"]:
        for sock in received:  # ours was its last copy but the predecessor's: it goes with it
            log.warn("handover: the predecessor's metrics socket is not adopted: --metrics is off here")
            sock.close()
        return []
    if not options["handover"]:
        return [listen(reactor, options["metrics"], factory, top, "metrics", announce)]
    spec = parse_listener("metrics", options["metrics"], "with --handover")
    handing.metrics = [sock for sock in received if _fits(sock, spec)]
    if not handing.metrics:
        try:
            handing.metrics = [open_listener(spec, reuse_port=True)]
        except OSError as error:
            refuse_start(f"twistd ingress: --metrics {options['metrics']}: cannot listen: {error}")
    services: list[IService] = []
    for index, sock in enumerate(handing.metrics):
        service = AdoptedListener(reactor, spec, sock, factory, announce, index)
        service.setServiceParent(top)
        services.append(service)
    return services


class _ScrapeConnection(ProtocolWrapper):
    """One --metrics connection, which knows whether it has answered anything yet."""

    answered = False

    def write(self, data: bytes) -> None:
        self.answered = True
        super().write(data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.answered = True
        super().writeSequence(data)


class Scrapes(WrappingFactory):
    """
    The --metrics listener's connections, a L{Drainable}: a scrape in progress when the listener stops (a
    hand-over, a drain) is answered before the process exits; idle keep-alive connections close at the drain.
    Without it a scrape accepted just before the hand-over, waiting for the workers' families, met the
    process's exit and got nothing.  A connection that has answered nothing yet counts as a scrape in
    progress: its request may be on the way (a scraper sends it at once), and closing it would lose it;
    one that never sends is cut at the drain's timeout, as any open request.
    """

    noisy = False  # no "Starting factory" line
    protocol = _ScrapeConnection

    def drain(self) -> None:
        for connection in list(self.protocols):
            if not _busy(connection):
                connection.loseConnection()

    def open_count(self) -> int:
        return sum(1 for connection in self.protocols if _busy(connection))

    def open_kinds(self) -> dict[str, int]:
        return {"scrape{s} of --metrics": self.open_count()}

    def abort_all(self) -> int:
        count = self.open_count()
        for connection in list(self.protocols):
            connection.transport.abortConnection()
        return count


def _busy(connection: Any) -> bool:
    """Whether an HTTP connection (a wrapped HTTPChannel) has a request it has not finished answering, or has answered none yet."""
    return bool(getattr(connection.wrappedProtocol, "requests", None)) or not connection.answered


def slot_sockets(sockets: list[socket.socket], index: int, count: int) -> list[socket.socket]:
    """The sockets of one listener that worker slot C{index} of C{count} serves: every C{count}th, from its own on."""
    return sockets[index::count]


@dataclass
class Handing:
    """
    What the rendezvous of C{--handover} needs of the process: its sockets, what it took from its
    predecessor, whether it serves from them (C{ready}), and what else must know while a successor holds
    the sockets too (C{sharing}: the worker pool, whose workers then drain without touching them).  From the
    moment they are sent, a drain (a SIGTERM meanwhile) must not attach its SYN-dropping filter: it is the
    socket's, so the successor's too.
    """

    shared: Shared
    taken: Optional[Taken]
    ready: Callable[[], bool]
    sharing: Callable[[bool], None] = lambda _: None
    more: Callable[[], Iterable[tuple[str, socket.socket]]] = lambda: ()  # the stream and Gateway ports' sockets, named
    metrics: list[socket.socket] = field(default_factory=list)  # --metrics's socket (L{serve_metrics})

    def listener(self, reactor: Any, path: str, key: bytes, shutdown: GracefulShutdown) -> HandoverListener:
        def share(shared: bool) -> None:
            self.sharing(shared)
            shutdown.shared = shared

        return HandoverListener(
            reactor, path, key,
            sockets=lambda: [*((spec.name, sock) for spec, sockets in self.shared for sock in sockets), *self.more(), *(("metrics", sock) for sock in self.metrics)],
            ready=lambda: self.ready() and shutdown.offers_sockets(),
            handed=shutdown.hand_over,
            sharing=share,
            taken=self.taken,
        )


def bind_retrying(bind: Callable[[], socket.socket], timeout: float) -> socket.socket:
    """
    C{bind()}, retried while its address is in use, for up to C{timeout}: after a predecessor died in the
    middle of a hand-over its ports are free only once the kernel has closed its sockets.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return bind()
        except OSError as error:
            if error.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
