# -*- test-case-name: tests.kube.test_annotation_events -*-
"""
Warning Events for what an Ingress asks and twingress refuses (an unknown,
unreadable or unsupported annotation, a path that is no regex): the problem appears where its author looks,
C{kubectl describe ingress}, and not only in our log and C{/debug/routes}.  The same for the
ingress-nginx controller ConfigMap (--nginx-configmap): a guard it cannot enforce, a key it does not
read, a value it cannot read are Warnings on that ConfigMap (C{kubectl describe configmap}).

The build report already holds these problems; each build that changes an
Ingress's set of them queues that Ingress, and the sync (on a controller
thread, on the Lease holder only) records one Warning per problem.  The event
recorder drops repeats of the same Warning for the same object version.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Optional

from ingress.controllers.events import WARNING, EventRecorder
from ingress.model import ConfigMap, Ingress, Problem
from ingress.routing import nginx_config
from ingress.routing.annotations import CANARY_WITHOUT_MAIN, INVALID, INVALID_PATH, UNKNOWN, UNSUPPORTED
from ingress.routing.report import BuildReport
from ingress.sources.kube.reflector import Store

REASONS = frozenset({UNKNOWN, INVALID, UNSUPPORTED, INVALID_PATH, CANARY_WITHOUT_MAIN})
CONFIG_REASONS = frozenset({nginx_config.INVALID, nginx_config.UNSUPPORTED, nginx_config.UNKNOWN, nginx_config.UNENFORCED})

Key = tuple[str, ...]
"""(namespace, name) of an Ingress; ("ConfigMap", namespace, name) of the controller ConfigMap."""


class IngressProblemEvents:
    """A controller sync: (namespace, name) of an Ingress → its Warning Events."""

    def __init__(self, events: EventRecorder, ingresses: Store, config_maps: Optional[Store] = None) -> None:
        self.events = events
        self.ingresses = ingresses
        self.config_maps = config_maps
        self._lock = threading.Lock()
        self._problems: dict[Key, tuple[Problem, ...]] = {}
        self._recorded: dict[Key, set[tuple[str, str]]] = {}  # (reason, message) already told, per Ingress
        self._seen: tuple[Problem, ...] = ()  # the problems of the last table (an incremental update keeps the tuple when they did not change)

    def table_changed(self, report: BuildReport) -> set[Hashable]:
        """A new build's report (reactor thread): the Ingresses whose problems changed."""
        if report.problems is self._seen:
            return set()
        self._seen = report.problems
        current: dict[Key, list[Problem]] = {}
        for problem in report.problems:
            if problem.ref.kind == "Ingress" and problem.reason in REASONS:
                current.setdefault((problem.ref.namespace, problem.ref.name), []).append(problem)
            elif problem.ref.kind == "ConfigMap" and problem.reason in CONFIG_REASONS and self.config_maps is not None:
                current.setdefault(("ConfigMap", problem.ref.namespace, problem.ref.name), []).append(problem)
        frozen = {key: tuple(problems) for key, problems in current.items()}
        with self._lock:
            previous, self._problems = self._problems, frozen
        return {key for key in previous.keys() | frozen.keys() if previous.get(key) != frozen.get(key)}

    def keys(self) -> list[Key]:
        """Every Ingress with problems now (becoming leader, resync)."""
        with self._lock:
            return list(self._problems)

    def _object(self, key: Key) -> Optional[Ingress | ConfigMap]:
        """The Ingress or ConfigMap of C{key} in our stores, None when gone."""
        if len(key) == 3:
            found = self.config_maps.get((key[1], key[2])) if self.config_maps is not None else None
            return found if isinstance(found, ConfigMap) else None
        ingress = self.ingresses.get((key[0], key[1]))
        return ingress if isinstance(ingress, Ingress) else None

    def __call__(self, key: Key) -> None:
        """Record the problems that appeared since the last sync of this Ingress (each once, not per edit)."""
        with self._lock:
            problems = self._problems.get(key, ())
            told = self._recorded.get(key, set())
        found = self._object(key)
        if found is None:
            return  # gone (or not yet in our store): nothing to tell it, nothing marked as told
        kind = "ConfigMap" if isinstance(found, ConfigMap) else "Ingress"
        for problem in problems:
            if (problem.reason, problem.message) not in told:
                self.events.record(found.meta, kind, WARNING, problem.reason, "Route", problem.message)
        now = {(p.reason, p.message) for p in problems}  # a problem fixed and made again is told again
        with self._lock:
            if now:
                self._recorded[key] = now
            else:
                self._recorded.pop(key, None)
