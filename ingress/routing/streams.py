# -*- test-case-name: tests.unit.test_streams -*-
"""
Stream routes: what a raw TCP or UDP listener port forwards to.

A L{StreamRoute} is the stream counterpart of L{ingress.routing.route.Route}:
one per (protocol, port) that won, with the object that asked for it and the
L{Upstream} (ready pod endpoints, or an external host) its traffic goes to.
The listener manager in L{ingress.proxy} opens, moves and closes listeners by
comparing the C{streams} of two tables.  Pure: no I/O, no Twisted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ingress.model import ObjectRef
from ingress.routing.route import Upstream

TCP, UDP = "TCP", "UDP"
PROXY_V1, PROXY_V2 = "v1", "v2"
DEFAULT_STREAM_IDLE_TIMEOUT = 600.0  # seconds, as nginx's proxy_timeout for streams is often raised to


@dataclass(frozen=True, slots=True)
class StreamRoute:
    """
    One stream listener: C{protocol} ("TCP" or "UDP") on C{port}, to C{upstream}.

    C{name} is the metrics label ("namespace/name" of the StreamIngress, or
    "namespace/configmap:port" for an ingress-nginx ConfigMap entry).
    C{proxy_protocol} is None, "v1" or "v2": the PROXY header sent to the
    upstream before the client's bytes (TCP only).
    """

    protocol: str
    port: int
    name: str
    source: ObjectRef
    upstream: Upstream
    proxy_protocol: Optional[str] = None
    idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT

    @property
    def key(self) -> tuple[str, int]:
        """What identifies a listener: a change of anything else moves traffic, not the socket."""
        return (self.protocol, self.port)
