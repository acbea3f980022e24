# -*- test-case-name: tests.proxy.test_logs -*-
"""
The access log: one line per HTTP request answered, as text or JSON.

Text (the combined log format, then named fields)::

    10.0.0.7 - - [22/Nov/2026:04:47:06 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "-" "curl/8.5"
    host=echo.test route=default/echo upstream=10.244.0.5:8080 duration=0.004 upstream_duration=0.003
    request_id=8c0e0a6f2d3b4c5d9e8f7a6b5c4d3e2f

(on one line; C{request_id} is the request's X-Request-ID, the client's or the one generated, as
C{$req_id} ends ingress-nginx's default log format).  It is on the proxy's hot path, so a line is formatted from
the exchange's own attributes with one C{%} and appended to a buffer; the
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
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any, Final, Optional

from twisted.application.service import Service
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from ingress.observe.logformat import compile_format
from ingress.proxy.http.h1 import Head
from ingress.routing.logformat import parse

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

_FLUSH_BYTES: Final = 1 << 16
_FLUSH_SECONDS: Final = 0.5
_SAFE: Final = bytes(b for b in range(0x20, 0x7F) if b not in b'"\\')
_VERSIONS: Final = {(1, 1): "HTTP/1.1", (1, 0): "HTTP/1.0"}


def _escape(value: bytes) -> str:
    """
    Client bytes for a quoted text field: printable ASCII kept, the rest (and quotes) as \\xHH.

    The usual value, printable ASCII without a quote or backslash, is found by C{isascii},
    C{isprintable} (of ASCII: 0x20-0x7E) and two C{in}: a fifth of the time of
    C{translate(None, _SAFE)}, which builds its table of 256 on every call.
    """
    if value.isascii():
        text = value.decode("ascii")
        if text.isprintable() and '"' not in text and "\\" not in text:
            return text
    return "".join(chr(b) if b in _SAFE else f"\\x{b:02x}" for b in value)


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _field(block: bytes, lowered: bytes, name: bytes) -> bytes:
    """The value of header C{name} (lower case, with its colon) in a head's field block, or b""."""
    at = lowered.find(name)
    if at < 0:
        return b""
    start = at + len(name)
    end = block.find(b"\r\n", start)
    return block[start : end if end >= 0 else len(block)].strip(b" \t")


class _Clock:
    """The wall-clock parts of a line, formatted at most once a second."""

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


def _common(exchange: Any) -> tuple[Optional[Head], bytes, bytes, Optional[str], Optional[str], Optional[float], Optional[float], bytes]:
    """
    What both formats read off the answered request (L{ingress.proxy.http.exchange.Exchange}).  The
    head is typed (compiled, its fields are read from the object itself, not looked up by name).
    """
    mono = time.monotonic()
    head: Optional[Head] = exchange.request
    if head is not None:
        block = head.block
        lowered = b"\n" + block.lower()  # each field line now starts with "\n", the first one too
        referer, agent = _field(block, lowered, b"\nreferer:"), _field(block, lowered, b"\nuser-agent:")
        request_id = head.request_id or _field(block, lowered, b"\nx-request-id:")  # one made here is 32 hex digits
        duration: Optional[float] = mono - exchange.started_at
    else:
        referer = agent = request_id = b""
        duration = None
    route, upstream = exchange.route, exchange.tried
    return (
        head,
        referer,
        agent,
        route.name if route is not None else None,
        f"{upstream[0]}:{upstream[1]}" if upstream is not None else None,
        duration,
        mono - exchange.sent_at if exchange.sent_at else None,
        request_id,
    )


def text_line(exchange: Any, status: int, clock: _Clock) -> str:
    clock.now()
    head, referer, agent, route, upstream, duration, upstream_duration, request_id = _common(exchange)
    if head is not None:
        # the method is a token and the Host was validated by the parser: only the target needs escaping
        request = f"{head.method.decode()} {_escape(head.target)} {_VERSIONS.get(head.version) or 'HTTP/%d.%d' % head.version}"
        host = head.host.decode() or "-"
        generated = head.request_id
    else:
        request = host = "-"
        generated = b""
    forwarded = exchange.forwarded
    return '%s - - [%s] "%s" %d %d "%s" "%s" host=%s route=%s upstream=%s duration=%s upstream_duration=%s request_id=%s\n' % (
        forwarded.ip or "-",
        clock.common,
        request,
        status,
        exchange.body_sent,
        _escape(referer) if referer else "-",
        _escape(agent) if agent else "-",
        host,
        route or "-",
        upstream or "-",
        "%.3f" % duration if duration is not None else "-",
        "%.3f" % upstream_duration if upstream_duration is not None else "-",
        (generated.decode("ascii") if request_id is generated else _escape(request_id).replace(" ", "\\x20")) if request_id else "-",
    )


def _quoted(value: Optional[str]) -> str:
    return _json_string(value) if value is not None else "null"


def _seconds(value: Optional[float]) -> str:
    return "%.6f" % value if value is not None else "null"


def json_line(exchange: Any, status: int, clock: _Clock) -> str:
    """
    The same fields as one JSON object.  Written with one C{%} and the json
    module's C string quoting: a dict through C{json.dumps} costs about three
    times as much per request.
    """
    now = clock.now()
    head, referer, agent, route, upstream, duration, upstream_duration, request_id = _common(exchange)
    forwarded = exchange.forwarded
    if head is not None:
        method, path = _quoted(_text(head.method)), _quoted(_text(head.target))
        version = _quoted(_VERSIONS.get(head.version) or "HTTP/%d.%d" % head.version)
        host = _quoted(_text(head.host) or None)
    else:
        method = path = version = host = "null"
    return (
        '{"time": "%s.%03dZ", "client": %s, "method": %s, "path": %s, "version": %s, "status": %d, "bytes": %d, '
        '"referer": %s, "user_agent": %s, "host": %s, "route": %s, "upstream": %s, "duration": %s, "upstream_duration": %s, '
        '"request_id": %s}\n'
    ) % (
        clock.iso,
        int((now % 1) * 1000),
        _quoted(forwarded.ip or None),
        method,
        path,
        version,
        status,
        exchange.body_sent,
        _quoted(_text(referer) or None),
        _quoted(_text(agent) or None),
        host,
        _quoted(route),
        _quoted(upstream),
        _seconds(duration),
        _seconds(upstream_duration),
        _quoted(_text(request_id) or None),
    )


FORMATS: Final[dict[str, Callable[[Any, int, _Clock], str]]] = {"text": text_line, "json": json_line}


class AccessLog(Service):
    """
    Buffers formatted lines and writes them to a file descriptor.

    Started and stopped with the application: the file is opened (and the
    SIGUSR1 handler installed) on start, the buffer written out on stop.
    """

    def __init__(self, reactor: Any, destination: str, line_format: str = "text") -> None:
        self.reactor = reactor
        self.destination = destination
        self._format = self._own_format = FORMATS[line_format]
        self._nginx_format: tuple[str, str] = ("", "default")  # the table's log-format-upstream and escape
        self._clock = _Clock()
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
