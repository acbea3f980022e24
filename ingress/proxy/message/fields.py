# -*- test-case-name: tests.proxy.test_canary -*-
"""
The few request fields a route's policies read (a canary's header, a sticky or canary cookie, a hash
key's variables), found in a head's field section only when such a policy asks.
"""

from __future__ import annotations

from typing import Optional

from ingress.proxy.message.h1 import split_fields


def field_value(block: bytes, name: bytes) -> Optional[bytes]:
    """The value of the first field called C{name} (lower-case) in a validated section, or None."""
    for _, lower, value in split_fields(block):
        if lower == name:
            return value
    return None


def cookie_value(block: bytes, name: str) -> Optional[str]:
    """The value of the cookie C{name} in the Cookie fields of a validated section (RFC 6265 5.4), or None."""
    wanted = name.encode("latin-1")
    for _, lower, value in split_fields(block):
        if lower != b"cookie":
            continue
        for pair in value.split(b";"):
            key, equals, found = pair.strip(b" \t").partition(b"=")
            if equals and key == wanted:
                return found.decode("latin-1")
    return None
