# -*- test-case-name: tests.proxy.test_log_format -*-
"""
Access-log lines in an nginx C{log_format} (the ConfigMap's C{log-format-upstream}).

The parts come from L{ingress.routing.logformat.parse}, checked when the ConfigMap was read; here
each variable becomes a small function of the answered request (its
L{ingress.proxy.request.exchange.Exchange}: the attributes the access log reads).  Values are escaped as nginx's log module
escapes them (ngx_http_log_module, C{escape=default|json|none}): default writes C{"}, C{\\}
and bytes outside printable ASCII as C{\\xHH}; json escapes as JSON strings do; none writes them
as they are.  A variable without a value is written "-" (default, none) or "" (json), as nginx
writes a value that is not found.
"""

from __future__ import annotations

import os
import time
from base64 import b64decode
from binascii import Error as Base64Error
from collections.abc import Callable
from typing import Any, Optional

from ingress.routing.logformat import Parts

Getter = Callable[[Any, int, float], Optional[str]]
_VERSIONS = {(1, 1): "HTTP/1.1", (1, 0): "HTTP/1.0", (2, 0): "HTTP/2.0"}
_DEFAULT_SAFE = bytes(b for b in range(0x20, 0x7F) if b not in b'"\\')
_JSON = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def escape_default(value: str) -> str:
    raw = value.encode("utf-8", "surrogateescape")
    if not raw.translate(None, _DEFAULT_SAFE):
        return value
    return "".join(chr(b) if b in _DEFAULT_SAFE else f"\\x{b:02X}" for b in raw)


def escape_json(value: str) -> str:
    if value.isprintable() and '"' not in value and "\\" not in value:
        return value
    return "".join(_JSON.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 else c) for c in value)


def _field(exchange: Any, name: bytes) -> Optional[bytes]:
    head = exchange.request
    if head is None:
        return None
    wanted = b"\r\n" + name + b":"
    block: bytes = b"\r\n" + head.block
    at = block.lower().find(wanted)
    if at < 0:
        return None
    start = at + len(wanted)
    end = block.find(b"\r\n", start)
    return block[start : end if end >= 0 else len(block)].strip(b" \t")


def _text(value: Optional[bytes]) -> Optional[str]:
    return value.decode("utf-8", "surrogateescape") if value is not None else None


def _head(attribute: str) -> Getter:
    def get(exchange: Any, status: int, now: float) -> Optional[str]:
        head = exchange.request
        return _text(getattr(head, attribute)) if head is not None else None

    return get


def _header(name: str) -> Getter:
    wanted = name.replace("_", "-").lower().encode("ascii")
    return lambda exchange, status, now: _text(_field(exchange, wanted))


def _request(exchange: Any, status: int, now: float) -> Optional[str]:
    head = exchange.request
    if head is None:
        return None
    return f"{_text(head.method)} {_text(head.target)} {_protocol(exchange, status, now)}"


def _protocol(exchange: Any, status: int, now: float) -> Optional[str]:
    head = exchange.request
    if head is None:
        return None
    return _VERSIONS.get(head.version) or "HTTP/%d.%d" % head.version


def _split_target(exchange: Any) -> Optional[tuple[str, str]]:
    head = exchange.request
    if head is None:
        return None
    path, _, query = (_text(head.target) or "").partition("?")
    return path, query


def _remote_user(exchange: Any, status: int, now: float) -> Optional[str]:
    value = _field(exchange, b"authorization")
    if not value or not value[:6].lower() == b"basic ":
        return None
    try:
        user = b64decode(value[6:].strip(), validate=True).partition(b":")[0]
    except (Base64Error, ValueError):
        return None
    return _text(user) or None


def _duration(exchange: Any, status: int, now: float) -> Optional[str]:
    started = exchange.started_at
    return "%.3f" % (time.monotonic() - started) if started else None


def _upstream_time(exchange: Any, status: int, now: float) -> Optional[str]:
    sent = exchange.sent_at
    return "%.3f" % (time.monotonic() - sent) if sent else None


def _upstream_addr(exchange: Any, status: int, now: float) -> Optional[str]:
    tried = exchange.tried
    return f"{tried[0]}:{tried[1]}" if tried is not None else None


def _upstream_name(exchange: Any, status: int, now: float) -> Optional[str]:
    """ingress-nginx's upstream name: upstream-<namespace>-<service>-<port>."""
    route = exchange.route
    if route is None:
        return None
    namespace, _, rest = route.upstream.key.partition("/")
    service, _, port = rest.rpartition(":")
    return f"upstream-{namespace}-{service}-{port}"


def _service_part(index: int) -> Getter:
    def get(exchange: Any, status: int, now: float) -> Optional[str]:
        route = exchange.route
        if route is None:
            return None
        key: str = route.upstream.key
        service, _, port = key.partition("/")[2].rpartition(":")
        return (service, port)[index]

    return get


def _request_length(exchange: Any, status: int, now: float) -> Optional[str]:
    head = exchange.request
    if head is None:
        return None
    return str(len(head.method) + len(head.target) + 11 + len(head.block) + (head.framing.content_length or 0))


def _request_id(exchange: Any, status: int, now: float) -> Optional[str]:
    """The request's X-Request-ID, else a random 32-hex id, as ingress-nginx's $req_id."""
    head = exchange.request
    made = head.request_id if head is not None else b""
    if made:
        return made.decode("ascii")
    given = _field(exchange, b"x-request-id")
    return _text(given) if given else os.urandom(16).hex()


def _forwarded_for(exchange: Any, status: int, now: float) -> Optional[str]:
    given = _field(exchange, b"x-forwarded-for")
    ip = exchange.forwarded.ip or ""
    return f"{_text(given)}, {ip}" if given else ip


def _host(exchange: Any, status: int, now: float) -> Optional[str]:
    head = exchange.request
    if head is None or not head.host:
        return None
    host = (_text(head.host) or "").lower()
    return host if host.startswith("[") else host.partition(":")[0]


def _time_local(exchange: Any, status: int, now: float) -> Optional[str]:
    return time.strftime("%d/%b/%Y:%H:%M:%S %z", time.localtime(now))


def _time_iso8601(exchange: Any, status: int, now: float) -> Optional[str]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now))
    return stamp[:-2] + ":" + stamp[-2:]


GETTERS: dict[str, Getter] = {
    "remote_addr": lambda c, s, n: c.forwarded.ip or None,
    "proxy_protocol_addr": lambda c, s, n: c.client.peer().ip or None,
    "remote_user": _remote_user,
    "time_local": _time_local,
    "time_iso8601": _time_iso8601,
    "msec": lambda c, s, n: "%.3f" % n,
    "request": _request,
    "request_method": _head("method"),
    "request_uri": _head("target"),
    "uri": lambda c, s, n: (_split_target(c) or (None, ""))[0],
    "args": lambda c, s, n: (_split_target(c) or ("", None))[1],
    "query_string": lambda c, s, n: (_split_target(c) or ("", None))[1],
    "server_protocol": _protocol,
    "scheme": lambda c, s, n: (c.forwarded.scheme or b"").decode("ascii", "replace") or None,
    "host": _host,
    "status": lambda c, s, n: str(s),
    "body_bytes_sent": lambda c, s, n: str(c.body_sent),
    "bytes_sent": lambda c, s, n: str(c.body_sent),
    "request_length": _request_length,
    "request_time": _duration,
    "proxy_upstream_name": _upstream_name,
    "proxy_alternative_upstream_name": lambda c, s, n: "",
    "upstream_addr": _upstream_addr,
    "upstream_response_length": lambda c, s, n: str(c.body_sent) if c.sent_at else None,
    "upstream_response_time": _upstream_time,
    "upstream_status": lambda c, s, n: str(s) if c.tried is not None else None,
    "req_id": _request_id,
    "request_id": _request_id,
    "namespace": lambda c, s, n: c.route.source.namespace if c.route is not None else None,
    "ingress_name": lambda c, s, n: c.route.source.name if c.route is not None else None,
    "service_name": _service_part(0),
    "service_port": _service_part(1),
    "proxy_add_x_forwarded_for": _forwarded_for,
}


def compile_format(parts: Parts, escape: str = "default") -> Callable[[Any, int, Any], str]:
    """A line function (the access log's C{FORMATS} signature) for checked C{parts}."""
    quote = {"default": escape_default, "json": escape_json, "none": lambda value: value}[escape]
    missing = "" if escape == "json" else "-"
    steps = [(text, GETTERS.get(name) or _header(name[5:]) if name else None) for text, name in parts]

    def line(exchange: Any, status: int, clock: Any) -> str:
        now = clock.now()
        out: list[str] = []
        for text, getter in steps:
            out.append(text)
            if getter is not None:
                value = getter(exchange, status, now)
                out.append(missing if value is None else quote(value))
        out.append("\n")
        return "".join(out)

    return line
