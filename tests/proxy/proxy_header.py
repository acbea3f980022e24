"""
A PROXY protocol receiver's parser (v1 and v2, TCP), written from the spec
independently of L{ingress.proxy.streams.proxyproto}: what an upstream such as
haproxy with C{accept-proxy} would make of the header the proxy sends.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Optional

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def parse_proxy_header(data: bytes) -> Optional[tuple[dict[str, Any], bytes]]:
    """(header, the bytes after it), or None until the whole header is there; ValueError if it is not one."""
    if data[: len(SIGNATURE)] == SIGNATURE[: len(data)] and len(data) < 16:
        return None
    if data.startswith(SIGNATURE):
        return _v2(data)
    if data.startswith(b"PROXY "[: len(data)]):
        return _v1(data)
    raise ValueError(f"not a PROXY header: {data[:16]!r}")


def _v1(data: bytes) -> Optional[tuple[dict[str, Any], bytes]]:
    end = data.find(b"\r\n")
    if end < 0:
        if len(data) > 107:
            raise ValueError("v1 header longer than 107 bytes")
        return None
    words = data[:end].decode("ascii").split(" ")
    if words[1] == "UNKNOWN":
        return {"version": "v1", "family": "UNKNOWN"}, data[end + 2 :]
    _, family, src, dst, sport, dport = words
    version = 4 if family == "TCP4" else 6
    for text in (src, dst):
        assert ipaddress.ip_address(text).version == version
    return {"version": "v1", "family": family, "source": [src, int(sport)], "destination": [dst, int(dport)]}, data[end + 2 :]


def _v2(data: bytes) -> Optional[tuple[dict[str, Any], bytes]]:
    command, family = data[12], data[13]
    length = int.from_bytes(data[14:16], "big")
    if len(data) < 16 + length:
        return None
    body, rest = data[16 : 16 + length], data[16 + length :]
    if command >> 4 != 2:
        raise ValueError("not version 2")
    if command & 0xF == 0:
        return {"version": "v2", "family": "LOCAL"}, rest
    size = {0x11: 4, 0x21: 16}[family]
    src = ipaddress.ip_address(body[:size])
    dst = ipaddress.ip_address(body[size : 2 * size])
    sport = int.from_bytes(body[2 * size : 2 * size + 2], "big")
    dport = int.from_bytes(body[2 * size + 2 : 2 * size + 4], "big")
    name = "TCP4" if family == 0x11 else "TCP6"
    return {"version": "v2", "family": name, "source": [str(src), sport], "destination": [str(dst), dport]}, rest
