"""
The speed-ups: every patch twingress makes to a library, and every piece of code shaped for the
compiled build (mypyc) rather than for reading, fenced here, with one switch that turns them off.

Each module says what it speeds up, what the plain code is, and the gain it was measured for:

- L{reactorstep}: Twisted's reactor C{doIteration} replaced (calls made before each poll, direct
  dispatch of connections' events; 9% of the keep-alive HTTP path).  Plain: Twisted's own
  C{doIteration}, and C{callLater(0, call)} for a call before the next poll.
- L{fastwrite}: each reactor iteration's sends made together before it polls again (91-102 to
  55-58 µs of CPU per keep-alive request).  Plain: the transport's own C{write}.
- L{statehash}: h2's state-machine Enums hashed by identity (1.6% of a live h2 request).  Plain:
  h2 as it is, Enum's own hash.
- L{librarylog}: hpack's DEBUG records dropped where they are made (4% of an h2 request's
  instructions).  Plain: hpack's loggers as they are (the level check drops the records).
- L{heap}: each built routing table frozen out of the cyclic collector's scans (full collections
  of 200-545 ms at 10,000 Ingresses).  Plain: the collector as CPython runs it.
- L{nativeprotocol}: the connection protocols' base without Twisted's C{Protocol} class, so that
  mypyc compiles them as native classes.  It has no plain form selected here: it is the classes'
  layout, not a path taken at run time, and in the pure build it is an ordinary Python class.

Outside ingress/: C{h2stack.py} (the repository root) compiles h2, hpack and hyperframe as they are
with Cython for the compiled build; the pure build (C{make pure}) removes them.

The switch: C{TWINGRESS_SPEEDUPS=0} in the environment, read once when this package is first
imported, turns every run-time speed-up off: no library is patched and each user takes the plain
path (L{ENABLED}).  Behaviour is the same either way; make test's rerun on the pure build runs with
it off, so that every test shows each speed-up to be only one.
"""

from __future__ import annotations

import os
from typing import Final

from twisted.logger import Logger

from ingress.speedups.librarylog import drop_hpack_debug
from ingress.speedups.statehash import hash_states_by_identity

log = Logger(namespace=__name__)

# Whether the speed-ups are on in this process: anything but "0" (the default: on).
ENABLED: Final[bool] = os.environ.get("TWINGRESS_SPEEDUPS", "1").strip() != "0"


def patch_libraries() -> None:
    """
    The library patches that apply to the whole process (the data plane calls this when it is
    built, before any HTTP/2 connection): hpack's debug records dropped, h2's Enums hashed by
    identity.  Nothing when the speed-ups are off, which it says (once a data plane).
    """
    if not ENABLED:
        log.info("speed-ups off (TWINGRESS_SPEEDUPS=0): no library patched, the plain paths taken")
        return
    drop_hpack_debug()  # hpack's DEBUG records, never passed by our logging, made for nothing (4% of an h2 request)
    hash_states_by_identity()  # h2's state-machine lookups without an interpreted Enum.__hash__ (1.6% of a live h2 request)
