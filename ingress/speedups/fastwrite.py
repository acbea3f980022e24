"""
Writing without Twisted's write queue, all of a reactor iteration's sends together.

Twisted queues every write and sends it on the next loop iteration, which
costs two epoll_ctl calls per message.  A proxy writes one message at a time,
almost always to an idle socket, so it pays that on every request twice.

Sending each message the moment it is made is cheaper in calls but not in
CPU: every send to a process asleep on another CPU wakes it, and a wake-up
across CPUs (an inter-processor interrupt; a VM exit under a hypervisor) is
the dearest part of a send.  Measured with perf on a 2-CPU KVM guest, the
proxy spent 22% of its CPU in the kernel's wake-up path while the client's
CPU idled at 22%.  So the messages written while the reactor handles one
poll's events (and its timed calls) are gathered and sent back to back just
before it polls again: a sleeping peer is woken once and reads the rest while
it runs.  The same keep-alive benchmark went from 91-102 to 55-58 µs of CPU
per request (bench/README.md).

The flush runs in the reactor's C{doIteration}, replaced once per reactor
(L{ingress.speedups.reactorstep}), before the poll: that is the one point every
write (an I/O event's, a timer's, a thread's callback's) passes before
Twisted can write or close a socket, which it does only while handling a
poll's events.  So order holds per connection: gathered messages are sent in
the order they were written, one for a transport with bytes in Twisted's
queue (a remainder, or bytes written to the transport itself before) or being
closed joins that queue, and a close never overtakes a gathered message (an
abort drops it, as it drops the queue).  Backpressure stays Twisted's.
Anything that is not a plain TCP connection (a PROXY-protocol wrapper, TLS,
tests' string transports) gets its own C{write}.

The plain code, with the speed-ups off (L{ingress.speedups.ENABLED}): every
transport gets its own C{write}, Twisted's queue, and no batch is made.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from twisted.internet import tcp

from ingress.speedups import ENABLED
from ingress.speedups.reactorstep import run_before_each_poll


class SendBatch:
    """The messages written since the reactor last polled, sent just before it polls again."""

    def __init__(self) -> None:
        self._sends: list[tuple[Any, Callable[[bytes], int], bytes]] = []

    def install(self, reactor: Any) -> None:
        """Flush before each of C{reactor}'s polls (L{run_before_each_poll})."""

        def flush_if_any() -> None:
            if self._sends:
                self.flush()

        run_before_each_poll(reactor, flush_if_any)

    def add(self, transport: Any, send: Callable[[bytes], int], data: bytes) -> None:
        self._sends.append((transport, send, data))

    def flush(self) -> None:
        """Send what was written, in the order it was written."""
        sends, self._sends = self._sends, []
        for transport, send, data in sends:
            if transport.dataBuffer or transport._tempDataBuffer or transport.disconnecting or transport._aborting or not transport.connected:
                transport.write(data)  # behind what was queued since (dropped when it is gone or aborted)
                continue
            try:
                sent = send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                transport.write(data)  # let the transport see the error and close as usual
                continue
            if sent < len(data):
                transport.write(data[sent:])


_batches: weakref.WeakKeyDictionary[Any, SendBatch] = weakref.WeakKeyDictionary()


def direct_writer(transport: Any) -> Callable[[bytes], None]:
    """A C{write(data)} for C{transport} that sends with the rest of this iteration's messages."""
    if not ENABLED or not isinstance(transport, tcp.Connection) or not hasattr(transport, "_tempDataBuffer"):
        plain_write: Callable[[bytes], None] = transport.write
        return plain_write
    reactor = transport.reactor
    batch = _batches.get(reactor)
    if batch is None:
        batch = _batches[reactor] = SendBatch()
        batch.install(reactor)
    send = transport.socket.send
    add = batch.add

    def write(data: bytes) -> None:
        add(transport, send, data)

    return write
