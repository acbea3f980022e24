"""
The speed-ups' one switch (L{ingress.speedups}): with C{TWINGRESS_SPEEDUPS=0} nothing is patched and
the plain paths are taken (h2's and hpack's objects as the libraries made them, the reactor's own
C{doIteration}, the transport's own C{write}, Twisted's TLS transport, nothing frozen); without it,
all of them are.

Each side runs in a fresh process (the switch is read once, when the package is imported): a data
plane is built, and a real reactor serves one TCP connection that writes through L{direct_writer}
and asks for a call before the next poll, as the HTTP/1.1 and HTTP/2 paths do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import gc, json, logging, socket
from twisted.internet import reactor, protocol
from twisted.internet.testing import MemoryReactorClock
import ingress.speedups
from ingress.observe.metrics import Metrics
from ingress.process.dataplane import ListenerOptions, data_plane
from ingress.runtime.live import LiveTable
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.speedups.fastwrite import direct_writer
from ingress.speedups.heap import frozen_after
from ingress.speedups.librarylog import HPACK_LOGGERS
from ingress.speedups.reactorstep import run_before_next_poll
from ingress.speedups.statehash import IDENTITY_HASHED, identity_hashed
from ingress.speedups.tlsdirect import tls_factory
from twisted.internet.ssl import CertificateOptions

clock, settings = MemoryReactorClock(), ProxySettings()
data_plane(clock, LiveTable(), UpstreamPool(clock, settings), settings, Metrics(), None, ListenerOptions(http=False, https=False, tls_min_version="1.2", tls_ciphers=""))
gc.unfreeze()
frozen_after(lambda: None)
found = {
    "enabled": ingress.speedups.ENABLED,
    "h2_enums_identity_hashed": identity_hashed(),
    "h2_enums_own_hash": [enum_type.__dict__.get("__hash__") for enum_type in IDENTITY_HASHED] == [None] * len(IDENTITY_HASHED),
    "hpack_debug_replaced": [("debug" in vars(logging.getLogger(name))) for name in HPACK_LOGGERS],
    "frozen": gc.get_freeze_count() > 0,
    "tls_factory": type(tls_factory(CertificateOptions(), False, protocol.Factory())).__name__,
}

class Server(protocol.Protocol):
    def connectionMade(self):
        write = direct_writer(self.transport)
        found["plain_write"] = getattr(write, "__self__", None) is self.transport and write.__name__ == "write"
        def before_poll():
            found["before_poll_called"] = True
            write(b"answer")
        run_before_next_poll(reactor, before_poll)

port = reactor.listenTCP(0, protocol.Factory.forProtocol(Server), interface="127.0.0.1")
client = socket.create_connection(("127.0.0.1", port.getHost().port))
client.setblocking(False)
received = []
def read():
    try:
        received.append(client.recv(100))
    except BlockingIOError:
        pass
    if received:
        found["received"] = received[0].decode()
        found["doIteration_replaced"] = "doIteration" in vars(reactor)
        reactor.stop()
    else:
        reactor.callLater(0.01, read)
reactor.callLater(0.01, read)
reactor.callLater(30, reactor.stop)
reactor.run()
print(json.dumps(found))
"""


def probe(switch: str | None) -> dict[str, Any]:
    """What a fresh process with C{TWINGRESS_SPEEDUPS} set to C{switch} (or unset) finds patched."""
    env = {name: value for name, value in os.environ.items() if name != "TWINGRESS_SPEEDUPS"}
    if switch is not None:
        env["TWINGRESS_SPEEDUPS"] = switch
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_switched_off_nothing_is_patched_and_the_plain_paths_serve() -> None:
    assert probe("0") == {
        "enabled": False,
        "h2_enums_identity_hashed": False,
        "h2_enums_own_hash": True,
        "hpack_debug_replaced": [False, False],
        "frozen": False,
        "tls_factory": "TLSMemoryBIOFactory",
        "plain_write": True,
        "before_poll_called": True,
        "received": "answer",
        "doIteration_replaced": False,
    }


@pytest.mark.parametrize("switch", [None, "1"])
def test_on_by_default_every_speed_up_is_applied(switch: str | None) -> None:
    assert probe(switch) == {
        "enabled": True,
        "h2_enums_identity_hashed": True,
        "h2_enums_own_hash": False,
        "hpack_debug_replaced": [True, True],
        "frozen": True,
        "tls_factory": "DirectTLSFactory",
        "plain_write": False,
        "before_poll_called": True,
        "received": "answer",
        "doIteration_replaced": True,
    }
