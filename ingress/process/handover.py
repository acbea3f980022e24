# -*- test-case-name: tests.proxy.test_handover -*-
"""
Listening sockets handed over between two twingress processes on one host (C{--handover PATH}).

The running twingress (the predecessor) listens on the unix socket PATH (mode 0600), or on the Linux
abstract name NAME for C{--handover @NAME} (no file: a hostNetwork pod needs no shared volume; the
name is the network namespace's, so anyone there may connect or squat it: the key and the uid check
below decide, and a squatter can only deny a hand-over, never take the sockets).  A new one
started with the same PATH and key file (the successor) connects there first.  When a predecessor
answers and both prove that they hold the key (L{ingress.process.handoverwire}, HMAC over a nonce
each way, and SO_PEERCRED: the same uid), the successor receives every HTTP/HTTPS listening socket
over SCM_RIGHTS and serves from them; once it serves its table it says "ready", the predecessor
stops accepting (it closes its own descriptors: the sockets, their queues and whatever the kernel
holds in them go on in the successor) and drains as on SIGTERM, and the successor listens on PATH
for its own successor.

The successor's side is a plain blocking exchange at startup (L{ingress.process.takeover}); the
predecessor's side, and the successor's "ready" afterwards, are protocols on the reactor (here).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import Callable, Sequence
from typing import Any, Optional

from twisted.application.service import Service
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ingress.process.handoverwire import (
    EXCHANGE_SECONDS,
    IN_PROGRESS,
    NOT_SERVING,
    FrameReader,
    HandoverRefused,
    check_peer,
    check_proof,
    describe,
    expect,
    frame,
    new_nonce,
    nonce_of,
    proof,
    rendezvous_address,
)
from ingress.process.takeover import Taken
from ingress.runtime.sockets import refuse_start

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

READY_SECONDS = 120.0  # how long a predecessor holds a successor's connection before it says ready
_READY_POLL = 0.05
NAME_FREE_SECONDS = 5.0  # how long a successor retries an abstract name still bound when its predecessor let go
_NAME_RETRY = 0.1


class _PredecessorSide(Protocol):
    """One successor's connection to us: authenticate it, send the sockets, wait for its "ready"."""

    transport: Any  # a unix socket's: it sends descriptors (IUNIXTransport) and has the socket (SO_PEERCRED)

    def __init__(self, owner: HandoverListener) -> None:
        self.owner = owner
        self.frames = FrameReader()
        self.state = "hello"
        self.ours = new_nonce()
        self.theirs = b""
        self.sent = False
        self.timer: Optional[IDelayedCall] = None

    def connectionMade(self) -> None:
        try:
            self.pid = check_peer(self.transport.socket, os.getuid())
        except (HandoverRefused, OSError) as error:
            self._refuse(str(error), tell=False)  # another uid learns nothing of us
            return
        if not self.owner.ready():
            self._refuse(NOT_SERVING)
            return
        if self.owner.current is not None:
            self._refuse(IN_PROGRESS)
            return
        self.owner.current = self
        self.timer = self.owner.reactor.callLater(EXCHANGE_SECONDS, self._refuse, "no proof in time")

    def dataReceived(self, data: bytes) -> None:
        try:
            for message in self.frames.feed(data):
                self._received(message)
        except HandoverRefused as error:
            self._refuse(str(error))

    def _received(self, message: dict[str, Any]) -> None:
        if self.state == "hello":
            self.theirs = nonce_of(expect(message, "hello"))
            self.transport.write(frame({"type": "challenge", "nonce": self.ours.hex(), "proof": proof(self.owner.key, "predecessor", self.theirs, self.ours)}))
            self.state = "proof"
        elif self.state == "proof":
            check_proof(expect(message, "proof"), proof(self.owner.key, "successor", self.ours, self.theirs))
            self._send_sockets()
        elif self.state == "sent":
            expect(message, "ready")
            self.state = "released"
            self._cancel_timer()
            self.owner.released(self)
        else:
            raise HandoverRefused(f"{message['type'][:40]!r} after the hand-over")

    def _send_sockets(self) -> None:
        listed = self.owner.sockets()
        self.owner.sharing(True)
        for _, sock in listed:
            self.transport.sendFileDescriptor(sock.fileno())
        self.transport.write(frame({"type": "sockets", "sockets": [describe(name, sock).to_json() for name, sock in listed]}))
        self.state, self.sent = "sent", True
        self._cancel_timer()
        self.timer = self.owner.reactor.callLater(READY_SECONDS, self._refuse, "not ready in time")
        log.info("handover: sent {count} listening sockets to pid {pid}; serving on until it is ready", count=len(listed), pid=self.pid)

    def _refuse(self, why: str, tell: bool = True) -> None:
        if tell and self.state in ("hello", "proof") and self.transport.connected:
            self.transport.write(frame({"type": "refused", "why": why[:200]}))  # the successor's one line says why
        log.warn("handover: refused a peer on {path}: {why}; nothing handed over, serving on", path=self.owner.path, why=why)
        self.state = "refused"
        self.transport.loseConnection()

    def _cancel_timer(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_timer()
        if self.owner.current is self:
            self.owner.current = None
            if self.state == "sent":  # it went away: only we hold them (after our own timeout it may still hold them)
                self.owner.sharing(False)
                log.warn("handover: the successor went away before it was ready; serving on")
            elif self.state in ("hello", "proof"):  # a successor that found our proof wrong (another key) hangs up here
                log.warn("handover: a peer on {path} went away before proving it holds the key; nothing handed over, serving on", path=self.owner.path)


class HandoverListener(Service):
    """
    The rendezvous of a twingress that owns its listeners: hands them to an authenticated successor, then
    calls C{handed} (stop accepting, drain, exit); only while C{ready()} (serving, and not draining,
    or waiting for a successor after a SIGTERM: C{--handover-wait}).  C{taken} is our own predecessor's connection when we
    received ours: we tell it "ready" once C{ready()} holds, and listen on C{path} after it has let go.
    """

    def __init__(
        self,
        reactor: Any,
        path: str,
        key: bytes,
        sockets: Callable[[], Sequence[tuple[str, socket.socket]]],
        ready: Callable[[], bool],
        handed: Callable[[], None],
        taken: Optional[Taken] = None,
        sharing: Callable[[bool], None] = lambda _: None,
    ) -> None:
        self.reactor = reactor
        self.path = path
        self.key = key
        self.sockets = sockets
        self.ready = ready
        self.handed = handed
        self.sharing = sharing  # True from the sockets' sending on, False again if that successor goes away first
        self.taken = taken
        self.port: Optional[IListeningPort] = None
        self.current: Optional[_PredecessorSide] = None
        self._poll: Optional[LoopingCall] = None

    def privilegedStartService(self) -> None:
        """A process that took nothing from a predecessor offers its sockets at once: before the reactor runs, so a
        rendezvous it cannot make stops the start with one line."""
        super().privilegedStartService()
        if self.taken is None:
            self._listen(at_start=True)

    def startService(self) -> None:
        super().startService()
        if self.taken is None:
            return
        self._poll = LoopingCall(self._check_ready)
        self._poll.clock = self.reactor
        self._poll.start(_READY_POLL, now=False)

    def _check_ready(self) -> None:
        if not self.ready() or self.taken is None or self._poll is None:
            return
        self._poll.stop()
        connection, self.taken = self.taken.connection, None
        side = _SuccessorSide(self._listen)
        self.reactor.adoptStreamConnection(connection.fileno(), socket.AF_UNIX, _Factory(lambda: side))
        connection.close()  # adopted as a copy

    def _listen(self, at_start: bool = False, tries: int = int(NAME_FREE_SECONDS / _NAME_RETRY)) -> None:
        """
        Offer our sockets at C{path}. An abstract name (C{@NAME}) has no file to unlink: it is free once its last
        holder closes it, so a successor whose predecessor is letting go retries it for a moment.
        """
        if not (self.running or at_start) or self.port is not None:
            return
        address = rendezvous_address(self.path)
        if _answers(address):  # a predecessor that did not let go of its sockets (it timed out on us) still serves there
            log.warn("handover: another twingress still answers at {path}: not offering the sockets there", path=self.path)
            return
        with contextlib.suppress(FileNotFoundError):
            if address == self.path and stat.S_ISSOCK(os.lstat(self.path).st_mode):  # a predecessor's, left by a crash: nothing answered there
                os.unlink(self.path)
        try:
            self.port = self.reactor.listenUNIX(address, _Factory(lambda: _PredecessorSide(self)), mode=0o600)
        except CannotListenError as error:
            if at_start:
                refuse_start(f"twistd ingress: --handover {self.path}: cannot listen: {error.socketError}")
            if address != self.path and tries > 0 and getattr(error.socketError, "errno", None) == errno.EADDRINUSE:
                self.reactor.callLater(_NAME_RETRY, self._listen, False, tries - 1)
                return
            log.error("handover: cannot offer the sockets at {path} ({why}); serving on", path=self.path, why=str(error.socketError))
            return
        log.info("handover: a successor may take the listening sockets at {path}", path=self.path)

    def released(self, side: _PredecessorSide) -> None:
        """
        The successor serves: stop the rendezvous (its path goes; an abstract name is freed only by closing it, so it
        is closed before the successor hears "released" and binds it), tell it so, stop accepting and drain.
        """
        port, self.port = self.port, None
        stopped = port.stopListening() if port is not None else None

        def let_go(_: object) -> None:
            side.transport.write(frame({"type": "released"}))
            side.transport.loseConnection()
            log.info("handover: the successor serves from the listening sockets; this process stops accepting and drains")
            self.handed()

        if stopped is None:
            let_go(None)
        else:
            stopped.addCallback(let_go)

    def stopService(self) -> Any:
        if self._poll is not None and self._poll.running:
            self._poll.stop()
        port, self.port = self.port, None
        super().stopService()
        return port.stopListening() if port is not None else None


def _answers(path: str) -> bool:
    """Whether a process listens on the unix socket C{path} (a connect there is answered at once, or refused)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


class _SuccessorSide(Protocol):
    """Our predecessor's connection, once we serve: "ready" to it, then its "released" (or its end) lets us listen."""

    transport: Any

    def __init__(self, then: Callable[[], None]) -> None:
        self.then = then
        self.frames = FrameReader()
        self.done = False

    def connectionMade(self) -> None:
        self.transport.write(frame({"type": "ready"}))
        log.info("handover: serving from the sockets received; told the predecessor to stop accepting")

    def dataReceived(self, data: bytes) -> None:
        try:
            messages = self.frames.feed(data)
        except HandoverRefused as error:
            log.warn("handover: the predecessor's answer to ready: {why}", why=str(error))
            self.transport.loseConnection()
            return
        if any(message["type"] == "released" for message in messages):
            self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.done:
            self.done = True
            self.then()


class _Factory(Factory):
    def __init__(self, build: Callable[[], Protocol]) -> None:
        self.build = build

    def buildProtocol(self, addr: Any) -> Protocol:
        protocol = self.build()
        protocol.factory = self
        return protocol
