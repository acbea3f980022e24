"""Response heads the proxy writes itself: error answers, the Date cache, and the reason phrases."""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus

_date_second = -1
_date_value = b""


def http_date() -> bytes:
    """The current IMF-fixdate, formatted at most once a second (it is on every response)."""
    global _date_second, _date_value
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_value = formatdate(now, usegmt=True).encode("ascii")
    return _date_value


def reason_phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b"Unknown"


def error_response(status: int, server: bytes, close: bool, extra: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    """
    A complete short plain-text response: status line, Date, Server, length, body.

    The body names the status only: details go to the log, never to the client.
    """
    phrase = reason_phrase(status)
    body = b"%d %s\n" % (status, phrase)
    lines = [
        b"HTTP/1.1 %d %s" % (status, phrase),
        b"Date: " + http_date(),
        b"Server: " + server,
        b"Content-Type: text/plain; charset=utf-8",
        b"Content-Length: %d" % len(body),
    ]
    lines.extend(name + b": " + value for name, value in extra)
    if close:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def fields_response(status: int, server: bytes, close: bool, fields: bytes) -> bytes:
    """
    An empty answer carrying a policy's fields (a CORS preflight's 204): no body and, for 204,
    no Content-Length (RFC 9110 8.6); the Content-Type ingress-nginx sends with it.
    """
    length = b"" if status == 204 else b"Content-Length: 0\r\n"
    return b"HTTP/1.1 %d %s\r\nDate: %s\r\nServer: %s\r\n%sContent-Type: text/plain charset=UTF-8\r\n%s%s\r\n" % (
        status, reason_phrase(status), http_date(), server, fields, length, b"Connection: close\r\n" if close else b""
    )


def plain_http_on_tls_port(server: bytes) -> bytes:
    """The answer to an HTTP request sent in clear text to the TLS listener (nginx's wording)."""
    body = b"400 Bad Request: the plain HTTP request was sent to the HTTPS port\n"
    return b"".join(
        (
            b"HTTP/1.1 400 Bad Request\r\nDate: %s\r\nServer: %s\r\n" % (http_date(), server),
            b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body),
            body,
        )
    )
