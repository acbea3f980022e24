# -*- test-case-name: tests.unit.test_h2_statehash -*-
"""
h2's state-machine enums hashed by identity: the same transitions found, without an interpreted call each.

h2 (4.4.1) looks up each transition of its connection's and its streams' state machines in a dict
keyed by (state, input) pairs (C{H2ConnectionStateMachine._transitions}, C{h2.stream._transitions}).
C{ConnectionState}, C{ConnectionInputs} and C{StreamInputs} are plain C{Enum}s, whose C{__hash__} is
C{Enum}'s, a Python function (C{hash(self._name_)}), so hashing a key calls the interpreter once or
twice: 11 interpreted calls per proxied h2 request (C{bench/h2_path.py --profile}), 10,000 of its
416,000 instructions (C{h2_path.py --instructions}), in the compiled build as in the pure one.

An C{Enum} member equals only itself (C{Enum} defines no C{__eq__}: identity), so C{object}'s hash,
the member's identity, is as valid a hash as its name's: equal keys still hash equal.  Set as the
class's C{__hash__}, it fills the type's hash slot with C{object}'s C function itself.  The two
transition dicts, built when h2 was imported, hold their keys' old hashes: each is filled again from
a list of its items, so that every key is hashed anew (a dict updated from a dict would copy the
stored hashes).  Nothing else of h2's holds these members as keys (tests.unit.test_h2_statehash
looks through every container of the process); a dict or set made later hashes them the new way.

h2's code is unchanged (the compiled build compiles it as it is) and finds the same transitions;
upstream's h2 suite passes with this applied too (tests/unit/test_h2stack_suites.py).  The data
plane applies it when it is built, before any HTTP/2 connection, as it drops hpack's debug records
(L{ingress.speedups.librarylog}).  C{StreamState} is an C{IntEnum}, already hashed as an int.

Measured: 1.6% of a live h2 request (bench/README.md, C{d748b26}).  The plain code, with the
speed-ups off (L{ingress.speedups.ENABLED}): h2 as it is, its Enums hashed by C{Enum}'s own hash
(L{ingress.speedups.patch_libraries} applies nothing).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Final

from h2 import connection, stream

# h2's plain Enums: the connection state machine's both halves of a key, the streams' inputs, and
# StreamClosedBy (never a key today, hashed alike so that no plain Enum of h2's is left out).
IDENTITY_HASHED: Final[tuple[type[Enum], ...]] = (
    connection.ConnectionState,
    connection.ConnectionInputs,
    stream.StreamInputs,
    stream.StreamClosedBy,
)


def transition_tables() -> tuple[dict[Any, Any], ...]:
    """The dicts keyed by those members, built at h2's import: the two state machines' transitions."""
    return (connection.H2ConnectionStateMachine._transitions, stream._transitions)


def hash_states_by_identity() -> None:
    """Give h2's plain Enums object's hash and hash the transition tables' keys again (the module docstring); idempotent."""
    if identity_hashed():
        return  # done already in this process (a data plane built before)
    for enum_type in IDENTITY_HASHED:
        enum_type.__hash__ = object.__hash__  # type: ignore[method-assign]  # the class's own; Enum's is hash(self._name_)
    hash_tables_again()


def identity_hashed() -> bool:
    """Whether this process's h2 Enums hash by identity already."""
    return all(enum_type.__dict__.get("__hash__") is object.__hash__ for enum_type in IDENTITY_HASHED)


def hash_tables_again() -> None:
    """Each transition table filled again from a list of its items: every key hashed by its class's hash as it is now."""
    for table in transition_tables():
        items = list(table.items())
        table.clear()
        table.update(items)
