"""
A census of the reference cycles a twistd process leaves (tests/proxy/test_reference_cycles.py).

Put first on a process's PYTHONPATH with C{TWINGRESS_CYCLE_CENSUS} naming a file, it makes the
cyclic collector keep what it finds (C{gc.DEBUG_SAVEALL}); on SIGUSR2 it takes back anything
frozen (C{gc.unfreeze}: a frozen cycle is a leak the census must see too), collects every
generation, and appends one JSON line to the file: how many objects were found unreachable
since the last census, and how many of each type.  Then it lets them go.  Nothing happens
without the variable.
"""

from __future__ import annotations

import gc
import json
import os
import signal
from collections import Counter
from typing import Any


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _install(path: str) -> None:
    gc.set_debug(gc.DEBUG_SAVEALL)

    def census(signum: int, frame: Any) -> None:
        gc.unfreeze()
        gc.collect()
        found = Counter(_type_name(value) for value in gc.garbage)
        with open(path, "a") as out:
            out.write(json.dumps({"objects": len(gc.garbage), "types": found.most_common()}) + "\n")
        gc.set_debug(0)  # what was saved is freed now, not saved again
        gc.garbage.clear()
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)

    signal.signal(signal.SIGUSR2, census)


if os.environ.get("TWINGRESS_CYCLE_CENSUS"):
    _install(os.environ["TWINGRESS_CYCLE_CENSUS"])
