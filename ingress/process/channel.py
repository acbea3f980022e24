# -*- test-case-name: tests.proxy.test_workers -*-
"""
The local channel between the primary and one worker: length-prefixed messages over a socketpair.

A message is a pickled tuple whose first item names it.  The primary sends
C{("table", RoutingTable)} for a generation built in full, C{("change", TableChange)}
for one derived from the previous (L{ingress.routing.delta}; a worker that cannot
apply it answers C{("resync",)} and gets the whole table), and C{("metrics?",)} when it
is scraped; the worker answers C{("serving", generation, stream_failures, stream_ports)} once a table is live
and C{("metrics", families)}.  Pickle is safe here: both ends are this
program, on a socketpair nobody else holds.  Frames are length-prefixed (no
64 KiB value limit as in AMP): a table of 10k Ingresses is about 1.3 MiB.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, Optional

from twisted.internet.protocol import ServerFactory, connectionDone
from twisted.protocols.basic import Int32StringReceiver
from twisted.python.failure import Failure

MAX_MESSAGE = 1 << 30


def encoded(*message: Any) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


class Channel(Int32StringReceiver):
    """One end of the channel: C{send(name, *items)}; received messages go to C{on_message}."""

    MAX_LENGTH = MAX_MESSAGE

    def __init__(self, on_message: Callable[[tuple[Any, ...]], None], on_lost: Optional[Callable[[], None]] = None) -> None:
        self.on_message = on_message
        self.on_lost = on_lost

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
        if self.on_lost is not None:
            self.on_lost()


class ChannelFactory(ServerFactory):
    """A factory of the one channel protocol: the socketpair end is adopted, not accepted."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def buildProtocol(self, addr: Any) -> Channel:
        return self.channel
