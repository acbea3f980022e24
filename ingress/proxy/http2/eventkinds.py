"""
C{h2}'s events by kind, for L{ingress.proxy.http2.connection.H2ServerProtocol}'s dispatch: a dict
lookup, then integer compares and native calls to its handlers (compiled, these Final literals are
in the code that reads them).  A dict of unbound methods, as before, made each event a Python call.
"""

from __future__ import annotations

from typing import Final

from h2 import events

IGNORED: Final = 0  # an event no handler takes (settings acknowledged, pings, priorities...)
REQUEST: Final = 1
DATA: Final = 2
ENDED: Final = 3
WINDOW: Final = 4
RESET: Final = 5
TRAILERS: Final = 6
SETTINGS: Final = 7
TERMINATED: Final = 8

EVENT_KINDS: Final[dict[type, int]] = {
    events.RequestReceived: REQUEST,
    events.DataReceived: DATA,
    events.StreamEnded: ENDED,
    events.WindowUpdated: WINDOW,
    events.StreamReset: RESET,
    events.TrailersReceived: TRAILERS,
    events.RemoteSettingsChanged: SETTINGS,
    events.ConnectionTerminated: TERMINATED,
}
