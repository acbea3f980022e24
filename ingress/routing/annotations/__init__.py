# -*- test-case-name: tests.unit.test_annotations -*-
"""
The annotations of an Ingress, read once per build into values, and the problems of the rest.

Nothing an Ingress says is ignored silently: an unknown C{twingress.io/} key (a
typo), an ingress-nginx key twingress does not implement, or a snippet each
become a L{Problem} on the Ingress (logged once, counted, shown in
C{/debug/routes}, a Warning Event in kube mode).  A value that cannot be read
is an C{InvalidAnnotation} and the Ingress's paths are left out of the table
(never a silent default); the rest of the table is built as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from ingress.model import Ingress, Problem
from ingress.routing.annotations.keys import ACCESS_GUARDS, ENFORCED_GUARDS, HARMLESS, KEYS, SNIPPETS, guard_like, is_snippet
from ingress.routing.annotations.values import InvalidValue
from ingress.routing.snippets import guarding_directive

PREFIX = "twingress.io/"
NGINX_PREFIX = "nginx.ingress.kubernetes.io/"
UNKNOWN, INVALID, UNSUPPORTED = "UnknownAnnotation", "InvalidAnnotation", "UnsupportedAnnotation"
INVALID_PATH = "InvalidPath"  # a path of a regex host (use-regex, rewrite-target) that is no regular expression
CANARY_WITHOUT_MAIN = "CanaryWithoutMain"  # a canary Ingress's path that no main Ingress serves

__all__ = ["CANARY_WITHOUT_MAIN", "INVALID", "INVALID_PATH", "NGINX_PREFIX", "PREFIX", "UNKNOWN", "UNSUPPORTED", "IngressAnnotations", "read_annotations"]


@dataclass(frozen=True, slots=True)
class IngressAnnotations:
    """
    What one Ingress's annotations say: C{values} by key (without prefix), read.

    C{invalid}: a value could not be read, so the Ingress's paths are not
    served.  C{unguarded}: access guards it asks for that twingress does not
    enforce, or cannot read, so its routes are closed.
    """

    values: Mapping[str, object]
    problems: tuple[Problem, ...] = ()
    invalid: bool = False
    unguarded: tuple[str, ...] = ()

    def flag(self, key: str, default: bool = False) -> bool:
        """A boolean key's value, or C{default} when the Ingress does not set it."""
        value = self.values.get(key, default)
        assert isinstance(value, bool)
        return value

    def text(self, key: str) -> str:
        """A text key's value, or "" when not set."""
        value = self.values.get(key, "")
        assert isinstance(value, str)
        return value

    def number(self, key: str) -> Optional[float]:
        """A numeric key's value, or None when not set."""
        value = self.values.get(key)
        assert value is None or isinstance(value, (int, float))
        return value

    def value(self, key: str) -> object:
        """A key's read value as it is (None when not set)."""
        return self.values.get(key)

    @property
    def canary(self) -> bool:
        """ingress-nginx "Canary": the Ingress only adds a backend to the main Ingress of its host and path."""
        return self.flag("canary")

    @property
    def regex_paths(self) -> bool:
        """ingress-nginx "Use Regex": use-regex or rewrite-target make the host's paths regular expressions."""
        return self.flag("use-regex") or bool(self.text("rewrite-target"))


NO_ANNOTATIONS = IngressAnnotations({})


def read_annotations(ingress: Ingress, nginx: bool = True) -> IngressAnnotations:
    """Every key under our prefixes read, or reported; C{nginx} reads C{nginx.ingress.kubernetes.io/} too."""
    annotations = ingress.meta.annotations
    if not any(k.startswith(PREFIX) or k.startswith(NGINX_PREFIX) for k in annotations):
        return NO_ANNOTATIONS
    found: dict[str, object] = {}
    problems: list[Problem] = []
    unguarded: list[str] = []
    invalid = False
    for key, value in sorted(annotations.items()):
        name, ours = _name(key, nginx)
        if name is None:
            continue
        if not ours and PREFIX + name in annotations and name in KEYS:
            continue  # the twingress.io/ key wins
        reading = KEYS.get(name)
        if reading is not None and (ours or reading.nginx):
            try:
                found[name] = reading.read(value)
            except InvalidValue as error:
                if name in ENFORCED_GUARDS:  # fail closed: the route answers 503, it is not left to other routes
                    unguarded.append(key)
                    problems.append(Problem(ingress.ref, INVALID, f"{key}: {value!r} {error}; the Ingress's routes answer 503"))
                    continue
                invalid = True
                problems.append(Problem(ingress.ref, INVALID, f"{key}: {value!r} {error}; the Ingress's paths are not served"))
        elif ours:
            known = ", ".join(PREFIX + k for k in sorted(KEYS))
            problems.append(Problem(ingress.ref, UNKNOWN, f"{key} is not a twingress annotation (known: {known}); it is ignored"))
        else:
            guard = _unenforced_guard(name, value)
            problems.append(Problem(ingress.ref, UNSUPPORTED, _unsupported(key, name, guard)))
            if guard:
                unguarded.append(key)
    for key, reason in _cross_checks(found):
        invalid = True
        problems.append(Problem(ingress.ref, INVALID, f"{key}: {reason}; the Ingress's paths are not served"))
    return IngressAnnotations(found, tuple(problems), invalid, tuple(unguarded))


def _cross_checks(found: Mapping[str, object]) -> list[tuple[str, str]]:
    """Values that are readable alone but not together."""
    weight, total = found.get("canary-weight"), found.get("canary-weight-total", 100)
    if isinstance(weight, int) and isinstance(total, int) and weight > total:
        return [("canary-weight", f"{weight} is more than canary-weight-total ({total})")]
    return []


def _name(key: str, nginx: bool) -> tuple[Optional[str], bool]:
    """The key's name without prefix and whether it is under ours; None for keys of others."""
    if key.startswith(PREFIX):
        return key[len(PREFIX) :], True
    if nginx and key.startswith(NGINX_PREFIX):
        return key[len(NGINX_PREFIX) :], False
    return None, False


def _unenforced_guard(name: str, value: str) -> str:
    """
    Why an ingress-nginx key twingress does not read closes the Ingress's routes ("" when it does not),
    from the table of L{ingress.routing.annotations.keys}: a refused guard, a snippet that might guard
    access, a key it does not know whose name looks like a guard's.
    """
    if name in ACCESS_GUARDS:
        return "an access guard twingress does not enforce"
    if name in SNIPPETS:
        directive = guarding_directive(value)
        return f"it may guard access ({directive})" if directive else ""
    if name in HARMLESS:
        return ""
    if guard_like(name):
        return "a key twingress does not know, whose name looks like a guard's"
    return ""


def _unsupported(key: str, name: str, guard: str) -> str:
    if is_snippet(name):
        closes = f"; {guard}: the Ingress's routes answer 503" if guard else " (its directives only shape fields and buffers); it is ignored"
        return f"{key} is never executed: twingress runs no nginx configuration from Ingresses (snippets were the attack surface of CVE-2025-1974){closes}"
    if guard:
        return f"{key} is not enforced by twingress ({guard}): the Ingress's routes answer 503 rather than serve unguarded"
    if name in HARMLESS:
        return f"{key} {HARMLESS[name]}"
    return f"{key} is not supported by twingress; it is ignored"
