# -*- test-case-name: tests.kube.test_annotation_events -*-
"""
Warning Events for what an Ingress asks and twingress refuses (an unknown,
unreadable or unsupported annotation, a path that is no regex): the problem appears where its author looks,
C{kubectl describe ingress}, and not only in our log and C{/debug/routes}.

The routing table already holds these problems; each table that changes an
Ingress's set of them queues that Ingress, and the sync (on a controller
thread, on the Lease holder only) records one Warning per problem.  The event
recorder drops repeats of the same Warning for the same object version.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from ingress.controllers.events import WARNING, EventRecorder
from ingress.model import Ingress, Problem
from ingress.routing.annotations import CANARY_WITHOUT_MAIN, INVALID, INVALID_PATH, UNKNOWN, UNSUPPORTED
from ingress.routing.table import RoutingTable
from ingress.sources.kube.reflector import Store

REASONS = frozenset({UNKNOWN, INVALID, UNSUPPORTED, INVALID_PATH, CANARY_WITHOUT_MAIN})

Key = tuple[str, str]


class IngressProblemEvents:
    """A controller sync: (namespace, name) of an Ingress → its Warning Events."""

    def __init__(self, events: EventRecorder, ingresses: Store) -> None:
        self.events = events
        self.ingresses = ingresses
        self._lock = threading.Lock()
        self._problems: dict[Key, tuple[Problem, ...]] = {}
        self._recorded: dict[Key, set[tuple[str, str]]] = {}  # (reason, message) already told, per Ingress
        self._seen: tuple[Problem, ...] = ()  # the problems of the last table (an incremental update keeps the tuple when they did not change)

    def table_changed(self, table: RoutingTable) -> set[Hashable]:
        """A new table (reactor thread): the Ingresses whose problems changed."""
        if table.problems is self._seen:
            return set()
        self._seen = table.problems
        current: dict[Key, list[Problem]] = {}
        for problem in table.problems:
            if problem.ref.kind == "Ingress" and problem.reason in REASONS:
                current.setdefault((problem.ref.namespace, problem.ref.name), []).append(problem)
        frozen = {key: tuple(problems) for key, problems in current.items()}
        with self._lock:
            previous, self._problems = self._problems, frozen
        return {key for key in previous.keys() | frozen.keys() if previous.get(key) != frozen.get(key)}

    def keys(self) -> list[Key]:
        """Every Ingress with problems now (becoming leader, resync)."""
        with self._lock:
            return list(self._problems)

    def __call__(self, key: Key) -> None:
        """Record the problems that appeared since the last sync of this Ingress (each once, not per edit)."""
        with self._lock:
            problems = self._problems.get(key, ())
            told = self._recorded.get(key, set())
        ingress = self.ingresses.get(key)
        if not isinstance(ingress, Ingress):
            return  # gone (or not yet in our store): nothing to tell it, nothing marked as told
        for problem in problems:
            if (problem.reason, problem.message) not in told:
                self.events.record(ingress.meta, "Ingress", WARNING, problem.reason, "Route", problem.message)
        now = {(p.reason, p.message) for p in problems}  # a problem fixed and made again is told again
        with self._lock:
            if now:
                self._recorded[key] = now
            else:
                self._recorded.pop(key, None)
