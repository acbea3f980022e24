# -*- test-case-name: tests.proxy.test_nginx_behaviours -*-
"""
X-Request-ID: the client's, or one made here when it sent none.

ingress-nginx sets C{proxy_set_header X-Request-ID $req_id}, where C{$req_id} is the
request's own X-Request-ID field or, with C{generate-request-id} (on by default), nginx's
C{$request_id}: 16 random bytes as 32 lower-case hex digits (configmap.md "generate-request-id";
nginx.tmpl's C{map $http_x_request_id $req_id}).  The same value goes to the auth service, the
error backend and the access log (C{$req_id} ends ingress-nginx's default log format); it is not
added to responses (nginx.tmpl has no C{add_header} for it).

The field is added to the request head itself, once, when it is routed: every later reader (the
upstream head, an auth subrequest, an error page request, the access log) then sees one value.
The id needs to be unique, not secret, so it comes from the Mersenne Twister (each worker process
seeds its own from the OS) rather than a system call per request.
"""

from __future__ import annotations

from binascii import b2a_hex
from random import getrandbits
from typing import Final

from ingress.proxy.message import h1
from ingress.proxy.message.fields import field_value

FIELD: Final = b"x-request-id"


def new_id() -> bytes:
    """32 hex digits, as nginx's C{$request_id} (the cheapest of the spellings measured: no %-formatting of a long int)."""
    return b2a_hex(getrandbits(128).to_bytes(16, "big"))


def tag(request: h1.Head) -> None:
    """
    Give C{request} an X-Request-ID field unless it has one (its field section gains a line); the id
    made is kept on the head too (C{request_id}), so that the access log and the variables read it
    without searching the fields again.
    """
    block = request.block
    at = block.lower().find(b"x-request-id:")
    if at < 0 or (at and block[at - 1] != 10 and field_value(block, FIELD) is None):  # 10: "\n"
        request.request_id = made = new_id()
        request.block = block + b"X-Request-ID: %s\r\n" % made


def request_id(request: h1.Head) -> bytes:
    """The request's X-Request-ID (the client's, or the one L{tag} added), b"" without one."""
    return request.request_id or field_value(request.block, FIELD) or b""
