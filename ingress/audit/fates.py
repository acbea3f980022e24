# -*- test-case-name: tests.unit.test_audit -*-
"""
The fate of every annotation and ConfigMap key, read off what the build said of it.

Nothing here knows what a key means: the annotations are read by L{read_annotations}, the function
the build reads them with, and everything else comes from the built table (its problems, the routes it
closed).  A fate is C{applied} (read and in force), C{denied} (the routes it is on answer an error, or its
paths are left out: traffic is affected) or C{reported} (not applied, traffic unaffected).  A problem
is the key's when its message starts with the key (or its name without the prefix), which is how
every problem of the annotation and ConfigMap readers is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from ingress.model import ConfigMap, Ingress, ObjectRef, Problem
from ingress.routing.annotations import INVALID, INVALID_PATH, NGINX_PREFIX, PREFIX, IngressAnnotations
from ingress.routing.annotations.keys import KEYS, is_snippet
from ingress.routing.nginx_config import UNENFORCED
from ingress.routing.route import Route
from ingress.routing.table import HostRoutes, RoutingTable

APPLIED, DENIED, REPORTED = "applied", "denied", "reported"
FATES = (APPLIED, DENIED, REPORTED)

# Problems of an Ingress after which its routes answer an error or its paths are left out (the
# messages say so: "answer 503", "answer 403", "are not served"); every other problem changes nothing.
CLOSING_REASONS = frozenset(
    {INVALID, INVALID_PATH, UNENFORCED, "SecretNotFound", "InvalidExternalAuth", "InvalidCustomHeaders", "InvalidClientAuth"}
)


@dataclass(frozen=True, slots=True)
class Fate:
    """One key's fate, why, and for a snippet what it held (never a Secret's data: annotations and ConfigMap values only)."""

    key: str
    fate: str
    message: str
    snippet: Optional[str] = None

    def to_json(self) -> dict[str, str]:
        shown = {"key": self.key, "fate": self.fate, "message": self.message}
        if self.snippet is not None:
            shown["snippet"] = self.snippet
        return shown


@dataclass(frozen=True, slots=True)
class RouteSeen:
    """A route of the table as the audit shows it: where, and the error it answers when it is closed."""

    host: str
    path: str
    path_type: str
    deny_status: Optional[int] = None
    deny_reason: str = ""
    canary_of: str = ""  # a canary's route: the main Ingress it takes requests from

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"host": self.host, "path": self.path, "pathType": self.path_type}
        if self.deny_status is not None:
            shown["denied"] = {"status": self.deny_status, "reason": self.deny_reason}
        if self.canary_of:
            shown["canaryOf"] = self.canary_of
        return shown


def routes_by_ingress(table: RoutingTable) -> dict[ObjectRef, list[RouteSeen]]:
    """Every route of the table (hosts, wildcards, host-less rules, the default backend, canaries) by the object that made it."""
    found: dict[ObjectRef, list[RouteSeen]] = {}
    groups: list[tuple[str, HostRoutes]] = [(host, routes) for host, routes in sorted(table.hosts.items())]
    groups += [("*." + host, routes) for host, routes in sorted(table.wildcards.items())]
    if table.any_host is not None:
        groups.append(("*", table.any_host))
    for host, routes in groups:
        for route in [*routes.exact.values(), *routes.prefixes.values(), *(route for _, route in routes.regex)]:
            _add(found, host, route)
    if table.default_route is not None:
        _add(found, "*", table.default_route, default=True)
    return found


def _add(found: dict[ObjectRef, list[RouteSeen]], host: str, route: Route, default: bool = False) -> None:
    deny = route.policies.deny if route.policies is not None else None
    path = "(default backend)" if default else route.path
    seen = RouteSeen(host, path, route.path_type, deny.status if deny else None, deny.reason if deny else "")
    found.setdefault(route.source, []).append(seen)
    canary = route.policies.canary if route.policies is not None else None
    if canary is not None:
        found.setdefault(canary.route.source, []).append(RouteSeen(host, path, route.path_type, canary_of=str(route.source)))


def annotation_fates(
    ingress: Ingress, read: IngressAnnotations, problems: Sequence[Problem], nginx: bool, routes: Sequence[RouteSeen]
) -> tuple[list[Fate], list[Problem]]:
    """
    The fate of each C{twingress.io/} and C{nginx.ingress.kubernetes.io/} annotation of a served
    Ingress, and the Ingress's problems that are no annotation's (a conflict, a missing Service).
    """
    annotations = ingress.meta.annotations
    left = list(problems)
    fates = []
    denied = any(route.deny_status is not None for route in routes)
    for key, value in sorted(annotations.items()):
        name = _name(key)
        if name is None:
            continue
        mine = [p for p in left if _names_key(p.message, key, name)]
        left = [p for p in left if p not in mine]
        snippet = value if is_snippet(name) else None
        if key.startswith(NGINX_PREFIX) and not nginx:
            fates.append(Fate(key, REPORTED, "not read: --nginx-annotations false"))
        elif key.startswith(NGINX_PREFIX) and PREFIX + name in annotations and name in KEYS:
            fates.append(Fate(key, REPORTED, f"not read: {PREFIX}{name} is set too, and wins"))
        elif key in read.unguarded or any(p.reason in CLOSING_REASONS for p in mine):
            fates.append(Fate(key, DENIED, _message(mine) or f"{key} is not enforced: the Ingress's routes answer 503", snippet))
        elif mine:
            fates.append(Fate(key, DENIED if denied and _closes(mine) else REPORTED, _message(mine), snippet))
        elif name in read.values and not routes:  # read, but nothing of the Ingress is served (its other problems say why)
            fates.append(Fate(key, REPORTED, f"read: {_short(value)!r}, but not in force: the Ingress serves no route"))
        elif name in read.values:
            fates.append(Fate(key, APPLIED, f"read: {_short(value)!r}"))
        else:  # read nowhere and reported nowhere: should not happen (the reader reports every key); never hidden
            fates.append(Fate(key, REPORTED, f"{key}: not read", snippet))
    return fates, left


def skipped_fates(ingress: Ingress, why: str) -> list[Fate]:
    """An Ingress twingress does not serve: none of its annotations is read."""
    return [
        Fate(key, REPORTED, f"not read: the Ingress is not served ({why})")
        for key in sorted(ingress.meta.annotations)
        if _name(key) is not None
    ]


def config_map_fates(config_map: ConfigMap, problems: Iterable[Problem]) -> tuple[list[Fate], list[Problem]]:
    """The fate of each key of the controller ConfigMap, and its problems that are no key's."""
    left = list(problems)
    fates = []
    for key, value in config_map.data:
        mine = [p for p in left if _names_key(p.message, key, key) or _companion(p.message, key)]
        left = [p for p in left if p not in mine]
        snippet = value if key.endswith("-snippet") else None
        if any(p.reason == UNENFORCED for p in mine):
            fates.append(Fate(key, DENIED, _message(mine), snippet))
        elif mine:
            fates.append(Fate(key, REPORTED, _message(mine), snippet))
        else:
            fates.append(Fate(key, APPLIED, f"read: {_short(value)!r}"))
    return fates, left


def _name(key: str) -> Optional[str]:
    for prefix in (PREFIX, NGINX_PREFIX):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return None


def _names_key(message: str, *keys: str) -> bool:
    """Whether a problem's message is about C{key}: it starts with it, followed by a space or a colon."""
    return any(message.startswith(key) and message[len(key) : len(key) + 1] in (" ", ":", "") for key in keys)


def _companion(message: str, key: str) -> bool:
    """The global auth's companions are reported in one problem that lists them ("a, b: no effect without global-auth-url")."""
    head = message.split(": ", 1)[0]
    return key in head.split(", ")


def _closes(problems: Iterable[Problem]) -> bool:
    return any("answer" in p.message or "not served" in p.message for p in problems)


def _message(problems: Iterable[Problem]) -> str:
    return "; ".join(f"{p.reason}: {p.message}" for p in problems)


def _short(value: str) -> str:
    return value if len(value) <= 120 else value[:117] + "..."


def counts(fates: Iterable[Fate]) -> dict[str, int]:
    """How many of each fate (every fate named, zero or not)."""
    found = dict.fromkeys(FATES, 0)
    for fate in fates:
        found[fate.fate] += 1
    return found


def by_fate(found: Mapping[str, int]) -> str:
    return ", ".join(f"{found[fate]} {fate}" for fate in FATES)
