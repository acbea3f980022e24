# -*- test-case-name: tests.proxy.test_http_behaviour -*-
"""
The interface between an HTTP/1.1 upstream connection (L{ingress.proxy.request.upstream}) and
the request that owns it (L{ingress.proxy.request.exchange}): the connection is written against
it and the request implements it, so it belongs to neither module.
"""

from __future__ import annotations

from ingress.proxy.message import h1


class ResponseSink:
    """
    What an upstream connection reports to the request that owns it: the base class of
    L{ingress.proxy.request.exchange.Exchange} (here: the connection need not import it), a class
    and not a typing protocol so that, compiled, these calls are native.
    """

    __slots__ = ()

    request_method: bytes

    def upstream_head(self, head: h1.Head, body: bytes, complete: bool) -> None:
        raise NotImplementedError

    def upstream_data(self, data: bytes) -> None:
        raise NotImplementedError

    def upstream_done(self) -> None:
        raise NotImplementedError

    def upstream_failed(self, status: int, detail: str, responded: bool) -> None:
        raise NotImplementedError

    def upstream_tunnel_data(self, data: bytes) -> None:
        raise NotImplementedError

    def upstream_write_paused(self, paused: bool) -> None:
        raise NotImplementedError
