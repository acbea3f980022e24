# -*- test-case-name: tests.unit.test_external_auth -*-
"""
nginx variables filled in for one request (the templates of L{ingress.routing.policies.variables}).

Each variable is computed only when a template names it: a route without
templates never pays for them.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qsl, quote

from ingress.proxy.message import h1
from ingress.proxy.message.fields import cookie_value, field_value
from ingress.proxy.message.target import origin_form
from ingress.proxy.request import requestid
from ingress.proxy.request.auth import credentials
from ingress.routing.policies.variables import Part


def expand(parts: tuple[Part, ...], request: h1.Head, client_ip: str, scheme: bytes = b"http") -> str:
    """The template's text for C{request} from C{client_ip} over C{scheme}."""
    return "".join(value if kind == "text" else variable(value, request, client_ip, scheme) for kind, value in parts)


def field_lines(templates: tuple[tuple[str, tuple[Part, ...]], ...], request: h1.Head, client_ip: str, scheme: bytes) -> bytes:
    """Header fields whose values are templates, filled in for C{request} (CRLF-terminated lines; an empty value: no field, as nginx)."""
    lines = []
    for name, parts in templates:
        text = expand(parts, request, client_ip, scheme)
        if text:
            lines.append(b"%s: %s\r\n" % (name.encode("latin-1"), text.encode("latin-1", "replace")))
    return b"".join(lines)


def variable(name: str, request: h1.Head, client_ip: str, scheme: bytes) -> str:
    """One variable's value, as nginx computes it ("" where the request has none)."""
    if name in ("request_uri", "uri", "args", "escaped_request_uri"):
        target = origin_form(request.target).decode("latin-1")
        if name == "uri":
            return target.partition("?")[0]
        if name == "args":
            return target.partition("?")[2]
        return quote(target, safe="") if name == "escaped_request_uri" else target
    if name == "host":
        return h1.host_without_port(request.host).decode("latin-1").lower()
    if name in ("http_host", "best_http_host"):
        return request.host.decode("latin-1")
    if name == "remote_addr":
        return client_ip
    if name == "msec":
        return "%.3f" % time.time()
    if name == "request_id":  # the X-Request-ID that travels with the request (nginx's own $request_id is a fresh one)
        return (requestid.request_id(request) or requestid.new_id()).decode("latin-1")
    if name in ("scheme", "pass_access_scheme"):
        return scheme.decode("latin-1")
    if name == "request_method":
        return request.method.decode("latin-1")
    if name == "remote_user":
        given = credentials(request.block)
        return given[0] if given is not None else ""
    if name.startswith("http_"):
        return (field_value(request.block, name[5:].replace("_", "-").encode("latin-1")) or b"").decode("latin-1")
    if name.startswith("cookie_"):
        return cookie_value(request.block, name[7:]) or ""
    query = origin_form(request.target).decode("latin-1").partition("?")[2]  # arg_<name>
    return next((value for key, value in parse_qsl(query, keep_blank_values=True) if key == name[4:]), "")
