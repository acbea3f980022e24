# -*- test-case-name: tests.unit.test_rate_limits -*-
"""
Counting requests against rate limits: nginx's limit_req, in one process for the whole instance.

Each zone keeps, per client address, the "excess" nginx's limit_req keeps: it grows by one
request per request and drains at the zone's rate; a request that would take it over the
zone's burst is refused and changes nothing (ngx_http_limit_req_module, with C{nodelay} as
ingress-nginx configures it).  A request must pass every zone of its route, and is counted
in them only if it passes all of them.

Memory is bounded: a zone remembers at most L{ADDRESSES} addresses and forgets the one
touched longest ago when a new one comes (nginx evicts the same way from a full zone), so a
flood from a million source addresses costs a bounded table, not memory.

With worker processes the primary holds the zones and each worker asks it over the channel
(L{RemoteRates}): the limit holds for the instance whichever worker a connection lands on.
A question the primary does not answer within a second lets the request through (a limit
protects a backend from load, it does not guard access; the primary is then stalled or gone,
and a worker without its primary exits).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any, Optional, Union

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from ingress.routing.policies.ratelimit import Zone

ADDRESSES = 65_536  # per zone: about what ingress-nginx's 5m zones hold
ANSWER_WAIT = 1.0


class RequestRates:
    """Every zone's state: address → (excess in requests, when it was last counted)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, addresses: int = ADDRESSES) -> None:
        self.clock = clock
        self.addresses = addresses
        self._zones: dict[str, dict[str, tuple[float, float]]] = {}
        self._busy: dict[tuple[str, str], int] = {}  # limit-connections: requests in progress per zone and address

    def take(self, zones: tuple[Zone, ...], address: str) -> bool:
        """Whether a request from C{address} passes every zone (counted in all of them if so)."""
        now = self.clock()
        counted = []
        for zone in zones:
            entries = self._zones.get(zone.name)
            if entries is None:
                entries = self._zones[zone.name] = {}
            state = entries.pop(address, None)  # re-inserted below: the dict's order is the order of last use
            if state is None:
                if len(entries) >= self.addresses:
                    entries.pop(next(iter(entries)))
                excess = 0.0
            else:
                excess = max(0.0, state[0] - zone.rate * max(0.0, now - state[1]) + 1.0)
                entries[address] = state
                if excess > zone.burst:
                    return False
            counted.append((entries, excess))
        for entries, excess in counted:
            entries[address] = (excess, now)
        return True

    def size(self) -> int:
        return sum(len(entries) for entries in self._zones.values())

    def enter(self, zone: str, limit: int, address: str) -> bool:
        """One more request of C{address} in progress in C{zone}, unless C{limit} are already (nginx's limit_conn)."""
        key = (zone, address)
        busy = self._busy.get(key, 0)
        if busy >= limit:
            return False
        self._busy[key] = busy + 1
        return True

    def leave(self, zone: str, address: str) -> None:
        """A request counted by L{enter} is over (entries at zero are dropped: the table holds only what is in progress)."""
        key = (zone, address)
        busy = self._busy.get(key, 0) - 1
        if busy > 0:
            self._busy[key] = busy
        else:
            self._busy.pop(key, None)


class RemoteRates:
    """A worker's view: each question goes to the primary's L{RequestRates} over the channel."""

    def __init__(self, reactor: IReactorTime) -> None:
        self.reactor = reactor
        self.send: Optional[Callable[..., None]] = None  # the channel's, once it exists
        self._ids = itertools.count(1)
        self._waiting: dict[int, Deferred[bool]] = {}

    def take(self, zones: tuple[Zone, ...], address: str) -> Deferred[bool]:
        return self._ask("rate?", zones, address)

    def enter(self, zone: str, limit: int, address: str) -> Deferred[bool]:
        return self._ask("conn?", zone, limit, address)

    def leave(self, zone: str, address: str) -> None:
        if self.send is not None:
            self.send("conn-", zone, address)

    def _ask(self, *question: Any) -> Deferred[bool]:
        asked: Deferred[bool] = Deferred()
        if self.send is None:
            asked.callback(True)
            return asked
        request = next(self._ids)
        self._waiting[request] = asked
        asked.addTimeout(ANSWER_WAIT, self.reactor, onTimeoutCancel=lambda result, timeout: True)
        asked.addBoth(self._forget, request)
        self.send(question[0], request, *question[1:])
        return asked

    def answered(self, request: int, allowed: bool) -> None:
        asked = self._waiting.pop(request, None)
        if asked is not None and not asked.called:
            asked.callback(allowed)

    def _forget(self, result: Any, request: int) -> Any:
        self._waiting.pop(request, None)
        return result


Rates = Union[RequestRates, RemoteRates]
