# -*- test-case-name: tests.proxy.test_workers -*-
"""
A stream listener on sockets given to it (L{ingress.proxy.streams.listeners.StreamListeners}'s
C{sockets}): the ports made on copies of a port's sockets, stopped together, and whether two sets
of descriptors are the same sockets (a UDP port taken back while it drains).
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any, Optional

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.internet.protocol import DatagramProtocol


class GivenPorts:
    """The ports of one listener on several sockets of a group: stopped together."""

    def __init__(self, ports: list[Any]) -> None:
        self.ports = ports

    def stopListening(self) -> Deferred[list[Any]]:
        return gatherResults([maybeDeferred(port.stopListening) for port in self.ports])

    def inodes(self) -> set[int]:
        found = set()
        for port in self.ports:
            with contextlib.suppress(OSError, AttributeError):
                found.add(os.fstat(port.fileno()).st_ino)
        return found


def close_all(sockets: Optional[list[socket.socket]]) -> None:
    for sock in sockets or []:
        sock.close()


def same_sockets(given: list[socket.socket], port: Any) -> bool:
    """Whether the C{given} sockets are those C{port} listens on (the same inodes: one socket, two descriptors)."""
    return isinstance(port, GivenPorts) and {os.fstat(sock.fileno()).st_ino for sock in given} == port.inodes()


class MoreDatagrams(DatagramProtocol):
    """
    A UDP listener's second (third...) socket of its group in one process: its datagrams go to the
    listener's one handler, which answers through its own socket.  A datagram protocol has one transport,
    and the group's sockets share their address, so a reply from the first leaves from the same source
    address and port as one from the socket it came in on.  This is how one process serves the sockets
    of a predecessor that had more workers (each socket has its own queue: none may be closed).
    """

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        self.handler.datagramReceived(datagram, addr)
