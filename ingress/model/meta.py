# -*- test-case-name: tests.unit.test_parse -*-
"""
What every object has, whatever its kind: its name and metadata, its owners, its status conditions
(Kubernetes' C{meta/v1}), and how problems and routes name it.  A module of its own so that the
kinds' modules (L{ingress.model}, L{ingress.model.gateway}) share it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """Kind, namespace and name: how problems and routes name the object they come from."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class OwnerReference:
    """An C{ownerReferences} entry: who garbage-collects the object, and whether it is the managing controller."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """The metadata fields we use; C{creation_timestamp} is RFC 3339 text (sorts as time)."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str = ""
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False)
    owner_references: tuple[OwnerReference, ...] = field(default=(), compare=False)

    def controller_ref(self) -> Optional[OwnerReference]:
        """The owner with C{controller: true}, if any (the API allows at most one)."""
        return next((o for o in self.owner_references if o.controller), None)

    def age_key(self) -> tuple[str, str, str]:
        """Oldest first, then namespace/name: the order that decides every conflict."""
        return (self.creation_timestamp or "9999", self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Condition:
    """A metav1.Condition as found in an object's status (what the status writer compares with)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    last_transition_time: str = ""
