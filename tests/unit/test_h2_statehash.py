"""
h2's state-machine Enums hashed by identity (L{ingress.speedups.statehash}): every transition is
still found, h2 still speaks HTTP/2, nothing else of h2's was keyed by the old hashes, and the data
plane applies it.  (Upstream's own h2 suite runs with it applied too: tests/unit/test_h2stack_suites.py.)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived, ResponseReceived, StreamEnded
from twisted.internet.testing import MemoryReactorClock

from ingress.observe.metrics import Metrics
from ingress.process.dataplane import ListenerOptions, data_plane
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.runtime.live import LiveTable
from ingress.speedups import ENABLED
from ingress.speedups.statehash import IDENTITY_HASHED, hash_states_by_identity, hash_tables_again, identity_hashed, transition_tables

ROOT = Path(__file__).resolve().parents[2]


def _rehash(hashed: bool) -> None:
    """Each class's hash object's (as applied) or Enum's (as h2 made it), the tables' keys hashed again to match."""
    for enum_type in IDENTITY_HASHED:
        if hashed:
            enum_type.__hash__ = object.__hash__  # type: ignore[method-assign]
        elif "__hash__" in enum_type.__dict__:
            del enum_type.__hash__  # Enum's again
    hash_tables_again()


@pytest.fixture(autouse=True)
def enums_as_h2_made_them() -> Iterator[None]:
    """Each test starts from h2's own hashes (another test or a data plane may have applied ours), and leaves the process as it found it."""
    applied = identity_hashed()
    _rehash(False)
    assert all(hash(member) == hash(member.name) for enum_type in IDENTITY_HASHED for member in enum_type)
    yield
    _rehash(applied)


def test_each_member_hashes_by_identity_and_every_transition_is_found() -> None:
    assert all(hash(member) != object.__hash__(member) for member in IDENTITY_HASHED[0])
    hash_states_by_identity()
    for enum_type in IDENTITY_HASHED:
        for member in enum_type:
            assert hash(member) == object.__hash__(member)
    for table in transition_tables():
        assert len(table) > 50
        for (state, event), transition in list(table.items()):
            assert table[(state, event)] is transition  # a new tuple, hashed now


def test_applying_it_again_changes_nothing() -> None:
    hash_states_by_identity()
    before = [list(table.items()) for table in transition_tables()]
    hash_states_by_identity()
    assert [list(table.items()) for table in transition_tables()] == before


def test_the_identity_hashed_are_exactly_h2_s_plain_enums() -> None:
    """A new h2 with another plain Enum (its hash Enum's again) fails here, not silently slower."""
    import h2.connection
    import h2.errors
    import h2.settings
    import h2.stream

    plain = {value for module in (h2.connection, h2.stream, h2.errors, h2.settings) for value in vars(module).values()
             if isinstance(value, type) and issubclass(value, Enum) and value.__module__.startswith("h2.") and not issubclass(value, int)}
    assert plain == set(IDENTITY_HASHED)


def test_h2_serves_a_request_with_them() -> None:
    hash_states_by_identity()
    client, server = H2Connection(), H2Connection(H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    client.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "https"), (":authority", "a.example")], end_stream=True)
    received = server.receive_data(client.data_to_send())
    assert [type(event) for event in received if isinstance(event, (RequestReceived, StreamEnded))] == [RequestReceived, StreamEnded]
    server.send_headers(1, [(":status", "200")])
    server.send_data(1, b"ok", end_stream=True)
    answered = client.receive_data(server.data_to_send())
    assert [type(event) for event in answered if isinstance(event, (ResponseReceived, DataReceived, StreamEnded))] == [
        ResponseReceived, DataReceived, StreamEnded,
    ]


_CONTAINERS_KEYED_BY_THEM = """
import gc, json
import ingress.process.dataplane  # everything the process imports of h2 and of ours
from ingress.speedups.statehash import IDENTITY_HASHED, transition_tables
members = {id(member) for enum_type in IDENTITY_HASHED for member in enum_type}
def keyed(container):
    keys = container.keys() if isinstance(container, dict) else container
    return any(id(key) in members or (type(key) is tuple and any(id(part) in members for part in key)) for key in keys)
found = [container for container in gc.get_objects() if isinstance(container, (dict, set, frozenset)) and keyed(container)]
tables = transition_tables()
print(json.dumps([len(found), sum(any(container is table for table in tables) for container in found)]))
"""


def test_nothing_but_the_transition_tables_is_keyed_by_them_at_start() -> None:
    """In a fresh process that imported all the data plane imports: the two tables, rebuilt in place, are the only ones."""
    done = subprocess.run([sys.executable, "-c", _CONTAINERS_KEYED_BY_THEM], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[2, 2]", done.stdout + done.stderr


def test_the_data_plane_applies_it_for_its_process_unless_the_speed_ups_are_off() -> None:
    """Applied by the data plane with the speed-ups on; h2 left as it is with TWINGRESS_SPEEDUPS=0 (make test's pure rerun)."""
    assert not identity_hashed()
    reactor, settings = MemoryReactorClock(), ProxySettings()  # type: ignore[no-untyped-call]  # Twisted's testing reactor is not annotated
    data_plane(reactor, LiveTable(), UpstreamPool(reactor, settings), settings, Metrics(), None, ListenerOptions(http=False, https=False, tls_min_version="1.2", tls_ciphers=""))  # type: ignore[arg-type]  # the testing reactor stands for the process's
    assert identity_hashed() is ENABLED
