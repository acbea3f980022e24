# -*- test-case-name: tests.proxy.test_http2 -*-
"""
The h2 connection both sides of twingress's HTTP/2 use: C{h2}'s, tolerant of a graceful GOAWAY.

Interpreted on purpose (setup.py leaves it out of the compiled modules): h2stack.py compiles
C{H2Connection} as an extension type, and a class mypyc compiles cannot have an extension type
of another compiler as its base (mypyc lays out its instances for a base it takes for a Python
class).  Its methods run once a connection (construction, L{GoawayTolerant.release}) or on a
GOAWAY, not per request; so does L{with_goaway_code}, which rewrites the error code of the GOAWAY
C{h2} queued on a protocol error.
"""

from __future__ import annotations

from typing import Any, Final

from h2.connection import ConnectionState, H2Connection
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame

_GOAWAY_SIZE: Final = 17  # a GOAWAY frame without debug data: 9-byte frame header, 8-byte payload
_GOAWAY_TYPE: Final = 0x7


class GoawayTolerant(H2Connection):
    """
    C{h2} closes its state machine on any GOAWAY; a graceful one (NO_ERROR: an endpoint's max
    connection age, a client going away) still lets the streams it names finish, so their frames
    must be read and written.  Neither side opens new streams after it (we refuse theirs, and
    stop opening ours).
    """

    def _receive_goaway_frame(self, frame: Any) -> Any:
        result = super()._receive_goaway_frame(frame)
        if frame.error_code == ErrorCodes.NO_ERROR:
            self.state_machine.state = ConnectionState.CLIENT_OPEN if self.config.client_side else ConnectionState.SERVER_OPEN
        return result

    def release(self) -> None:
        """
        The connection is closed.  C{h2} keeps a table of its own bound methods, one per frame
        type: a reference cycle that holds the whole state machine (its streams, windows and HPACK
        tables) until the cyclic collector finds it.  Emptied here, reference counting frees it
        at once.  (A private attribute of h2 4.x; tests/proxy/test_reference_cycles.py fails if a
        version of h2 keeps the cycle some other way.)
        """
        self._frame_dispatch_table = {}


def with_goaway_code(pending: bytes, code: ErrorCodes) -> bytes:
    """C{h2}'s output with the error code of its closing GOAWAY (its last frame) replaced."""
    if len(pending) >= _GOAWAY_SIZE and pending[-_GOAWAY_SIZE + 3] == _GOAWAY_TYPE:
        frame = GoAwayFrame(0)
        frame.last_stream_id = int.from_bytes(pending[-8:-4], "big") & 0x7FFFFFFF
        frame.error_code = code
        return pending[:-_GOAWAY_SIZE] + frame.serialize()
    return pending
