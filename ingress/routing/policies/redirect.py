# -*- test-case-name: tests.unit.test_policies -*-
"""Policies the proxy answers itself: a fixed redirect, and a closed route."""

from __future__ import annotations

from dataclasses import dataclass


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

    def location_for(self, scheme: bytes, host: str, target: bytes = b"/") -> bytes:
        """The Location field's value for a request to C{host} over C{scheme} (C{target}: its origin-form)."""
        if self.to_host:
            return b"%s://%s%s" % (scheme, self.to_host.encode("latin-1"), target)
        if self.location.startswith("/"):
            return b"%s://%s%s" % (scheme, host.encode("latin-1"), self.location.encode("latin-1"))
        return self.location.encode("latin-1")


@dataclass(frozen=True, slots=True)
class Deny:
    """
    The route answers C{status} to every request: it is guarded by something twingress
    cannot enforce (yet), and an unguarded route is worse than a closed one.
    """

    status: int
    reason: str
