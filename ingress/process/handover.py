# -*- test-case-name: tests.proxy.test_handover -*-
"""
Listening sockets handed over between two twingress processes on one host (C{--handover PATH}).

The running twingress (the predecessor) listens on the unix socket PATH (mode 0600).  A new one
started with the same PATH and key file (the successor) connects there first.  When a predecessor
answers and both prove that they hold the key (L{ingress.process.handoverwire}, HMAC over a nonce
each way, and SO_PEERCRED: the same uid), the successor receives every HTTP/HTTPS listening socket
over SCM_RIGHTS and serves from them; once it serves its table it says "ready", the predecessor
stops accepting (it closes its own descriptors: the sockets, their queues and whatever the kernel
holds in them go on in the successor) and drains as on SIGTERM, and the successor listens on PATH
for its own successor.

The successor's side is a plain blocking exchange at startup, bounded by L{EXCHANGE_SECONDS}: the
sockets decide what the services are built with (the workers' descriptors, the adopted ports), so
they are needed in C{makeService}, before the reactor runs.  The predecessor's side, and the
successor's "ready" afterwards, are protocols on the reactor.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from twisted.application.service import Service
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ingress.process.handoverwire import (
    VERSION,
    FrameReader,
    HandoverRefused,
    SocketEntry,
    check_peer,
    check_proof,
    describe,
    entries_of,
    expect,
    frame,
    new_nonce,
    nonce_of,
    proof,
)

log = Logger()

EXCHANGE_SECONDS = 10.0  # the successor's whole exchange up to the sockets; the predecessor's wait for a proof
READY_SECONDS = 120.0  # how long a predecessor holds a successor's connection before it says ready
_READY_POLL = 0.05


class HandoverFailed(Exception):
    """The predecessor went away (or stopped answering) before the sockets came: bind fresh."""


@dataclass
class Taken:
    """What a successor received: the connection to its predecessor (to say "ready" on) and each socket."""

    connection: socket.socket
    sockets: list[tuple[SocketEntry, socket.socket]]


def take_listeners(path: str, key: bytes, timeout: float = EXCHANGE_SECONDS) -> Optional[Taken]:
    """
    The successor's side: None when nothing listens at C{path} (no predecessor: bind fresh). Raises
    L{HandoverRefused} when what answers there is not an authenticated twingress of our uid (the start
    fails: it holds our ports, or pretends to), L{HandoverFailed} when the predecessor goes away first.
    """
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + timeout
    try:
        connection.settimeout(timeout)
        connection.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        connection.close()
        return None
    except OSError as error:
        connection.close()
        raise HandoverFailed(f"cannot connect: {error.strerror or error}") from None
    try:
        return _exchange(connection, key, deadline)
    except BaseException:
        connection.close()
        raise


def _exchange(connection: socket.socket, key: bytes, deadline: float) -> Taken:
    check_peer(connection, os.getuid())
    reader = _BlockingReader(connection, deadline)
    ours = new_nonce()
    _send(connection, reader, {"type": "hello", "version": VERSION, "nonce": ours.hex()})
    challenge, _ = reader.next()
    theirs = nonce_of(expect(_not_refused(challenge), "challenge"))
    check_proof(challenge, proof(key, "predecessor", ours, theirs))
    _send(connection, reader, {"type": "proof", "proof": proof(key, "successor", theirs, ours)})
    message, fds = reader.next()
    sockets = [socket.socket(fileno=fd) for fd in fds]  # ours now: closed below if anything is wrong
    try:
        entries = entries_of(expect(message, "sockets"))
        if len(entries) != len(sockets):
            raise HandoverRefused(f"{len(entries)} sockets listed, {len(sockets)} sent")
        for entry, sock in zip(entries, sockets, strict=True):
            if sock.type != socket.SOCK_STREAM or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) or describe(entry.listener, sock) != entry:
                raise HandoverRefused(f"the socket sent for {entry.listener} is not the listening socket listed")
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    connection.settimeout(None)
    return Taken(connection, list(zip(entries, sockets, strict=True)))


def _send(connection: socket.socket, reader: _BlockingReader, message: dict[str, Any]) -> None:
    """One message to the predecessor; when it has hung up, what it said before (its refusal) is the error."""
    try:
        connection.sendall(frame(message))
    except OSError as error:
        answer, fds = reader.next()  # HandoverFailed when it said nothing
        for fd in fds:
            os.close(fd)
        _not_refused(answer)
        raise HandoverFailed(f"the connection failed: {error.strerror or error}") from None


def _not_refused(message: dict[str, Any]) -> dict[str, Any]:
    if message["type"] == "refused":
        raise HandoverRefused(f"it refused us: {str(message.get('why'))[:200]}")
    return message


class _BlockingReader:
    """Frames, and the descriptors that came with them, off a blocking socket, until C{deadline}."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self.connection = connection
        self.deadline = deadline
        self.frames = FrameReader()
        self.pending: list[dict[str, Any]] = []
        self.fds: list[int] = []

    def next(self) -> tuple[dict[str, Any], list[int]]:
        while not self.pending:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise HandoverFailed("the predecessor did not answer in time")
            self.connection.settimeout(left)
            try:
                data, fds, _, _ = socket.recv_fds(self.connection, 65536, 64)
            except TimeoutError:
                raise HandoverFailed("the predecessor did not answer in time") from None
            except OSError as error:
                raise HandoverFailed(f"the connection failed: {error.strerror or error}") from None
            self.fds.extend(fds)
            if not data:
                for fd in self.fds:
                    os.close(fd)
                raise HandoverFailed("the predecessor closed the connection")
            self.pending.extend(self.frames.feed(data))
        fds, self.fds = self.fds, []
        return self.pending.pop(0), fds


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
            self._refuse("this process is not serving (starting or draining)")
            return
        if self.owner.current is not None:
            self._refuse("a hand-over to another process is in progress")
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
    calls C{handed} (stop accepting, drain, exit); only while C{ready()} (serving, not draining).  C{taken} is our own predecessor's connection when we
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

    def startService(self) -> None:
        super().startService()
        if self.taken is None:
            self._listen()
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

    def _listen(self) -> None:
        if not self.running or self.port is not None:
            return
        if _answers(self.path):  # a predecessor that did not let go of its sockets (it timed out on us) still serves there
            log.warn("handover: another twingress still answers at {path}: not offering the sockets there", path=self.path)
            return
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):  # a predecessor's, left by a crash: nothing answered there
                os.unlink(self.path)
        self.port = self.reactor.listenUNIX(self.path, _Factory(lambda: _PredecessorSide(self)), mode=0o600)
        log.info("handover: a successor may take the listening sockets at {path}", path=self.path)

    def released(self, side: _PredecessorSide) -> None:
        """The successor serves: stop the rendezvous (its path goes), tell it so, stop accepting and drain."""
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
