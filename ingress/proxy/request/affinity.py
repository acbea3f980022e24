# -*- test-case-name: tests.proxy.test_affinity -*-
"""
The endpoint of a request on a route with cookie affinity, and the cookie that keeps it there.

The cookie is set only when the client gets a new key (no cookie yet, a cookie
of another upstream, or a failed endpoint with C{session-cookie-change-on-failure}),
as ingress-nginx's sticky balancer does; its attributes are the annotations'
(Path, Domain, Expires, Max-Age, SameSite; Secure on HTTPS unless set; always HttpOnly).
"""

from __future__ import annotations

import secrets
import time
from email.utils import formatdate
from typing import Optional

from ingress.proxy.message import h1
from ingress.proxy.message.fields import cookie_value, field_value
from ingress.proxy.request.upstream import Address, UpstreamPool
from ingress.routing.policies.affinity import (
    BALANCED,
    Affinity,
    endpoint_key,
    persistent_target,
    rendezvous,
    samesite_none_understood,
    upstream_tag,
)
from ingress.routing.upstream import Upstream

_NEW_KEY_TRIES = 20  # ingress-nginx's sticky_balanced tries as many keys for a usable endpoint


def cookie_key(affinity: Affinity, upstream: Upstream, request: h1.Head) -> str:
    """The key of the client's cookie for this upstream, or "" (none, or one of another upstream)."""
    value = cookie_value(request.block, affinity.cookie)
    if value is None:
        return ""
    key, _, tag = value.partition("|")
    return key if tag == upstream_tag(upstream.key) else ""


def sticky_endpoint(
    affinity: Affinity, upstream: Upstream, request: h1.Head, pool: UpstreamPool, exclude: Optional[Address], https: bool
) -> tuple[Optional[Address], bytes]:
    """The endpoint for this request, and the Set-Cookie field to send with the response (b"" to keep the cookie)."""
    targets = upstream.targets
    key = cookie_key(affinity, upstream, request)
    if key:
        address = rendezvous(key, targets) if affinity.mode == BALANCED else persistent_target(key, targets)
        if address is not None and address != exclude and not pool.is_down(address):
            return address, b""
        if address is not None and not affinity.change_on_failure:
            return pool.choose(upstream, exclude), b""  # this request elsewhere; the client keeps its endpoint
    address, key = _new_key(affinity, upstream, pool, exclude)
    if address is None:
        return None, b""
    samesite = affinity.samesite
    if samesite == "None" and affinity.conditional_samesite_none:
        agent = (field_value(request.block, b"user-agent") or b"").decode("latin-1")
        samesite = samesite if samesite_none_understood(agent) else ""
    return address, set_cookie_field(affinity, f"{key}|{upstream_tag(upstream.key)}", https, samesite)


def _new_key(affinity: Affinity, upstream: Upstream, pool: UpstreamPool, exclude: Optional[Address]) -> tuple[Optional[Address], str]:
    if affinity.mode != BALANCED:
        address = pool.choose(upstream, exclude)
        return address, endpoint_key(address) if address is not None else ""
    for _ in range(_NEW_KEY_TRIES):
        key = secrets.token_hex(8)
        address = rendezvous(key, upstream.targets)
        if address is not None and address != exclude and not pool.is_down(address):
            return address, key
    return pool.choose(upstream, exclude), ""  # every endpoint failing: this request only, no cookie


def set_cookie_field(affinity: Affinity, value: str, https: bool, samesite: Optional[str] = None) -> bytes:
    """The Set-Cookie field line (CRLF-terminated) for the sticky cookie (C{samesite}: instead of the affinity's)."""
    if not value.split("|", 1)[0]:
        return b""
    attributes = [f"{affinity.cookie}={value}", f"Path={affinity.path}"]
    if affinity.domain:
        attributes.append(f"Domain={affinity.domain}")
    if affinity.expires is not None:
        attributes.append("Expires=" + formatdate(time.time() + affinity.expires, usegmt=True))
    if affinity.max_age is not None:
        attributes.append(f"Max-Age={affinity.max_age}")
    attributes.append("HttpOnly")
    if affinity.secure if affinity.secure is not None else https:
        attributes.append("Secure")
    samesite = affinity.samesite if samesite is None else samesite
    if samesite:
        attributes.append(f"SameSite={samesite}")
    return b"Set-Cookie: %s\r\n" % "; ".join(attributes).encode("latin-1")
