# -*- test-case-name: tests.proxy.test_handover -*-
"""
The successor's side of a hand-over (L{ingress.process.handover}): a plain blocking exchange at startup,
bounded by L{EXCHANGE_SECONDS}.  The sockets decide what the services are built with (the workers'
descriptors, the adopted ports), so they are needed in C{makeService}, before the reactor runs; the
"ready" that follows, once the process serves, goes over the same connection from the reactor.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Optional

from ingress.process.handoverwire import (
    EXCHANGE_SECONDS,
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
    rendezvous_address,
)


class HandoverFailed(Exception):
    """The predecessor went away (or stopped answering) before the sockets came: bind fresh."""


@dataclass
class Taken:
    """What a successor received: the connection to its predecessor (to say "ready" on) and each socket."""

    connection: socket.socket
    sockets: list[tuple[SocketEntry, socket.socket]]


def take_listeners(path: str, key: bytes, timeout: float = EXCHANGE_SECONDS) -> Optional[Taken]:
    """
    The successor's side: None when nothing listens at C{path} (a path, or C{@NAME}; no predecessor: bind fresh). Raises
    L{HandoverRefused} when what answers there is not an authenticated twingress of our uid (the start
    fails: it holds our ports, or pretends to), L{HandoverFailed} when the predecessor goes away first.
    """
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + timeout
    try:
        connection.settimeout(timeout)
        connection.connect(rendezvous_address(path))  # @NAME: an abstract name, refused when nothing is bound there
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
            if not _listening(sock) or describe(entry.listener, sock) != entry:
                raise HandoverRefused(f"the socket sent for {entry.listener} is not the listening socket listed")
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    connection.settimeout(None)
    return Taken(connection, list(zip(entries, sockets, strict=True)))


def _listening(sock: socket.socket) -> bool:
    """A listening TCP socket, or a bound UDP one (what a stream port's group holds)."""
    if sock.type == socket.SOCK_DGRAM:
        return sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getsockname()[1] != 0
    return sock.type == socket.SOCK_STREAM and bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))


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
