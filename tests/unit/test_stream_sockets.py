"""
The primary's stream sockets (L{ingress.process.streamsockets}), on real sockets bound to 127.0.0.1
and a fake clock: groups bound when a table adds a port, a bind failure kept with its error, a
dropped TCP group closed only once every worker serves past it, a dropped UDP group held through the
drain and the same sockets again when its port comes back, a predecessor's sockets adopted only
where our options say and the unclaimed ones closed once a table is live.
"""

from __future__ import annotations

import dataclasses
import socket

from twisted.internet.task import Clock

from ingress.observe.metrics import Metrics
from ingress.process.handoverwire import describe
from ingress.process.streamsockets import UDP_HOLD_MARGIN, StreamSockets, listener_name
from ingress.routing.table import RoutingTable
from tests.proxy.streams_support import stream_route, table
from tests.support import free_port


def _table(generation: int, *routes: object) -> RoutingTable:
    return dataclasses.replace(table(*routes), generation=generation)  # type: ignore[arg-type]


def _owner(clock: Clock, count: int = 2, **kw: object) -> StreamSockets:
    return StreamSockets(clock, Metrics(), "127.0.0.1", count=count, drain_timeout=10.0, **kw)  # type: ignore[arg-type]


def _closed(sock: socket.socket) -> bool:
    return sock.fileno() == -1


def test_a_new_port_is_a_group_of_one_socket_per_worker_sent_once() -> None:
    owner, sent = _owner(Clock()), []
    owner.sent = lambda key, sockets: sent.append((key, len(sockets)))
    port = free_port()
    routes = (stream_route("TCP", port, [("127.0.0.1", 9)]),)
    owner.update(_table(1, *routes))
    owner.apply(_table(1, *routes))  # the swap after the commit: nothing new
    group = owner.groups[("TCP", port)]
    assert sent == [(("TCP", port), 2)]
    assert [sock.getsockname() for sock in group.sockets] == [("127.0.0.1", port)] * 2
    assert all(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) for sock in group.sockets)


def test_a_port_that_cannot_be_bound_keeps_its_error_and_is_retried() -> None:
    owner = _owner(Clock())
    with socket.create_server(("127.0.0.1", 0)) as busy:  # no SO_REUSEPORT: nobody joins it
        port = busy.getsockname()[1]
        owner.apply(_table(1, stream_route("TCP", port, [("127.0.0.1", 9)])))
        assert "in use" in owner.failures[("TCP", port)]
        assert ("TCP", port) not in owner.groups
    owner.apply(_table(2, stream_route("TCP", port, [("127.0.0.1", 9)])))
    assert owner.failures == {} and len(owner.groups[("TCP", port)].sockets) == 2


def test_a_dropped_tcp_port_closes_once_every_worker_serves_past_it() -> None:
    owner, port = _owner(Clock()), free_port()
    owner.apply(_table(1, stream_route("TCP", port, [("127.0.0.1", 9)])))
    sockets = owner.groups[("TCP", port)].sockets
    owner.apply(_table(2))
    assert not any(_closed(sock) for sock in sockets)  # a descriptor may still be queued on a channel
    owner.served(1)
    assert not any(_closed(sock) for sock in sockets)
    owner.served(2)
    assert all(_closed(sock) for sock in sockets)


def test_a_dropped_udp_port_is_held_through_the_drain_and_comes_back_the_same() -> None:
    clock, port = Clock(), free_port(kind=socket.SOCK_DGRAM)
    owner, sent = _owner(clock), []
    owner.sent = lambda key, sockets: sent.append(sockets)
    route = stream_route("UDP", port, [("127.0.0.1", 9)])
    owner.apply(_table(1, route))
    first = owner.groups[("UDP", port)].sockets
    owner.apply(_table(2))
    clock.advance(10.0)  # the workers' drain is over, the margin is not
    assert not any(_closed(sock) for sock in first)
    owner.apply(_table(3, route))
    assert owner.groups[("UDP", port)].sockets is first and sent == [first, first]  # sent again: a worker whose drain ended has none
    owner.apply(_table(4))
    clock.advance(10.0 + UDP_HOLD_MARGIN)
    assert all(_closed(sock) for sock in first) and owner.held == {}


def test_a_predecessors_sockets_are_adopted_where_our_options_say_and_the_rest_closed() -> None:
    port, elsewhere, unused = free_port(), free_port(), free_port()
    fitting = socket.create_server(("127.0.0.1", port), reuse_port=True)
    misplaced = socket.create_server(("127.0.0.2", elsewhere), reuse_port=True)
    unclaimed = socket.create_server(("127.0.0.1", unused), reuse_port=True)
    inherited = [
        (describe(listener_name(("TCP", port), ""), fitting), fitting),
        (dataclasses.replace(describe("x", misplaced), listener=listener_name(("TCP", elsewhere), "")), misplaced),
        (describe(listener_name(("TCP", unused), ""), unclaimed), unclaimed),
    ]
    owner = _owner(Clock(), count=3, inherited=inherited)
    routes = (stream_route("TCP", port, [("127.0.0.1", 9)]), stream_route("TCP", elsewhere, [("127.0.0.1", 9)], name="default/other"))
    owner.update(_table(1, *routes))  # the builder's commit: the table is not live yet
    assert not _closed(unclaimed)
    owner.apply(_table(1, *routes))
    group = owner.groups[("TCP", port)]
    assert group.sockets[0] is fitting and len(group.sockets) == 3  # and two fresh ones of the same group
    assert _closed(misplaced) and owner.groups[("TCP", elsewhere)].sockets[0].getsockname() == ("127.0.0.1", elsewhere)
    assert _closed(unclaimed)
    owner.close()
    assert _closed(fitting)
