# -*- test-case-name: tests.unit.test_h2_librarylog -*-
"""
hpack's debug records, dropped where they are made instead of at the level check.

hpack (4.2.0) logs at DEBUG, through the standard library's C{logging}, every integer and every
header field it encodes or decodes: 26 C{Logger.debug} calls for one proxied h2 request
(C{bench/h2_path.py}'s exchange), and each is two interpreted calls (C{debug}, then
C{isEnabledFor}) before the level check drops the record.  twingress logs through
C{twisted.logger} and never configures the standard library's logging, whose root logger
passes WARNING and up only, so every one of those records is dropped there: 4% of an h2
request's instructions spent making nothing (C{h2_path.py --instructions}: 674k, 645k without).

So the data plane (L{drop_hpack_debug}) gives hpack's two loggers a C{debug} that does nothing,
set on the logger objects themselves, which hpack's modules hold: the library's code is
unchanged (the compiled build compiles it as it is), its other levels still log, and a logger
that has DEBUG enabled when the data plane is built (a C{logging} configuration of the process's
own, made for debugging hpack) keeps its records.

The plain code, with the speed-ups off (L{ingress.speedups.ENABLED}): hpack's loggers as they
are, their records dropped by the level check (L{ingress.speedups.patch_libraries} applies nothing).
"""

from __future__ import annotations

import logging

# The loggers hpack's modules log through (logging.getLogger(__name__) in each).
HPACK_LOGGERS = ("hpack.hpack", "hpack.table")


# A debug record's fate once dropped at its call: nothing is made of it.  The empty string's format
# is a C-level callable that takes any arguments and reads none (no placeholder): 360 instructions
# a call, against 955 for a Python function doing nothing (26 calls per h2 request).
dropped = "".format


def drop_hpack_debug() -> None:
    """Give each hpack logger that does not pass DEBUG now a C{debug} that does nothing (the module docstring)."""
    for name in HPACK_LOGGERS:
        logger = logging.getLogger(name)
        if not logger.isEnabledFor(logging.DEBUG):
            logger.debug = dropped  # type: ignore[method-assign, assignment]  # an instance attribute, this logger only; its answer is never read
