"""Source ranges (ingress-nginx annotations.md "Allowlist source range", "Denylist source range")."""

from __future__ import annotations

import ipaddress

import pytest

from ingress.routing.policies.access import SourceRanges


def _ranges(allow: str = "", deny: str = "") -> SourceRanges:
    def networks(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(item) for item in text.split(",") if item)

    return SourceRanges(networks(allow), networks(deny))


@pytest.mark.parametrize(
    ("allow", "deny", "address", "permitted"),
    [
        ("10.0.0.0/8", "", "10.1.2.3", True),
        ("10.0.0.0/8", "", "11.0.0.1", False),  # an allow list ends in "deny all"
        ("", "10.0.0.0/8", "10.1.2.3", False),
        ("", "10.0.0.0/8", "11.0.0.1", True),  # a deny list alone lets the rest through
        ("10.0.0.0/8", "10.1.0.0/16", "10.1.2.3", False),  # deny rules come first
        ("10.0.0.0/8", "10.1.0.0/16", "10.2.0.1", True),
        ("2001:db8::/32", "", "2001:db8::5", True),
        ("2001:db8::/32", "", "2001:db9::5", False),
        ("10.0.0.0/8", "", "::ffff:10.0.0.1", True),  # an IPv4-mapped peer of a dual-stack listener
        ("10.0.0.0/8", "", "", False),  # an unknown peer is not let in
        ("", "10.0.0.0/8", "not an address", False),
    ],
)
def test_deny_then_allow_then_deny_all(allow: str, deny: str, address: str, permitted: bool) -> None:
    assert _ranges(allow, deny).permits(address) is permitted


def test_decisions_are_remembered_within_a_bound() -> None:
    """A client's later requests are a lookup; a flood of addresses never grows the memory past the bound."""
    ranges = _ranges("10.0.0.0/8")
    for i in range(10_000):
        assert ranges.permits(f"10.0.{i // 256}.{i % 256}")
    assert not ranges.permits("11.0.0.1") and not ranges.permits("11.0.0.1")
    assert len(ranges._decided) <= 4096
    assert ranges == _ranges("10.0.0.0/8")  # what was remembered is not part of the value
