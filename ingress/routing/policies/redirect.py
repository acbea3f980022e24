# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""Policies the proxy answers itself: a fixed redirect, and a closed route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ingress.routing.policies.pathreplace import PathReplace


@dataclass(frozen=True, slots=True)
class Redirect:
    """
    Every request of the route gets C{code} with C{location}, the upstream is never asked.

    C{location} is absolute (scheme and host) or a path, which the proxy makes
    absolute with the request's scheme and host, as nginx's C{return} does.
    """

    code: int
    location: str = ""
    to_host: str = ""  # instead of a location: the same request URI on this host (from-to-www-redirect)
    keep_query: bool = False  # the request's query follows the location (nginx's "/p" to "/p/" redirect)

    def location_for(self, scheme: bytes, host: str, target: bytes = b"/", path: str = "") -> bytes:
        """The Location field's value for a request to C{host} over C{scheme} (C{target}: its origin-form; C{path} unused)."""
        if self.to_host:
            return b"%s://%s%s" % (scheme, self.to_host.encode("latin-1"), target)
        if self.location.startswith("/"):
            query = target.partition(b"?")[1:] if self.keep_query else (b"", b"")
            return b"%s://%s%s%s%s" % (scheme, host.encode("latin-1"), self.location.encode("latin-1"), *query)
        return self.location.encode("latin-1")

    def to_json(self) -> dict[str, object]:
        """For /debug/routes."""
        return {"code": self.code, "location": self.location or f"{self.to_host}$request_uri"}


@dataclass(frozen=True, slots=True)
class GatewayRedirect:
    """
    Gateway API RequestRedirect: the request's URL with the filter's scheme, hostname, port and
    path.  Without a port the spec's rules give it: the scheme's well-known port when a scheme is
    set, else the port of the listener the request came to (C{http_port}, C{https_port}); a port
    that is the scheme's well-known one is left out of the Location.
    """

    code: int
    scheme: str = ""
    hostname: str = ""
    port: Optional[int] = None
    path: Optional[PathReplace] = None
    http_port: int = 80
    https_port: int = 443

    def location_for(self, scheme: bytes, host: str, target: bytes = b"/", path: str = "") -> bytes:
        """The Location for a request over C{scheme} to C{host} (without port) with origin-form C{target} and normalised C{path}."""
        to_scheme = self.scheme or scheme.decode("latin-1")
        if self.port is not None:
            port = self.port
        elif self.scheme:
            port = 443 if self.scheme == "https" else 80
        else:
            port = self.https_port if scheme == b"https" else self.http_port
        authority = self.hostname or host
        if port != (443 if to_scheme == "https" else 80):
            authority += f":{port}"
        resource = target
        if self.path is not None:
            resource = self.path.target_for(path or target.partition(b"?")[0].decode("latin-1"), target.partition(b"?")[2])
        return b"%s://%s%s" % (to_scheme.encode("latin-1"), authority.encode("latin-1"), resource)

    def to_json(self) -> dict[str, object]:
        """For /debug/routes."""
        shown: dict[str, object] = {"code": self.code}
        for key, value in (("scheme", self.scheme), ("hostname", self.hostname), ("port", self.port)):
            if value:
                shown[key] = value
        if self.path is not None:
            shown["path"] = self.path.to_json()
        return shown


@dataclass(frozen=True, slots=True)
class Deny:
    """
    The route answers C{status} to every request: it is guarded by something twingress
    cannot enforce (yet), and an unguarded route is worse than a closed one.
    """

    status: int
    reason: str
