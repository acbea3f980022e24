# -*- test-case-name: tests.proxy.test_logs -*-
"""
The access log: one line per HTTP request answered, as text or JSON.

Text (the combined log format, then named fields)::

    10.0.0.7 - - [22/Nov/2026:04:47:06 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "-" "curl/8.5"
    host=echo.test route=default/echo upstream=10.244.0.5:8080 duration=0.004 upstream_duration=0.003
    request_id=8c0e0a6f2d3b4c5d9e8f7a6b5c4d3e2f

(on one line; C{request_id} is the request's X-Request-ID, the client's or the one generated, as
C{$req_id} ends ingress-nginx's default log format).  It is on the proxy's hot path, so a line is formatted from
the exchange's own attributes with one C{%} (the line functions read the request, so they live
with it: L{ingress.proxy.request.accesslines}) and appended to a buffer here; the
buffer is written when it passes 64 KiB or half a second after its first
line, whichever comes first, and on shutdown.  A file is opened for append
and reopened on SIGUSR1 (logrotate's C{postrotate}); "-" is standard output,
the stream a container runtime collects.  The ingress-nginx ConfigMap's
C{log-format-upstream} replaces the format while a table has it
(L{ingress.observe.logformat}).
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any, Final, Optional

from twisted.application.service import Service
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from ingress.observe.logformat import compile_format
from ingress.routing.logformat import parse

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

_FLUSH_BYTES: Final = 1 << 16
_FLUSH_SECONDS: Final = 0.5


class Clock:
    """The wall-clock parts of a line, formatted at most once a second (read by the line functions)."""

    def __init__(self) -> None:
        self.second = -1
        self.common = ""
        self.iso = ""

    def now(self) -> float:
        now = time.time()
        if int(now) != self.second:
            self.second = int(now)
            stamp = time.gmtime(self.second)
            self.common = time.strftime("%d/%b/%Y:%H:%M:%S +0000", stamp)
            self.iso = time.strftime("%Y-%m-%dT%H:%M:%S", stamp)
        return now


LineFormat = Callable[[Any, int, Clock], str]
"""A line function: the answered request (its exchange), its status and the clock -> one line."""


class AccessLog(Service):
    """
    Buffers formatted lines and writes them to a file descriptor.

    Started and stopped with the application: the file is opened (and the
    SIGUSR1 handler installed) on start, the buffer written out on stop.
    """

    def __init__(self, reactor: Any, destination: str, line_format: LineFormat) -> None:
        self.reactor = reactor
        self.destination = destination
        self._format = self._own_format = line_format
        self._nginx_format: tuple[str, str] = ("", "default")  # the table's log-format-upstream and escape
        self._clock = Clock()
        self._lines: list[str] = []
        self._size = 0
        self._fd = -1
        self._flush_call: Optional[IDelayedCall] = None

    def startService(self) -> None:
        super().startService()
        self._open()
        if self.destination != "-":
            previous = signal.getsignal(signal.SIGUSR1)

            def on_usr1(number: int, frame: Any) -> None:
                self.reactor.callFromThread(self.reopen)
                if callable(previous):
                    previous(number, frame)  # twistd's own --logfile rotation, when it has one

            signal.signal(signal.SIGUSR1, on_usr1)

    def stopService(self) -> None:
        super().stopService()
        self.flush()
        if self.destination != "-" and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _open(self) -> None:
        if self.destination == "-":
            self._fd = 1
        else:
            self._fd = os.open(self.destination, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def reopen(self) -> None:
        """Write what is buffered, close and open the path again (after logrotate moved it)."""
        self.flush()
        if self.destination == "-":
            return
        os.close(self._fd)
        self._open()
        log.info("access log reopened: {path}", path=self.destination)

    def use_table(self, table: Any) -> None:
        """
        A new routing table: its ConfigMap's C{log-format-upstream} (already checked) replaces
        C{--access-log-format} while it is set; without one the command line's format is back.
        """
        listener = table.listener
        wanted = (listener.log_format, listener.log_escape) if listener is not None else ("", "default")
        if wanted == self._nginx_format:
            return
        self._nginx_format = wanted
        self._format = compile_format(parse(wanted[0]), wanted[1]) if wanted[0] else self._own_format

    def record(self, exchange: Any, status: int) -> None:
        """One request is answered: buffer its line (reactor thread)."""
        line = self._format(exchange, status, self._clock)
        self._lines.append(line)
        self._size += len(line)
        if self._size >= _FLUSH_BYTES:
            self.flush()
        elif self._flush_call is None:
            self._flush_call = self.reactor.callLater(_FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        if self._flush_call is not None:
            if self._flush_call.active():
                self._flush_call.cancel()
            self._flush_call = None
        if not self._lines or self._fd < 0:
            return
        if self.destination == "-":
            pieces = _whole_lines_within(self._lines, select.PIPE_BUF)
        else:  # an O_APPEND write to a file lands whole, whatever other processes append
            pieces = ["".join(self._lines)]
        self._lines.clear()
        self._size = 0
        try:
            for piece in pieces:
                data = piece.encode("utf-8", "backslashreplace")
                while data:
                    data = data[os.write(self._fd, data):]
        except OSError as error:
            log.error("access log {path} not written: {error}", path=self.destination, error=error)


def _whole_lines_within(lines: list[str], limit: int) -> list[str]:
    """
    Lines joined into writes of at most C{limit} bytes (a longer line alone):
    a pipe (stdout shared by worker processes) takes a write of up to PIPE_BUF
    bytes whole, so no other process's line ever lands inside one of ours.
    """
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        if current and size + len(line) > limit:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        pieces.append("".join(current))
    return pieces
