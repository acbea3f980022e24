# -*- test-case-name: tests.unit.test_audit -*-
"""
Behaviours where twingress differs from ingress-nginx without any key saying so, shown where an object
of the cluster triggers them.  Each is a function of the snapshot and the build (its table and report, L{DIFFERENCES}):
a difference the proxy changes is changed here by reading the table, never by a second description.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ingress.model import PATH_EXACT, ClusterState
from ingress.routing.build_options import BuildOptions
from ingress.routing.report import Built
from ingress.routing.trailing_slash import ingress_nginx_class

Difference = dict[str, str]  # {"object": "NAMESPACE/NAME", "behaviour": ..., "message": ...}


def trailing_slash(state: ClusterState, built: Built, options: BuildOptions) -> Iterator[Difference]:
    """
    A Prefix or Exact path C{/p/}: ingress-nginx answers C{/p} with a 301 to C{/p/} (its location for C{/p}
    does it); twingress's own class matches C{/p} by the Kubernetes Prefix rule (routing/paths.py), and an
    Exact C{/p/} does not match C{/p} at all.  A twingress serving ingress-nginx's class (the take-over
    preset) answers the same 301 (L{ingress.routing.trailing_slash}): no difference then.
    """
    if ingress_nginx_class(options.class_name, options.controller_name):
        return
    for ingress in state.ingresses:
        if ingress.ref in built.report.class_skipped:
            continue
        for rule in ingress.rules:
            for path in rule.paths:
                if len(path.path) > 1 and path.path.endswith("/") and path.path_type in ("Prefix", PATH_EXACT):
                    served = "matched by the Prefix rule" if path.path_type == "Prefix" else "not matched (404)"
                    yield {
                        "object": f"{ingress.meta.namespace}/{ingress.meta.name}",
                        "behaviour": "trailing-slash-redirect",
                        "message": f"{rule.host or '*'} {path.path.rstrip('/')}: ingress-nginx answers 301 to {path.path}; twingress: {served}",
                    }


DIFFERENCES: list[Callable[[ClusterState, Built, BuildOptions], Iterator[Difference]]] = [trailing_slash]
"""Each behaviour that differs without a key; a new one is a function added here."""


def differences(state: ClusterState, built: Built, options: BuildOptions) -> list[Any]:
    """Every difference the cluster triggers, by object (C{options}: the table's build options)."""
    found = [difference for check in DIFFERENCES for difference in check(state, built, options)]
    return sorted(found, key=lambda d: (d["object"], d["behaviour"], d["message"]))
