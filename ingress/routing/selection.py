# -*- test-case-name: tests.unit.test_routing -*-
"""
Which Ingresses are ours: the class rules of networking.k8s.io/v1 (spec.ingressClassName, the
legacy kubernetes.io/ingress.class annotation, the default IngressClass), oldest first.

The routing build serves these, and the status controller writes their status.
"""

from __future__ import annotations

from collections.abc import Mapping

from ingress.model import CONTROLLER_NAME, DEFAULT_CLASS_NAME, ClusterState, Ingress, IngressClass

LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"

def select_ingresses(
    state: ClusterState,
    *,
    class_name: str = DEFAULT_CLASS_NAME,
    controller_name: str = CONTROLLER_NAME,
) -> tuple[Ingress, ...]:
    """
    The Ingresses this controller serves, oldest first (the order that resolves conflicts).

    Also what the status controller needs: these are the Ingresses whose
    status we own.  Ingresses of other controllers are not problems.
    """
    classes = {c.meta.name: c for c in state.ingress_classes}
    default_is_ours = any(c.is_default and c.controller == controller_name for c in classes.values())
    ours = [
        ingress
        for ingress in state.ingresses
        if _is_ours(ingress, classes, class_name, controller_name, default_is_ours)
    ]
    ours.sort(key=lambda i: (i.meta.age_key(), i.meta.uid))
    return tuple(ours)


def _is_ours(
    ingress: Ingress,
    classes: Mapping[str, IngressClass],
    class_name: str,
    controller_name: str,
    default_is_ours: bool,
) -> bool:
    """
    spec.ingressClassName first, then the legacy annotation, then the default class.

    A class that exists decides by its controller, even when it carries our
    class name: two controllers must never serve one Ingress.  Our class name
    alone is enough when no IngressClass of that name exists (a manifests
    directory without one).
    """
    name = ingress.ingress_class_name
    if name:
        ingress_class = classes.get(name)
        if ingress_class is not None:
            return ingress_class.controller == controller_name
        return name == class_name
    legacy = ingress.meta.annotations.get(LEGACY_CLASS_ANNOTATION, "")
    if legacy:
        return legacy == class_name
    return default_is_ours
