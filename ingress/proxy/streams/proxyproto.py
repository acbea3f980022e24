# -*- test-case-name: tests.unit.test_proxyproto -*-
"""
PROXY protocol headers (haproxy's proxy-protocol.txt, versions 1 and 2) for TCP.

A stream upstream that asked for it gets one header before the client's first
byte, telling it who the client really was: without it every connection
seems to come from the proxy.  Only the sending side is here, and only what a
TCP proxy sends: TCP over IPv4 or IPv6, or "unknown" (v1) / LOCAL (v2) when
the addresses are not IP.  Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Optional, Union

Address = tuple[str, int]
IP = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

V1, V2 = "v1", "v2"
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
_V2_PROXY = 0x21  # version 2, command PROXY
_V2_LOCAL = 0x20  # version 2, command LOCAL: the receiver uses the real connection's addresses
_TCP4, _TCP6 = 0x11, 0x21  # address family << 4 | transport protocol (STREAM)
V1_UNKNOWN = b"PROXY UNKNOWN\r\n"


def header(version: str, source: Optional[Address], destination: Optional[Address]) -> bytes:
    """
    The header of C{version} ("v1" or "v2") for a connection from C{source}
    to C{destination} (the client's address and the listener's), each
    (ip, port) or None when it is not an IP address.
    """
    if version == V1:
        return v1_header(source, destination)
    if version == V2:
        return v2_header(source, destination)
    raise ValueError(f"unknown PROXY protocol version {version!r}")


def v1_header(source: Optional[Address], destination: Optional[Address]) -> bytes:
    """The human-readable header: "PROXY TCP4 src dst sport dport\\r\\n" (at most 107 bytes)."""
    pair = _same_family(source, destination)
    if pair is None:
        return V1_UNKNOWN
    (src, sport), (dst, dport) = pair
    family = "TCP4" if src.version == 4 else "TCP6"
    return f"PROXY {family} {src.compressed} {dst.compressed} {sport} {dport}\r\n".encode("ascii")


def v2_header(source: Optional[Address], destination: Optional[Address]) -> bytes:
    """The binary header: signature, command, family, length, then addresses and ports in network order."""
    pair = _same_family(source, destination)
    if pair is None:
        return V2_SIGNATURE + struct.pack("!BBH", _V2_LOCAL, 0, 0)
    (src, sport), (dst, dport) = pair
    family = _TCP4 if src.version == 4 else _TCP6
    body = src.packed + dst.packed + struct.pack("!HH", sport, dport)
    return V2_SIGNATURE + struct.pack("!BBH", _V2_PROXY, family, len(body)) + body


def _same_family(source: Optional[Address], destination: Optional[Address]) -> Optional[tuple[tuple[IP, int], tuple[IP, int]]]:
    """
    Both addresses parsed and in one family, or None ("unknown").

    A dual-stack listener sees IPv4 clients as IPv4-mapped IPv6 addresses;
    they are sent as the IPv4 they are when both ends are mapped, and the
    IPv4 end is mapped when only one is (the header has one family).
    """
    src, dst = _ip(source), _ip(destination)
    if src is None or dst is None or source is None or destination is None:
        return None
    if src.version != dst.version:
        src, dst = _as_v6(src), _as_v6(dst)
    elif isinstance(src, ipaddress.IPv6Address) and isinstance(dst, ipaddress.IPv6Address) and src.ipv4_mapped and dst.ipv4_mapped:
        src, dst = src.ipv4_mapped, dst.ipv4_mapped
    return (src, source[1]), (dst, destination[1])


def _ip(address: Optional[Address]) -> Optional[IP]:
    if address is None or not 0 <= address[1] <= 65535:
        return None
    try:
        return ipaddress.ip_address(address[0].split("%", 1)[0])  # no zone index in the header
    except ValueError:
        return None


def _as_v6(ip: IP) -> ipaddress.IPv6Address:
    if isinstance(ip, ipaddress.IPv6Address):
        return ip
    return ipaddress.IPv6Address(b"\x00" * 10 + b"\xff\xff" + ip.packed)
