"""
How the log names a listener of the table's C{streams} (issue 61: a Gateway's HTTP listener on a
port of its own was logged as "stream listener TCP/8080"), and where it says it is bound.
"""

from __future__ import annotations

import pytest

from ingress.model import ObjectRef
from ingress.proxy.streams.listeners import bound_address, describe
from ingress.routing.streams import StreamRoute
from ingress.routing.upstream import Upstream

NOWHERE = Upstream("gateway:8080", ())


def route(protocol: str, port: int, name: str, serves: str = "") -> StreamRoute:
    return StreamRoute(protocol, port, name, ObjectRef("Gateway" if serves else "StreamIngress", *name.split("/")), NOWHERE, serves=serves)


@pytest.mark.parametrize(
    ("stream", "joint", "named"),
    [
        (route("TCP", 9700, "demo/tcp-echo"), "", "stream listener TCP/9700 (demo/tcp-echo)"),
        (route("UDP", 9753, "demo/udp-echo"), "for", "stream listener UDP/9753 for demo/udp-echo"),
        (route("TCP", 8080, "infra/shared", serves="http"), "", "Gateway HTTP listener on port 8080 (infra/shared)"),
        (route("TCP", 8443, "infra/shared", serves="https"), "for", "Gateway HTTPS listener on port 8443 for infra/shared"),
    ],
)
def test_a_listener_is_named_as_what_it_is(stream: StreamRoute, joint: str, named: str) -> None:
    assert describe(stream.key, stream, joint) == named


@pytest.mark.parametrize(
    ("interface", "shown"),
    [("", "0.0.0.0:9700"), ("127.0.0.1", "127.0.0.1:9700"), ("::", "[::]:9700"), ("::1", "[::1]:9700")],
)
def test_the_bound_address_is_shown_as_ss_shows_it(interface: str, shown: str) -> None:
    assert bound_address(interface, 9700) == shown
