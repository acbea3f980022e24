# -*- test-case-name: tests.unit.test_ingress_changes -*-
"""
Who names what among the Ingresses of a snapshot: hosts, TLS Secrets, the names their aliases may
claim and the Services they may send to, followed from snapshot to snapshot by the Ingresses that
changed (L{ingress.routing.ingress_changes} finds a change's group with it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Optional, TypeVar

from ingress.model import Ingress, ObjectRef
from ingress.routing.certs import SecretKey

ServiceKey = tuple[str, str]
_K = TypeVar("_K")
_PREFIXES = ("twingress.io/", "nginx.ingress.kubernetes.io/")


class IngressIndex:
    """
    Who names what among every Ingress of a snapshot (ours or not; the build decides that): kept
    from one snapshot to the next and changed per changed Ingress, so that finding a group costs
    what the group holds, not what the cluster holds.
    """

    def __init__(self) -> None:
        self.by_id: dict[int, Ingress] = {}  # the snapshot's very objects, by identity (they keep their ids alive)
        self.by_ref: dict[ObjectRef, Ingress] = {}
        self.by_name: dict[str, set[ObjectRef]] = {}  # rule and TLS hosts as written ("*.suffix" too)
        self.by_secret: dict[SecretKey, set[ObjectRef]] = {}  # spec.tls Secrets
        self.aliases: dict[str, set[ObjectRef]] = {}  # names that server-alias or from-to-www-redirect may claim
        self.by_service: dict[ServiceKey, set[ObjectRef]] = {}  # every Service an Ingress names: paths, defaultBackend, default-backend
        self.consistent = True  # False once two Ingresses of a snapshot share a name (then every change is a full build)

    @classmethod
    def of(cls, ingresses: Sequence[Ingress]) -> IngressIndex:
        index = cls()
        index.changed_to(ingresses)
        return index

    def changed_to(
        self, ingresses: Sequence[Ingress], written: Optional[Mapping[tuple[str, str], object]] = None
    ) -> tuple[dict[ObjectRef, Ingress], dict[ObjectRef, Ingress]]:
        """
        Follow the snapshot to C{ingresses}: the old and the new versions of the Ingresses that are
        not the same objects as before, by reference (a deleted one has no new version, a new one no
        old).  C{written}: the Ingresses the source wrote since the index's snapshot, by key (None:
        gone), when it says so (L{ingress.model.SnapshotChanges}); else both snapshots are compared.
        """
        if written is None:
            after = dict(zip(map(id, ingresses), ingresses, strict=True))  # no Python-level loop: this runs over every Ingress
            before = self.by_id
            old = {before[key].ref: before[key] for key in before.keys() - after.keys()}
            new = {after[key].ref: after[key] for key in after.keys() - before.keys()}
            self.by_id = after
        else:
            refs = [ObjectRef("Ingress", *key) for key in written]
            old = {ref: self.by_ref[ref] for ref in refs if ref in self.by_ref}
            new = {value.ref: value for value in written.values() if isinstance(value, Ingress)}
            for ingress in old.values():
                self.by_id.pop(id(ingress), None)
            self.by_id.update((id(ingress), ingress) for ingress in new.values())
        for ref, ingress in old.items():
            if self.by_ref.get(ref) is not ingress:
                self.consistent = False
                continue
            del self.by_ref[ref]
            _forget(self.by_name, names_of(ingress), ref)
            _forget(self.by_secret, secrets_of(ingress), ref)
            _forget(self.aliases, _alias_names(ingress), ref)
            _forget(self.by_service, services_named(ingress), ref)
        for ref, ingress in new.items():
            if ref in self.by_ref:
                self.consistent = False
            self.by_ref[ref] = ingress
            _note(self.by_name, names_of(ingress), ref)
            _note(self.by_secret, secrets_of(ingress), ref)
            _note(self.aliases, _alias_names(ingress), ref)
            _note(self.by_service, services_named(ingress), ref)
        if len(self.by_ref) != len(self.by_id):
            self.consistent = False
        return old, new

    def naming(self, services: Iterable[ServiceKey]) -> set[ObjectRef]:
        """The Ingresses that name any of C{services}."""
        return {ref for service in services for ref in self.by_service.get(service, ())}


def _note(index: dict[_K, set[ObjectRef]], keys: Iterable[_K], ref: ObjectRef) -> None:
    for key in keys:
        index.setdefault(key, set()).add(ref)


def _forget(index: dict[_K, set[ObjectRef]], keys: Iterable[_K], ref: ObjectRef) -> None:
    for key in keys:
        refs = index[key]
        refs.discard(ref)
        if not refs:
            del index[key]


def names_of(ingress: Ingress) -> set[str]:
    """The hosts an Ingress names: its rules' and its TLS sections'."""
    return {rule.host for rule in ingress.rules} | {host for tls in ingress.tls for host in tls.hosts}


def secrets_of(ingress: Ingress) -> set[SecretKey]:
    return {(ingress.meta.namespace, tls.secret_name) for tls in ingress.tls if tls.secret_name}


def _alias_names(ingress: Ingress) -> set[str]:
    """
    Every name the Ingress's server-alias or from-to-www-redirect could claim (more than it does:
    whether the annotation is read, and valid, is the build's business).
    """
    names: set[str] = set()
    for key, value in ingress.meta.annotations.items():
        name = annotation_name(key)
        if name == "server-alias":
            names.update(alias.strip().lower() for alias in value.split(",") if alias.strip())
        elif name == "from-to-www-redirect":
            names.update(host[4:] if host.startswith("www.") else "www." + host for rule in ingress.rules if rule.host for host in (rule.host,))
    return names


def services_named(ingress: Ingress) -> set[ServiceKey]:
    """
    Every Service an Ingress can send to or ask about, more than it does: its paths', its
    spec.defaultBackend's, and the default-backend annotation's (whether it is read is the build's business).
    """
    namespace = ingress.meta.namespace
    names = {path.backend.service_name for rule in ingress.rules for path in rule.paths}
    if ingress.default_backend is not None:
        names.add(ingress.default_backend.service_name)
    names.update(value.strip() for key, value in ingress.meta.annotations.items() if annotation_name(key) == "default-backend")
    return {(namespace, name) for name in names if name}


def annotation_name(key: str) -> Optional[str]:
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return None
