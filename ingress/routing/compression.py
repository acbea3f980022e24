# -*- test-case-name: tests.proxy.test_gzip -*-
"""
Response compression as the ingress-nginx ConfigMap sets it: C{use-gzip}, C{gzip-level},
C{gzip-min-length}, C{gzip-types} (docs/user-guide/nginx-configuration/configmap.md, with its
defaults: off, level 1, 256 bytes, its list of types; "text/html" always, "*" for any type).
Pure: read with the ConfigMap, carried by the table's listener settings, applied by
L{ingress.proxy.message.compression}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ingress.routing.annotations.values import InvalidValue

DEFAULT_TYPES = (
    "application/atom+xml application/javascript application/x-javascript application/json application/rss+xml "
    "application/vnd.ms-fontobject application/x-font-ttf application/x-web-app-manifest+json application/xhtml+xml "
    "application/xml font/opentype image/svg+xml image/x-icon text/css text/javascript text/plain text/x-component"
)


@dataclass(frozen=True, slots=True)
class Gzip:
    """What is compressed, and how hard."""

    level: int = 1
    min_length: int = 256
    types: frozenset[bytes] = frozenset()  # lower-case media types, text/html among them
    any_type: bool = False  # gzip-types "*"

    def compresses(self, media_type: bytes) -> bool:
        return self.any_type or media_type in self.types


def level(value: str) -> int:
    number = int(value) if value.strip().isdigit() else -1
    if not 1 <= number <= 9:
        raise InvalidValue("must be a whole number from 1 to 9")
    return number


def media_types(value: str) -> tuple[str, ...]:
    found = tuple(value.lower().split())
    for each in found:
        if each != "*" and each.count("/") != 1:
            raise InvalidValue(f"has {each!r}, which is not a media type (type/subtype) or '*'")
    return found


def gzip_settings(read: dict[str, object]) -> Optional[Gzip]:
    """The checked ConfigMap values (key -> value) as L{Gzip}, or None when use-gzip is off."""
    if not read.get("use-gzip", False):
        return None
    types = read.get("gzip-types")
    names = types if isinstance(types, tuple) else DEFAULT_TYPES.split()
    min_length = read.get("gzip-min-length", 256)
    return Gzip(
        level=int(str(read.get("gzip-level", 1))),
        min_length=int(str(min_length)),
        types=frozenset(name.encode("ascii") for name in (*names, "text/html") if name != "*"),
        any_type="*" in names,
    )
