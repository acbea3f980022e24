# -*- test-case-name: tests.unit.test_gateway_isolation -*-
"""
Listener isolation (GatewayHTTPListenerIsolation) and the HTTPS listeners' names for misdirected
requests (GatewayHTTPSListenerDetectMisdirectedRequests), over the served HTTP and HTTPS listeners.

Listeners are grouped by their port: a host belongs to the most specific listener of its port
that covers it (L{ListenerNames}).  A route attached to a listener keeps only the hosts that
belong to that listener (conformance tests/gateway-http-listener-isolation-with-hostname-intersection.yaml:
a route on the hostless listener that names *.example.com serves nothing there when a
*.example.com listener exists).  A listener hostname that a less specific listener of its port
also covers gets a place in the table even without routes, so that its requests find it (404)
instead of the less specific listener's routes.  The --http and --https listeners share one table:
such a place inherits what the other scheme's listeners serve there (L{Claim}).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Optional

from ingress.routing.gateway.listeners import ServedListener
from ingress.routing.listener_names import ListenerNames

_HTTP_PROTOCOLS = ("HTTP", "HTTPS")


@dataclass(frozen=True, slots=True)
class Claim:
    """A listener hostname the table needs though no route of that listener serves it (L{Isolation.claims})."""

    place: int  # the table place: 0 for the --http/--https table, else the listener's own port
    host: str
    fallback: Optional[str]  # the most specific host of that place that covered it before
    scheme: bytes  # the listener's: the fallback's candidates of this scheme are not inherited


class Isolation:
    """The served HTTP(S) listeners' names, per listener port, and per table place (0: the --http/--https table)."""

    def __init__(self, listeners: Iterable[ServedListener]) -> None:
        self._listeners = [s for s in listeners if s.served and s.listener.protocol in _HTTP_PROTOCOLS]
        by_port: dict[int, set[str]] = {}
        for served in self._listeners:
            by_port.setdefault(served.listener.port, set()).add(served.listener.hostname)
        self._names = {port: ListenerNames.of(names) for port, names in by_port.items()}

    def places(self, places: list[tuple[ServedListener, tuple[str, ...]]]) -> list[tuple[ServedListener, tuple[str, ...]]]:
        """A route's (listener, hosts) with the hosts a more specific listener of the same port owns left out."""
        kept = []
        for served, hosts in places:
            names = self._names.get(served.listener.port)
            if names is None:
                kept.append((served, hosts))
                continue
            own = tuple(h for h in hosts if names.listener_for(h) == served.listener.hostname)
            if own:
                kept.append((served, own))
        return kept

    def claims(self, places: Iterable[tuple[int, str]]) -> list[Claim]:
        """
        The listener hostnames to add to the table (module docstring): each with the place it goes to,
        the most specific host already in C{places} that covers it (None: none), and its listener's
        scheme, whose candidates that host must not inherit.
        """
        known: dict[int, set[str]] = {}
        for place, host in places:
            known.setdefault(place, set()).add(host)
        found = []
        for served in self._listeners:
            host, place = served.listener.hostname, _place_port(served)
            if host and host not in known.get(place, ()) and self._shadowed(served):
                fallback = ListenerNames.of(known.get(place, ())).listener_for(host)
                found.append(Claim(place, host, fallback, served.scheme))
        return found

    def https_names(self) -> Mapping[int, ListenerNames]:
        """Each table place's HTTPS listener names (place 0: the --https listeners)."""
        by_place: dict[int, set[str]] = {}
        for served in self._listeners:
            if served.listener.protocol == "HTTPS":
                by_place.setdefault(_place_port(served), set()).add(served.listener.hostname)
        return {place: ListenerNames.of(names) for place, names in by_place.items()}

    def _shadowed(self, served: ServedListener) -> bool:
        """Whether another, less specific listener of the same port covers this listener's hostname."""
        host = served.listener.hostname
        return any(
            other.listener.port == served.listener.port and other.listener.hostname != host and _covers(other, host)
            for other in self._listeners
        )


def _place_port(served: ServedListener) -> int:
    return served.listener.port if served.own_port else 0


def _covers(served: ServedListener, host: str) -> bool:
    """Whether the listener's hostname covers C{host} (a hostless listener covers every host)."""
    return ListenerNames.of([served.listener.hostname]).listener_for(host) is not None
