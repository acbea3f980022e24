# -*- test-case-name: tests.unit.test_kube_outage -*-
"""
An apiserver outage, as the log tells it: each informer says once that it fails and once that it
works again (L{ingress.sources.kube.reflector.Reflector}); while any fails, one line every
L{SUMMARY_SECONDS} says how many, for how long, and the last error, instead of one line per informer
per try; and one line says when the outage is over.  Reactor thread only; the clock is the reactor
(a C{MemoryReactorClock} in tests).
"""

from __future__ import annotations

from typing import Optional

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

SUMMARY_SECONDS = 30.0


class Outage:
    """Which informers cannot list or watch now, since when, and the summary line while any cannot."""

    def __init__(self, clock: IReactorTime, server: str, every: float = SUMMARY_SECONDS) -> None:
        self.clock = clock
        self.server = server
        self.every = every
        self.failing: dict[str, float] = {}  # informer → when this outage first saw it fail
        self.total = 0
        self._began: Optional[float] = None
        self._last_error = ""
        self._summary: Optional[IDelayedCall] = None

    def update(self, name: str, failing: bool, error: str, total: int) -> bool:
        """
        C{name}'s state now (C{failing}, with its last C{error}), out of C{total} informers;
        returns True when it has just reached the apiserver again (the others may try at once).
        """
        self.total = total
        if failing:
            self._last_error = error or self._last_error
            if name not in self.failing:
                self.failing[name] = self.clock.seconds()
                self._begin()
            return False
        if self.failing.pop(name, None) is None:
            return False
        if not self.failing:
            self._end()
        return True

    def _begin(self) -> None:
        if self._began is None:
            self._began = self.clock.seconds()
            self._summary = self.clock.callLater(self.every, self._summarize)

    def _summarize(self) -> None:
        log.warn(
            "{failing} of {total} informers cannot list/watch from the apiserver at {server} for {seconds:.0f} s: {error}",
            failing=len(self.failing),
            total=self.total,
            server=self.server,
            seconds=self.clock.seconds() - (self._began or 0.0),
            error=self._last_error,
        )
        self._summary = self.clock.callLater(self.every, self._summarize)

    def _end(self) -> None:
        log.info(
            "the apiserver at {server} answers every informer again, {seconds:.1f} s after the first failed",
            server=self.server,
            seconds=self.clock.seconds() - (self._began or 0.0),
        )
        if self._summary is not None and self._summary.active():
            self._summary.cancel()
        self._summary, self._began, self._last_error = None, None, ""

    def stop(self) -> None:
        """No summary after the source stops."""
        if self._summary is not None and self._summary.active():
            self._summary.cancel()
        self._summary = None
