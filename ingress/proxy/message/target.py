# -*- test-case-name: tests.proxy.test_request_meaning -*-
"""
Where a request goes: the routing host and path, from the Host field or an absolute-form target.

A request's meaning must not depend on its spelling.  The path is matched in
its normalised form (L{ingress.routing.paths}); an absolute-form target
(C{GET http://b.test/x}) routes by its own authority, which RFC 9112 3.2.2
makes win over the Host field, and the proxy then forwards that authority as
Host and the origin-form as the target, so routing and forwarding can never
disagree about the host.  A fragment is never part of either.
"""

from __future__ import annotations

import re
from typing import Final

from ingress.proxy.message import h1
from ingress.routing.paths import PathError, routing_path
from ingress.routing.table import normalize_host

_ROUTING_HOSTS: Final[dict[str, str]] = {}
_ABSOLUTE: Final = re.compile(rb"https?://([^/?#]*)([^#]*)", re.IGNORECASE)


def routing_host(host: str) -> str:
    """normalize_host, remembered for the hosts actually seen (bounded: Host is client input)."""
    routing = _ROUTING_HOSTS.get(host)
    if routing is None:
        routing = normalize_host(host)
        if len(_ROUTING_HOSTS) >= 4096:
            _ROUTING_HOSTS.clear()
        _ROUTING_HOSTS[host] = routing
    return routing


def host_and_path(head: h1.Head) -> tuple[str, str]:
    """
    The routing host (as sent, with any port) and the normalised path.

    Raises L{h1.HTTPError} (400) for a path that climbs above the root or is
    badly encoded, an absolute-form target without a valid authority, and a
    target of any other form (authority-form is CONNECT's, refused before).
    """
    target = head.target
    if target[:1] == b"/":
        return head.host.decode("latin-1"), _path(target)
    match = _ABSOLUTE.match(target)
    if match is not None:
        authority = match.group(1)
        if not authority or h1.AT in authority or not h1.valid_host(authority):
            raise h1.HTTPError(400, "invalid authority in the request target")
        return authority.decode("latin-1"), _path(match.group(2) or b"/")
    if target == b"*" and head.method == b"OPTIONS":
        return head.host.decode("latin-1"), "*"
    raise h1.HTTPError(400, "invalid request target")


def origin_form(target: bytes) -> bytes:
    """The target as the upstream receives it: path and query, without scheme, authority or fragment."""
    match = _ABSOLUTE.match(target)
    if match is not None:
        target = match.group(2) or b"/"
        return target if target[:1] == b"/" else b"/" + target
    return target.split(b"#", 1)[0]


def _path(target: bytes) -> str:
    path = target.split(b"?", 1)[0]
    if h1.HASH in path:
        path = path.split(b"#", 1)[0]
    try:
        return routing_path(path.decode("latin-1"))
    except PathError as error:
        raise h1.HTTPError(400, str(error)) from None
