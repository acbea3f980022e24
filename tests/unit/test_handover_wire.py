"""
Tests for L{ingress.process.handoverwire} and the checks of L{ingress.process.adoption}: frames, proofs, socket
entries, peer credentials, and which received socket fits which listener. The processes are in
tests/proxy/test_handover.py.
"""

from __future__ import annotations

import os
import socket

import pytest

from ingress.process.adoption import bound_as, slot_sockets
from ingress.process.handoverwire import (
    MAX_FRAME,
    FrameReader,
    HandoverRefused,
    SocketEntry,
    check_peer,
    check_proof,
    describe,
    entries_of,
    frame,
    new_nonce,
    nonce_of,
    proof,
)
from ingress.runtime.sockets import open_listener, parse_listener

KEY = b"k" * 32


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    data = frame({"type": "hello", "n": 1}) + frame({"type": "ready"})
    reader = FrameReader()
    out = [message for i in range(len(data)) for message in reader.feed(data[i : i + 1])]
    assert out == [{"type": "hello", "n": 1}, {"type": "ready"}]


@pytest.mark.parametrize(
    "data",
    [
        (MAX_FRAME + 1).to_bytes(4, "big"),  # longer than any message: refused before it is read
        b"\x00\x00\x00\x03abc",  # not JSON
        b"\x00\x00\x00\x02[]",  # JSON, not a message
        b"\x00\x00\x00\x0b{\"type\": 1}",  # a type that is not a string
        b"\x00\x00\x00\x02\xff\xfe",  # not UTF-8
    ],
)
def test_a_bad_frame_is_refused(data: bytes) -> None:
    with pytest.raises(HandoverRefused):
        FrameReader().feed(data)


def test_each_proof_is_bound_to_its_role_and_both_nonces() -> None:
    ours, theirs = new_nonce(), new_nonce()
    good = proof(KEY, "successor", ours, theirs)
    check_proof({"proof": good}, proof(KEY, "successor", ours, theirs))
    for wrong in (
        proof(b"another key of 32 bytes, not ours", "successor", ours, theirs),
        proof(KEY, "predecessor", ours, theirs),  # the other side's proof reflected back
        proof(KEY, "successor", theirs, ours),
        proof(KEY, "successor", new_nonce(), theirs),  # replayed from another exchange
    ):
        with pytest.raises(HandoverRefused):
            check_proof({"proof": wrong}, good)
    with pytest.raises(HandoverRefused):
        check_proof({}, good)


@pytest.mark.parametrize("nonce", [None, 7, "zz", "00", "00" * 31, "00" * 33])
def test_a_nonce_of_the_wrong_size_is_refused(nonce: object) -> None:
    with pytest.raises(HandoverRefused):
        nonce_of({"type": "hello", "nonce": nonce})


def test_socket_entries_round_trip_and_bad_ones_are_refused() -> None:
    entry = SocketEntry("http", "tcp", socket.AF_INET, ("127.0.0.1", 80))
    assert entries_of({"type": "sockets", "sockets": [entry.to_json()]}) == [entry]
    for bad in (
        {"sockets": "x"},
        {"sockets": [{"listener": "http"}]},
        {"sockets": [{**entry.to_json(), "kind": "sctp"}]},
        {"sockets": [{**entry.to_json(), "family": socket.AF_UNIX}]},
        {"sockets": [entry.to_json()] * 2000},
    ):
        with pytest.raises(HandoverRefused):
            entries_of({"type": "sockets", **bad})


def test_peer_credentials_name_the_uid() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX)
    with ours, theirs:
        assert check_peer(ours, os.getuid()) == os.getpid()
        with pytest.raises(HandoverRefused, match=f"a peer of uid {os.getuid()}"):
            check_peer(ours, os.getuid() + 1)


@pytest.mark.parametrize(
    ("bound", "option", "fits"),
    [
        ("tcp:0:interface=127.0.0.1", "tcp:{port}:interface=127.0.0.1", True),
        ("tcp:0:interface=127.0.0.1", "tcp:{port}:interface=127.0.0.2", False),  # another address
        ("tcp:0:interface=127.0.0.1", "tcp:{other}:interface=127.0.0.1", False),  # another port
        ("tcp:0", "tcp:{port}", True),  # every IPv4 address
        ("tcp:0", "tcp:{port}:interface=127.0.0.1", False),
        ("tcp6:0", "tcp6:{port}", True),
        ("tcp6:0", "tcp:{port}", False),  # another family
    ],
)
def test_a_received_socket_fits_only_where_the_option_says(bound: str, option: str, fits: bool) -> None:
    sock = open_listener(parse_listener("http", bound))
    with sock:
        port = sock.getsockname()[1]
        assert bound_as(sock, parse_listener("http", option.format(port=port, other=port + 1 if port < 65535 else port - 1))) is fits
        assert describe("http", sock) == SocketEntry("http", "tcp", int(sock.family), (sock.getsockname()[0], port))


@pytest.mark.parametrize(("sockets", "count", "shares"), [(2, 2, [[0], [1]]), (2, 1, [[0, 1]]), (3, 2, [[0, 2], [1]]), (1, 1, [[0]])])
def test_every_socket_is_served_by_some_worker(sockets: int, count: int, shares: list[list[int]]) -> None:
    items = list(range(sockets))
    assert [slot_sockets(items, index, count) for index in range(count)] == shares  # type: ignore[arg-type]
