# -*- test-case-name: tests.proxy.test_workers -*-
"""
The local channel between the primary and one worker: length-prefixed messages over a socketpair.

A message is a pickled tuple whose first item names it.  The primary sends
C{("table", RoutingTable)} for a generation built in full, C{("change", TableChange)}
for one derived from the previous (L{ingress.routing.delta}; a worker that cannot
apply it answers C{("resync",)} and gets the whole table), and C{("metrics?",)} when it
is scraped; the worker answers C{("serving", generation, stream_failures, stream_ports)} once a table is live
and C{("metrics", families)}.  C{("stream-sockets", key, count)} comes with C{count}
descriptors (SCM_RIGHTS, L{Channel.send_with_descriptors}): the worker's sockets of a stream or
Gateway port the primary owns (L{ingress.process.streamsockets}).  Twisted sends each descriptor
with one byte of what is queued to write, so they arrive no later than the message that names
them, and are kept (L{Channel.descriptors}) until it does.  Pickle is safe here: both ends are this
program, on a socketpair nobody else holds.  Frames are length-prefixed (no
64 KiB value limit as in AMP): a table of 10k Ingresses is about 1.3 MiB.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any, Optional

from twisted.internet.interfaces import IFileDescriptorReceiver
from twisted.internet.protocol import ServerFactory, connectionDone
from twisted.protocols.basic import Int32StringReceiver
from twisted.python.failure import Failure
from zope.interface import implementer

MAX_MESSAGE = 1 << 30


def encoded(*message: Any) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


@implementer(IFileDescriptorReceiver)
class Channel(Int32StringReceiver):
    """One end of the channel: C{send(name, *items)}; received messages go to C{on_message}."""

    MAX_LENGTH = MAX_MESSAGE

    def __init__(self, on_message: Callable[[tuple[Any, ...]], None], on_lost: Optional[Callable[[], None]] = None) -> None:
        self.on_message = on_message
        self.on_lost = on_lost
        self.descriptors: list[int] = []  # received, not yet taken by the message that names them

    def send_with_descriptors(self, fds: list[int], *message: Any) -> None:
        """C{message} with C{fds} attached; each must stay open until written (the caller holds them)."""
        if self.transport is not None and self.connected:
            transport: Any = self.transport  # a unix socket's (IUNIXTransport): the socketpair end, adopted
            for fd in fds:
                transport.sendFileDescriptor(fd)
            self.sendString(encoded(*message))

    def fileDescriptorReceived(self, descriptor: int) -> None:
        self.descriptors.append(descriptor)

    def take_descriptors(self, count: int) -> list[int]:
        """The first C{count} descriptors received (a message says how many are its own)."""
        taken, self.descriptors = self.descriptors[:count], self.descriptors[count:]
        return taken

    def send(self, *message: Any) -> None:
        self.send_encoded(encoded(*message))

    def send_encoded(self, data: bytes) -> None:
        """A message already pickled by L{encoded} (one table pickled once for every worker)."""
        if self.transport is not None and self.connected:
            self.sendString(data)

    def stringReceived(self, data: bytes) -> None:
        self.on_message(pickle.loads(data))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        for fd in self.take_descriptors(len(self.descriptors)):
            os.close(fd)
        if self.on_lost is not None:
            self.on_lost()


class ChannelFactory(ServerFactory):
    """A factory of the one channel protocol: the socketpair end is adopted, not accepted."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def buildProtocol(self, addr: Any) -> Channel:
        return self.channel
