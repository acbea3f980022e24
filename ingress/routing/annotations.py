# -*- test-case-name: tests.unit.test_annotations -*-
"""
The Ingress annotations twingress reads, in one place, and the problems of the ones it cannot.

An annotation under our prefix that we do not know (a typo such as
C{twingress.io/ssl-redirekt}) or whose value we cannot read (C{hsts-max-age:
forever}) changes nothing in routing, so an operator would never learn of it:
each becomes a L{Problem} on its Ingress (logged once, counted, shown in
C{/debug/routes}, and a Warning Event in kube mode).  The route itself then
behaves as without the annotation, the documented default.

The ingress-nginx annotations (C{nginx.ingress.kubernetes.io/}) will be added
here the same way: a key, and the check of its value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Optional

from ingress.model import Ingress, Problem

PREFIX = "twingress.io/"
UNKNOWN, INVALID = "UnknownAnnotation", "InvalidAnnotation"


def _boolean(value: str) -> Optional[str]:
    return None if value.strip().lower() in ("true", "false") else "must be true or false"


def _seconds(value: str) -> Optional[str]:
    return None if value.strip().isdigit() else "must be a whole number of seconds"


KNOWN: Mapping[str, Callable[[str], Optional[str]]] = {
    "ssl-redirect": _boolean,
    "hsts-max-age": _seconds,
    "ssl-passthrough": _boolean,
}
"""Every C{twingress.io/} key an Ingress may carry, with the check of its value (None: valid)."""


def annotation_problems(ingresses: Iterable[Ingress]) -> list[Problem]:
    """Unknown keys under our prefix, and known keys with values we cannot read."""
    problems = []
    for ingress in ingresses:
        for key, value in ingress.meta.annotations.items():
            if not key.startswith(PREFIX):
                continue
            name = key[len(PREFIX):]
            check = KNOWN.get(name)
            if check is None:
                known = ", ".join(PREFIX + k for k in sorted(KNOWN))
                problems.append(Problem(ingress.ref, UNKNOWN, f"{key} is not a twingress annotation (known: {known}); it is ignored"))
            elif (reason := check(value)) is not None:
                problems.append(Problem(ingress.ref, INVALID, f"{key}: {value!r} {reason}; it is ignored"))
    return problems
