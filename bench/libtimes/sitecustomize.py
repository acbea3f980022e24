"""
Times the TLS and HTTP/2 libraries' calls inside a running proxy (python -m bench floor-library).

Why: the floors (bench/lib/splicefloor.py, bench/lib/h2floor.py) measure what pyOpenSSL and h2 cost in a
process that does nothing else, and issue 32's targets charge everything above them to
twingress's own code.  Whether the same calls cost the same inside twingress is a
measurement, not an assumption: this module, put first on a child's PYTHONPATH with
C{TWINGRESS_LIBRARY_TIMES} naming a file, wraps every public method of
C{OpenSSL.SSL.Connection} and C{h2.connection.H2Connection} before anything imports
them, and adds up their calls and nanoseconds by method ("ssl.recv", "h2.send_headers":
the outermost library call only, so a public method calling another is counted once).  SIGUSR2 appends one JSON line of the
totals to the file.  Nothing happens without the variable.

The clock is C{perf_counter_ns} (the vDSO, ~25 ns): the process's own CPU clock is a
system call per read, dearer than some of the calls it would time.  The proxy under
test has its CPU to itself, so the wall time inside a call is its CPU time.  The span
each call's timing itself adds is measured at start and written with the totals as
C{span_ns}, for the reader to subtract.

A class whose methods cannot be replaced - h2's H2Connection in the compiled build, which
h2stack.py compiles with Cython into an immutable type - is not timed, and the totals say so
(C{untimed}: the label and why) rather than the process losing its SIGUSR2 handler: the reader
shows that library as not measured, and every other figure stands.

The cyclic garbage collector is timed too (C{gc.callbacks}): per generation, the
collections, their nanoseconds, the longest since the last snapshot, and the objects
they found unreachable (cyclic garbage): the collector holds the GIL while it scans,
so its time is the proxy's, and its longest pause is every request's at that moment.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

_clock = time.perf_counter_ns
_methods: dict[str, list[int]] = {}  # "h2.send_headers" -> [calls, nanoseconds]
_inside = [False]
_collections = {f"gen{generation}": [0, 0, 0, 0] for generation in range(3)}  # [collections, ns, longest ns, objects collected]
_collection_started = [0]


def _time_collection(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _collection_started[0] = _clock()
        return
    spent = _clock() - _collection_started[0]
    cell = _collections[f"gen{info['generation']}"]
    cell[0] += 1
    cell[1] += spent
    cell[2] = max(cell[2], spent)
    cell[3] += info["collected"]


def _timed(original: Callable[..., Any], cell: list[int]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        if _inside[0]:
            return original(*args, **kwargs)
        _inside[0] = True
        start = _clock()
        try:
            return original(*args, **kwargs)
        finally:
            cell[1] += _clock() - start
            cell[0] += 1
            _inside[0] = False

    timed.__wrapped__ = original  # type: ignore[attr-defined]
    timed.__name__ = getattr(original, "__name__", "timed")
    return timed


def _wrap_public_methods(owner: type, label: str) -> str:
    """Every public method of C{owner} timed under C{label}; or, where its type is immutable, none, and why."""
    try:
        owner._twingress_timed = True
    except TypeError as e:
        return f"{owner.__module__}.{owner.__qualname__} cannot be wrapped ({e}): compiled"
    for name, value in list(vars(owner).items()):
        if name.startswith("_") or isinstance(value, (property, staticmethod, classmethod)) or not callable(value):
            continue
        setattr(owner, name, _timed(value, _methods.setdefault(f"{label}.{name}", [0, 0])))
    return ""


def _span_ns() -> float:
    """What timing adds to a call's count: the span of a timed call that does nothing, best of five."""
    cell = [0, 0]
    nothing = _timed(lambda: None, cell)
    best = float("inf")
    for _ in range(5):
        cell[:] = [0, 0]
        for _ in range(20000):
            nothing()
        best = min(best, cell[1] / cell[0])
    return best


def _install(path: str) -> None:
    from h2.connection import H2Connection
    from OpenSSL.SSL import Connection

    untimed = {label: why for label, why in (("ssl", _wrap_public_methods(Connection, "ssl")),
                                             ("h2", _wrap_public_methods(H2Connection, "h2"))) if why}
    span = _span_ns()

    def snapshot(signum: int, frame: Any) -> None:
        with open(path, "a") as out:
            out.write(json.dumps({"t": time.monotonic(), "span_ns": span, "methods": _methods, "gc": _collections,
                                  "untimed": untimed}) + "\n")
        for cell in _collections.values():
            cell[2] = 0  # the longest pause is since the last snapshot

    gc.callbacks.append(_time_collection)
    signal.signal(signal.SIGUSR2, snapshot)


if os.environ.get("TWINGRESS_LIBRARY_TIMES"):
    _install(os.environ["TWINGRESS_LIBRARY_TIMES"])
