# -*- test-case-name: tests.unit.test_routing -*-
"""
Which Ingresses are ours: the class rules of networking.k8s.io/v1 (spec.ingressClassName, the
legacy kubernetes.io/ingress.class annotation, the default IngressClass), oldest first.

The routing build serves these, and the status controller writes their status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from ingress.model import CONTROLLER_NAME, DEFAULT_CLASS_NAME, ClusterState, Ingress, IngressClass, ObjectRef

LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"

# Why an Ingress is not ours (the label of twingress_ingresses_skipped; the message names the classes).
CLAIMED, NO_SUCH_CLASS, LEGACY_CLASS, NO_CLASS = "ClassOfAnotherController", "ClassNotFound", "LegacyClassOfAnother", "NoClass"

Skip = tuple[str, str]
"""Why an Ingress is skipped: a reason (bounded, for the metric) and a message that names the classes."""

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
    return select_and_skip(state, class_name=class_name, controller_name=controller_name)[0]


def select_and_skip(
    state: ClusterState,
    *,
    class_name: str = DEFAULT_CLASS_NAME,
    controller_name: str = CONTROLLER_NAME,
) -> tuple[tuple[Ingress, ...], dict[ObjectRef, Skip]]:
    """
    The Ingresses this controller serves (as L{select_ingresses}), and why each other one is not:
    an operator who kept ingress-nginx's IngressClass must be told that its Ingresses are skipped,
    not find "0 hosts" and nothing logged.
    """
    classes = {c.meta.name: c for c in state.ingress_classes}
    defaults = [c for c in classes.values() if c.is_default]
    default_is_ours = any(c.controller == controller_name for c in defaults)
    ours: list[Ingress] = []
    skipped: dict[ObjectRef, Skip] = {}
    for ingress in state.ingresses:
        why = _why_not_ours(ingress, classes, class_name, controller_name, default_is_ours, defaults)
        if why is None:
            ours.append(ingress)
        else:
            skipped[ingress.ref] = why
    ours.sort(key=lambda i: (i.meta.age_key(), i.meta.uid))
    return tuple(ours), skipped


def _why_not_ours(
    ingress: Ingress,
    classes: Mapping[str, IngressClass],
    class_name: str,
    controller_name: str,
    default_is_ours: bool,
    defaults: list[IngressClass],
) -> Optional[Skip]:
    """
    None when the Ingress is ours: spec.ingressClassName first, then the legacy annotation, then the default class.

    A class that exists decides by its controller, even when it carries our
    class name: two controllers must never serve one Ingress.  Our class name
    alone is enough when no IngressClass of that name exists (a manifests
    directory without one).
    """
    name = ingress.ingress_class_name
    if name:
        ingress_class = classes.get(name)
        if ingress_class is not None:
            if ingress_class.controller == controller_name:
                return None
            return CLAIMED, f"IngressClass {name} is claimed by controller {ingress_class.controller}; twingress is {controller_name} (--controller-name)"
        if name == class_name:
            return None
        return NO_SUCH_CLASS, f"IngressClass {name} does not exist; twingress serves class {class_name} (--ingress-class)"
    legacy = ingress.meta.annotations.get(LEGACY_CLASS_ANNOTATION, "")
    if legacy:
        if legacy == class_name:
            return None
        return LEGACY_CLASS, f"{LEGACY_CLASS_ANNOTATION} {legacy} is not twingress's class {class_name} (--ingress-class)"
    if default_is_ours:
        return None
    if defaults:
        default = defaults[0]
        return NO_CLASS, f"no class, and the default IngressClass {default.meta.name} is claimed by controller {default.controller}; twingress is {controller_name}"
    return NO_CLASS, f"no class, and no IngressClass of controller {controller_name} is marked default"
