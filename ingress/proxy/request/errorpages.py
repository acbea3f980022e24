# -*- test-case-name: tests.proxy.test_error_pages -*-
"""
The request an error backend receives (L{ingress.routing.policies.errorpages}).

ingress-nginx's C{@custom_..._CODE} location: the client's method and fields, the
target rewritten to C{/}, C{Host} as the client sent it, and C{X-Code},
C{X-Format} (the client's Accept), C{X-Original-URI}, C{X-Namespace},
C{X-Ingress-Name}, C{X-Service-Name}, C{X-Service-Port}, C{X-Request-ID} (the
client's, else a new 32-hex id as nginx's C{$request_id}) and C{X-Forwarded-For}
(the client address).  The request body is not sent again.
"""

from __future__ import annotations

from ingress.proxy.message import h1
from ingress.proxy.message.fields import field_value
from ingress.proxy.request import requestid
from ingress.proxy.request.forwarding import drop_lines_re
from ingress.routing.policies.errorpages import ErrorPages

_CODE_FIELDS = frozenset({b"x-code", b"x-format", b"x-namespace", b"x-ingress-name", b"x-service-name", b"x-service-port", b"x-request-id"})
_SET = frozenset(
    {b"host", b"content-length", b"transfer-encoding", b"expect", b"x-original-uri", b"x-forwarded-for", b"x-real-ip", b"forwarded"}
    | {b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port"}
    | _CODE_FIELDS
    | h1.HOP_BY_HOP
)
_DROP_RE = drop_lines_re(_SET)
_CODE_FIELDS_RE = drop_lines_re(_CODE_FIELDS)


def request_id(request: h1.Head) -> bytes:
    """ingress-nginx's $req_id: the client's X-Request-ID, else a new random id."""
    return requestid.request_id(request) or requestid.new_id()


def error_request_head(pages: ErrorPages, status: int, request: h1.Head, client_ip: str) -> bytes:
    """The head of the request that asks the error backend for the page of C{status}."""
    block = _DROP_RE.sub(b"", request.block)
    return b"%s / HTTP/1.1\r\nHost: %s\r\n%s%sX-Original-URI: %s\r\nX-Forwarded-For: %s\r\n\r\n" % (
        request.method,
        request.host,
        block,
        _code_fields(pages, status, request),
        request.target,
        client_ip.encode("latin-1"),
    )


def fallback_head(pages: ErrorPages, head_bytes: bytes, request: h1.Head) -> bytes:
    """A request of a route whose Service has no endpoint, on its way to the default backend: X-Code 503 and the rest."""
    return _CODE_FIELDS_RE.sub(b"", head_bytes[:-2]) + _code_fields(pages, 503, request) + b"\r\n"


def _code_fields(pages: ErrorPages, status: int, request: h1.Head) -> bytes:
    accept = field_value(request.block, b"accept")
    formats = b"X-Format: %s\r\n" % accept if accept else b""  # nginx passes no field whose value is empty
    return b"X-Code: %d\r\n%s%sX-Request-ID: %s\r\n" % (status, formats, pages.fields, request_id(request))
