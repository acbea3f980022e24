"""
Writing without a reactor round trip when a TCP connection has nothing queued.

Twisted queues every write and sends it on the next loop iteration, which
costs two epoll_ctl calls and a wake-up per message.  A proxy writes one
message at a time, almost always to an idle socket, so it pays that on every
request twice.  Sending straight away when the transport's buffer is empty
(and handing any remainder to the transport) keeps the bytes in order and
leaves backpressure to Twisted as before.  Anything that is not a plain TCP
connection (TLS, tests' string transports) gets its own C{write}.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import tcp


def direct_writer(transport: Any) -> Callable[[bytes], None]:
    """A C{write(data)} for C{transport} that sends at once when nothing is queued."""
    if not isinstance(transport, tcp.Connection) or not hasattr(transport, "_tempDataBuffer"):
        plain_write: Callable[[bytes], None] = transport.write
        return plain_write
    send = transport.socket.send
    queued_write = transport.write

    def write(data: bytes) -> None:
        if transport.dataBuffer or transport._tempDataBuffer or transport.disconnecting or not transport.connected:
            queued_write(data)
            return
        try:
            sent = send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            queued_write(data)  # let the transport see the error and close as usual
            return
        if sent < len(data):
            queued_write(data[sent:])

    return write
