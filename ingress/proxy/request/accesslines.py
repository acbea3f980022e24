# -*- test-case-name: tests.proxy.test_logs -*-
"""
The access log's own two line formats, text and JSON (L{ingress.observe.accesslog} buffers and
writes the lines).  Each is a function of the answered request's L{ingress.proxy.request.exchange.Exchange}:
it reads the request's head as the native class it is, so it lives with the request path, not
below it in observe/.
"""

from __future__ import annotations

import time
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any, Final, Optional

from ingress.observe.accesslog import Clock, LineFormat
from ingress.proxy.message.h1 import Head

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


def _common(exchange: Any) -> tuple[Optional[Head], bytes, bytes, Optional[str], Optional[str], Optional[float], Optional[float], bytes]:
    """
    What both formats read off the answered request (L{ingress.proxy.request.exchange.Exchange}).  The
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


def text_line(exchange: Any, status: int, clock: Clock) -> str:
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


def json_line(exchange: Any, status: int, clock: Clock) -> str:
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


FORMATS: Final[dict[str, LineFormat]] = {"text": text_line, "json": json_line}
"""--access-log-format's choices (the ConfigMap's log-format-upstream replaces them while a table has one)."""
