# -*- test-case-name: tests.unit.test_gateway_mirror -*-
"""
Copies of a route's requests sent to other backends whose answers are ignored (Gateway API
RequestMirror: "Requests are sent to the specified destination, but responses from that
destination are ignored"), each for a share of the requests (its C{percent} or C{fraction}).

A copy never holds the request up: it is written as the original is, and a mirror that cannot
take the bytes as fast as the client sends them, has no endpoint, or is down loses its copy
(counted), not the client its answer.

ingress-nginx's C{mirror-target} (annotations.md "Mirror") names a URL instead of a backend, with
nginx variables in its path (C{https://test.env.com$request_uri}): an L{URLMirror}, reached by its
host name or address as nginx's C{proxy_pass} does (over TLS for https, not verified, nginx's default).
"""

from __future__ import annotations

from dataclasses import dataclass

from ingress.routing.policies.variables import Part
from ingress.routing.upstream import Upstream


@dataclass(frozen=True, slots=True)
class MirrorTarget:
    """One mirror: where the copies go, and the share of requests copied (0 < percent <= 100)."""

    upstream: Upstream
    percent: float = 100.0


@dataclass(frozen=True, slots=True)
class URLMirror:
    """
    ingress-nginx's mirror-target: copies of every request to C{host}:C{port} (TLS with C{tls}),
    for the target C{path} (a template; empty: the request's own target) with Host C{authority}
    (mirror-host, else the URL's), with the request body unless C{body} is False (mirror-request-body: "off").
    """

    url: str
    tls: bool
    host: str
    port: int
    authority: str
    path: tuple[Part, ...]
    body: bool = True

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "host": self.authority, "requestBody": self.body}


@dataclass(frozen=True, slots=True)
class Mirror:
    """Every mirror of a route (Gateway API allows several RequestMirror filters on a rule; ingress-nginx names one URL)."""

    targets: tuple[MirrorTarget, ...]
    urls: tuple[URLMirror, ...] = ()

    def to_json(self) -> list[dict[str, object]]:
        shown = [{"upstream": t.upstream.key, "endpoints": [f"{h}:{p}" for h, p in t.upstream.targets], "percent": t.percent} for t in self.targets]
        return shown + [u.to_json() for u in self.urls]
