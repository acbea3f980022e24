# -*- test-case-name: tests.unit.test_incremental -*-
"""
What turns one table into the next, when the next shares most of the first: the change the
primary sends its workers instead of the whole table.

A table of 10k Ingresses pickles to about 2.6 MB, and pickling or unpickling it costs
hundreds of milliseconds of a reactor thread (the primary's, then each worker's).  A table
derived from the previous one (an EndpointSlice-only update, L{ingress.routing.incremental})
shares every unchanged host, certificate and problem with it, object for object; L{table_change}
finds what is not shared, and L{applied} rebuilds the new table from the old one and that
change.  A table that shares little (a full build) is sent whole: its change would be as big.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Optional

from ingress.routing.table import RoutingTable

_FIELDS = tuple(f.name for f in fields(RoutingTable) if f.name != "generation")


@dataclass(frozen=True, slots=True)
class TableChange:
    """The new table C{generation} as a change of table C{base}: fields replaced whole, and mapping fields' changed and removed entries."""

    base: int
    generation: int
    replaced: Mapping[str, Any]
    entries: Mapping[str, tuple[Mapping[Any, Any], frozenset[Any]]]


def table_change(old: RoutingTable, new: RoutingTable) -> Optional[TableChange]:
    """The change from C{old} to C{new}, or None when C{new} shares too little of C{old} for a change to be smaller."""
    replaced: dict[str, Any] = {}
    entries: dict[str, tuple[Mapping[Any, Any], frozenset[Any]]] = {}
    kept = total = 0
    for name in _FIELDS:
        before, after = getattr(old, name), getattr(new, name)
        if after is before:
            continue
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            changed = {key: value for key, value in after.items() if before.get(key) is not value}
            removed = frozenset(key for key in before if key not in after)
            kept += len(after) - len(changed)
            total += len(after)
            entries[name] = (changed, removed)
        else:
            replaced[name] = after
    if total and kept * 2 < total:
        return None  # mostly new: the whole table is no bigger
    return TableChange(old.generation, new.generation, replaced, entries)


def applied(table: RoutingTable, change: TableChange) -> RoutingTable:
    """C{table} (generation C{change.base}) changed into table C{change.generation}."""
    if table.generation != change.base:
        raise ValueError(f"a change of table {change.base} cannot apply to table {table.generation}")
    updates: dict[str, Any] = dict(change.replaced)
    for name, (changed, removed) in change.entries.items():
        merged = dict(getattr(table, name))
        merged.update(changed)
        for key in removed:
            del merged[key]
        updates[name] = merged
    return replace(table, generation=change.generation, **updates)
