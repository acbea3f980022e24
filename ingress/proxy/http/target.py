# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""Where a request goes: the routing host and path, from the Host field or an absolute-form target."""

from __future__ import annotations

from ingress.proxy.http import h1
from ingress.routing.table import normalize_host

_ROUTING_HOSTS: dict[str, str] = {}


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
    """The routing host and path: from the Host field, or from an absolute-form target."""
    target = head.target
    if target[:1] == b"/":
        path = target.split(b"?", 1)[0]
        return head.host.decode("latin-1"), path.decode("latin-1")
    lower = target[:8].lower()
    if lower.startswith(b"http://") or lower.startswith(b"https://"):
        rest = target.split(b"//", 1)[1]
        authority, slash, path = rest.partition(b"/")
        path = (slash + path).split(b"?", 1)[0] or b"/"
        return authority.decode("latin-1"), path.decode("latin-1")
    return head.host.decode("latin-1"), "*" if target == b"*" else "/"
