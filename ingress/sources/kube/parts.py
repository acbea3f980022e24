# -*- test-case-name: tests.unit.test_kube_parts -*-
"""
One informer's part of the snapshot, followed write by write instead of collected again.

At 10k Ingresses a snapshot made by L{ingress.model.parse.collect} walks every value of each
changed kind in Python: about 10 ms per kind, paid for every snapshot while a cluster is being
filled, when a snapshot holds one new Service, one new slice and one new Ingress.  A
L{CollectedPart} keeps what C{collect} would make of the store's values, changed by the keys the
store says were written since the last snapshot (L{Store.take_changes}), so a snapshot costs a
copy of the changed fields (C-level) instead of a Python loop over every object.

It holds what C{collect} makes, field for field and object for object (tests/unit/test_kube_parts.py
checks it on random writes): a changed value keeps its place (so the incremental build's
place-by-place comparison of two snapshots sees one change), a new key goes last (so does an
invalid object once it is valid again, which C{collect} would leave in its store place: nothing
reads the order), problems are sorted as C{collect} sorts them, and a field no write touched stays
the very object it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Optional

from ingress.model import ClusterState, Problem, SnapshotChanges
from ingress.model.parse import Kind, merged_state
from ingress.sources.kube.reflector import Store

Key = tuple[str, str]


class CollectedPart:
    """What L{ingress.model.parse.collect} makes of one kind's values, kept up to date key by key."""

    def __init__(self, handler: Kind) -> None:
        self.handler = handler
        self._fields: dict[str, dict[Key, Any]] = {}  # state field → the values in it, by store key, in store order
        self._field_of: dict[Key, str] = {}
        self._problems: dict[Key, Problem] = {}
        self._frozen: dict[str, Any] = {}  # state field → its tuple or mapping in the last state made
        self._changed: set[str] = set()  # fields written since then ("problems" too)
        self._state: Optional[ClusterState] = None
        self._written: dict[str, dict[Key, Any]] = {}  # since the last take_written: field → key → value now (None: gone)
        self._whole = True  # started again since the last take_written: what was written is not known

    def reset(self, items: Iterable[tuple[Key, Any]]) -> None:
        """Start again from every item of the store (the first snapshot, or after a relist)."""
        self._changed.update(self._fields, ("problems",) if self._problems else ())
        self._fields, self._field_of, self._problems = {}, {}, {}
        self.update(items)
        self._state = None
        self._whole = True

    def take_written(self) -> Optional[dict[str, dict[Key, Any]]]:
        """What was written since the last call, by field (for L{ingress.model.SnapshotChanges}); None when not known (started again)."""
        written, whole = self._written, self._whole
        self._written, self._whole = {}, False
        return None if whole else written

    def update(self, items: Iterable[tuple[Key, Any]]) -> None:
        """The written keys with their values now (None: deleted)."""
        for key, value in items:
            self._put(key, value)

    def state(self) -> ClusterState:
        """The part as a ClusterState; the same object while nothing was written."""
        if self._state is None or self._changed:
            for name in self._changed:
                self._frozen[name] = self._freeze(name)
            self._changed.clear()
            values = {name: value for name, value in self._frozen.items() if value and name != "problems"}
            self._state = ClusterState(**values, problems=self._frozen.get("problems", ()))
        return self._state

    def _put(self, key: Key, value: Any) -> None:
        if self._problems.pop(key, None) is not None:
            self._wrote("problems", key, None)
        target = self._target(value)
        was = self._field_of.get(key)
        if was is not None and was != target:
            del self._fields[was][key]
            del self._field_of[key]
            self._wrote(was, key, None)
        if isinstance(value, Problem):
            self._problems[key] = value
            self._wrote("problems", key, value)
        elif target is not None:
            self._fields.setdefault(target, {})[key] = value  # a key it holds keeps its place
            self._field_of[key] = target
            self._wrote(target, key, value)

    def _wrote(self, name: str, key: Key, value: Any) -> None:
        self._changed.add(name)
        self._written.setdefault(name, {})[key] = value

    def _target(self, value: Any) -> Optional[str]:
        """The state field a value goes to, as collect decides it (None: none, or a Problem)."""
        handler = self.handler
        if value is None or isinstance(value, Problem) or handler.state_field is None:
            return None
        if handler.fields_by_type:
            return handler.fields_by_type.get(type(value), handler.state_field)
        return handler.state_field

    def _freeze(self, name: str) -> Any:
        if name == "problems":
            return tuple(sorted(self._problems.values(), key=lambda p: (p.ref, p.reason, p.message)))
        values = self._fields.get(name, {})
        return dict(values) if self.handler.keyed else tuple(values.values())  # keyed as collect keys them: the store's key is the value's namespace and name


class Snapshots:
    """
    Numbered snapshots of a list of stores (an informer's each), every part followed write by
    write (L{CollectedPart}), each snapshot saying what was written since the one before it
    (L{SnapshotChanges}): the incremental build then looks at those objects only.
    """

    def __init__(self) -> None:
        self._parts: dict[int, CollectedPart] = {}  # by the store's place in the list
        self._serial = 0  # the last snapshot's number

    def take(self, stores: Iterable[tuple[Kind, Store]]) -> ClusterState:
        """A snapshot of C{stores} (always the same list, in the same order)."""
        parts = []
        written: Optional[dict[str, dict[Key, Any]]] = {}
        for index, (handler, store) in enumerate(stores):
            part = self._parts.get(index)
            if part is None:
                part = self._parts[index] = CollectedPart(handler)
            whole, changes = store.take_changes()
            if whole:
                part.reset(changes)
            else:
                part.update(changes)
            parts.append(part.state())
            found = part.take_written()
            if found is None or written is None:
                written = None
            else:
                for name, items in found.items():
                    written.setdefault(name, {}).update(items)
        self._serial += 1
        return replace(merged_state(parts), changes=SnapshotChanges(self._serial, self._serial - 1, written))
