"""Where the ACME self check reaches the --http listener (ingress/acme/options.py): its interface, or loopback for every address."""

from __future__ import annotations

import pytest

from ingress.acme.options import _local_address


@pytest.mark.parametrize(
    ("description", "address"),
    [
        ("tcp:80", "127.0.0.1"),
        ("tcp:80:interface=0.0.0.0", "127.0.0.1"),
        ("tcp:8080:interface=127.0.0.2", "127.0.0.2"),
        ("tcp:port=8080:interface=10.0.0.5", "10.0.0.5"),
        ("tcp6:80", "::1"),
        ("tcp6:80:interface=\\:\\:1", "::1"),
        ("tcp6:port=80:interface=\\:\\:", "::1"),
        ("tcp6:80:interface=fd00\\:\\:5", "fd00::5"),
    ],
)
def test_the_self_check_reaches_the_listener_where_it_binds(description: str, address: str) -> None:
    assert _local_address(description) == address
