"""Tests for L{ingress.process.sockets.parse_listener}: which listeners worker processes can share."""

from __future__ import annotations

import socket

import pytest
from twisted.python import usage

from ingress.process.sockets import parse_listener


@pytest.mark.parametrize(
    ("description", "family", "interface", "port", "proxy"),
    [
        ("tcp:80", socket.AF_INET, "", 80, False),
        ("tcp:8080:interface=127.0.0.1", socket.AF_INET, "127.0.0.1", 8080, False),
        ("tcp:port=443:interface=10.0.0.1:backlog=1024", socket.AF_INET, "10.0.0.1", 443, False),
        ("tcp6:443", socket.AF_INET6, "::", 443, False),
        ("tcp:80:interface=fd00\\:\\:1", socket.AF_INET6, "fd00::1", 80, False),
        ("haproxy:tcp:80", socket.AF_INET, "", 80, True),
    ],
)
def test_shareable_listeners(description: str, family: int, interface: str, port: int, proxy: bool) -> None:
    spec = parse_listener("http", description)
    assert (spec.family, spec.interface, spec.port, spec.proxy_protocol) == (family, interface, port, proxy)


@pytest.mark.parametrize("description", ["unix:/run/t.sock", "ssl:443", "systemd:domain=INET:index=0", "tcp:", "tcp:interface=1.2.3.4"])
def test_other_listeners_are_refused_with_workers(description: str) -> None:
    with pytest.raises(usage.UsageError, match="--http"):
        parse_listener("http", description)
