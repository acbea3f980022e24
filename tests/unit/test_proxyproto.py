"""PROXY protocol headers, byte for byte against haproxy's proxy-protocol.txt (sections 2.1 and 2.2)."""

from __future__ import annotations

import ipaddress

import pytest

from ingress.proxy.streams import proxyproto

SIG = bytes.fromhex("0D0A0D0A000D0A515549540A")  # the 12-byte v2 signature as the spec lists it


def test_v2_signature_is_the_specs() -> None:
    assert proxyproto.V2_SIGNATURE == SIG


def test_v1_the_specs_example() -> None:
    assert proxyproto.header("v1", ("192.168.0.1", 56324), ("192.168.0.11", 443)) == (
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
    )


def test_v1_worst_case_tcp4_is_56_bytes() -> None:
    line = proxyproto.v1_header(("255.255.255.255", 65535), ("255.255.255.255", 65535))
    assert line == b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n"
    assert len(line) == 56


def test_v1_worst_case_tcp6_is_104_bytes() -> None:
    full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
    line = proxyproto.v1_header((full, 65535), (full, 65535))
    assert line == f"PROXY TCP6 {full} {full} 65535 65535\r\n".encode()
    assert len(line) == 104  # the spec's 107-byte limit includes room for this and more


def test_v1_ipv6_is_written_compressed() -> None:
    assert proxyproto.v1_header(("2001:db8:0:0:0:0:0:1", 1), ("::1", 2)) == b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n"


def test_v1_unknown_for_non_ip_addresses() -> None:
    assert proxyproto.v1_header(None, ("10.0.0.1", 80)) == b"PROXY UNKNOWN\r\n"
    assert proxyproto.v1_header(("not-an-ip", 1), ("10.0.0.1", 80)) == b"PROXY UNKNOWN\r\n"


def test_v2_tcp4_byte_for_byte() -> None:
    expected = SIG + bytes.fromhex(
        "21"  # version 2, PROXY
        "11"  # AF_INET, STREAM
        "000C"  # 12 bytes of addresses follow
        "C0A80001"  # 192.168.0.1
        "C0A8000B"  # 192.168.0.11
        "DC04"  # 56324
        "01BB"  # 443
    )
    assert proxyproto.header("v2", ("192.168.0.1", 56324), ("192.168.0.11", 443)) == expected
    assert len(expected) == 16 + 12


def test_v2_tcp6_byte_for_byte() -> None:
    expected = SIG + bytes.fromhex(
        "21"
        "21"  # AF_INET6, STREAM
        "0024"  # 36 bytes
        "20010DB8000000000000000000000001"
        "00000000000000000000000000000001"
        "0050"
        "1F90"
    )
    assert proxyproto.v2_header(("2001:db8::1", 80), ("::1", 8080)) == expected
    assert len(expected) == 16 + 36


def test_v2_local_for_non_ip_addresses() -> None:
    assert proxyproto.v2_header(None, None) == SIG + bytes.fromhex("20000000")


def test_mapped_ipv4_on_both_ends_is_sent_as_tcp4() -> None:
    assert proxyproto.v1_header(("::ffff:10.0.0.1", 5000), ("::ffff:10.0.0.2", 80)) == b"PROXY TCP4 10.0.0.1 10.0.0.2 5000 80\r\n"
    assert proxyproto.v2_header(("::ffff:10.0.0.1", 5000), ("::ffff:10.0.0.2", 80))[13] == 0x11


def test_mixed_families_map_the_ipv4_end() -> None:
    family, src, dst, ports = proxyproto.v1_header(("10.0.0.1", 5000), ("2001:db8::2", 80)).split(b" ", 4)[1:5]
    assert (family, dst, ports) == (b"TCP6", b"2001:db8::2", b"5000 80\r\n")
    assert ipaddress.IPv6Address(src.decode()).ipv4_mapped == ipaddress.IPv4Address("10.0.0.1")


def test_zone_index_is_dropped() -> None:
    assert proxyproto.v1_header(("fe80::1%lo", 1), ("fe80::2%lo", 2)) == b"PROXY TCP6 fe80::1 fe80::2 1 2\r\n"


def test_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError):
        proxyproto.header("v3", ("10.0.0.1", 1), ("10.0.0.2", 2))
