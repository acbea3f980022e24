# -*- test-case-name: tests.unit.test_handover_wire -*-
"""
The hand-over protocol's messages (L{ingress.process.handover}): frames, proofs, peer credentials,
and the description of each listening socket handed over.

Every message is one JSON object behind a 4-byte big-endian length, at most L{MAX_FRAME} bytes, so a
garbled or hostile peer is refused at its first bad frame instead of being read without bound.  The
sequence, successor (the new process, S) and predecessor (the running one, P):

 1. S -> P C{{"type": "hello", "version": 1, "nonce": hex}}
 2. P -> S C{{"type": "challenge", "nonce": hex, "proof": HMAC(key, "predecessor" S-nonce P-nonce)}}
 3. S -> P C{{"type": "proof", "proof": HMAC(key, "successor" P-nonce S-nonce)}}
 4. P -> S C{{"type": "sockets", "sockets": [{"listener", "kind", "family", "address"}, ...]}}, the
    descriptors attached (SCM_RIGHTS) in the order of the list
 5. S -> P C{{"type": "ready"}} once S serves its table from them
 6. P -> S C{{"type": "released"}}: P accepts no more and drains; S takes the rendezvous over

Each side proves that it holds the key over the other side's fresh nonce, so a recorded exchange
cannot be replayed, and neither side sends anything of value (P's sockets, S's "ready", which makes
P stop) before the other has proved itself.  The role label keeps P's proof from being reflected
back as S's.  A socket's C{kind} is C{"tcp"} (a listening stream socket) or C{"udp"}; its
C{listener} names what it serves: C{http}, C{https}, C{metrics}, a stream port (C{stream:UDP/5353})
or a Gateway listener's port (C{gateway-http:TCP/8080}, L{ingress.process.streamsockets}).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import struct
from dataclasses import dataclass
from typing import Any

MAX_FRAME = 65536
EXCHANGE_SECONDS = 10.0  # the successor's whole exchange up to the sockets; the predecessor's wait for a proof
VERSION = 1
NONCE_BYTES = 32
MOST_SOCKETS = 1024  # more than any listener set has (a socket per listener and worker)
_LENGTH = struct.Struct("!I")
_PEERCRED = struct.Struct("3i")  # pid, uid, gid
KINDS = ("tcp", "udp")


class HandoverRefused(Exception):
    """The peer broke the protocol or did not prove that it holds the key: nothing is taken from it or given to it."""


IN_PROGRESS = "a hand-over to another process is in progress"
NOT_SERVING = "this process is not serving (starting or draining)"
NOT_YET = (IN_PROGRESS, NOT_SERVING)
"""The predecessor's refusals that say "not now" rather than "not you" (the first: busy with another successor)."""


def frame(message: dict[str, Any]) -> bytes:
    """C{message} as one frame: its JSON behind its length."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return _LENGTH.pack(len(data)) + data


class FrameReader:
    """Frames out of a byte stream, as many as are complete; a bad one raises L{HandoverRefused}."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise HandoverRefused(f"a frame of {length} bytes (at most {MAX_FRAME})")
            if len(self._buffer) < _LENGTH.size + length:
                break
            body, self._buffer = self._buffer[_LENGTH.size : _LENGTH.size + length], self._buffer[_LENGTH.size + length :]
            messages.append(_message(body))
        if len(self._buffer) > MAX_FRAME + _LENGTH.size:
            raise HandoverRefused("a frame longer than its length says")
        return messages


def _message(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise HandoverRefused("a frame that is not JSON") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise HandoverRefused("a frame that is not a message")
    return message


def expect(message: dict[str, Any], kind: str) -> dict[str, Any]:
    """C{message}, when it is of type C{kind}; else the peer is refused."""
    if message["type"] != kind:
        raise HandoverRefused(f"{message['type'][:40]!r} where {kind!r} was due")
    return message


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def nonce_of(message: dict[str, Any]) -> bytes:
    """The peer's nonce in C{message}: NONCE_BYTES bytes as hex, or the peer is refused."""
    value = message.get("nonce")
    try:
        nonce = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        nonce = b""
    if len(nonce) != NONCE_BYTES:
        raise HandoverRefused("no nonce")
    return nonce


def proof(key: bytes, role: str, first: bytes, second: bytes) -> str:
    """HMAC-SHA256 under C{key} of the role and both nonces (the verifier's first): what proves C{role} holds the key."""
    return hmac.new(key, role.encode() + b"\0" + first + second, hashlib.sha256).hexdigest()


def check_proof(message: dict[str, Any], expected: str) -> None:
    """The peer's proof, compared in constant time; a wrong one (another key) refuses the peer."""
    given = message.get("proof")
    if not isinstance(given, str) or not hmac.compare_digest(given.encode(), expected.encode()):
        raise HandoverRefused("a wrong proof (the peer holds another key)")


def check_peer(sock: socket.socket, uid: int) -> int:
    """
    The peer's pid, when the process at the other end of unix socket C{sock} runs as C{uid} (SO_PEERCRED,
    as the kernel recorded it at connect); a peer of another uid is refused.  Not enough alone (uid 10001 is
    not unique to twingress on a node), and so is the key: the check is one more lock, not the only one.
    """
    pid, peer_uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    if peer_uid != uid:
        raise HandoverRefused(f"a peer of uid {peer_uid} (pid {pid}); this process runs as uid {uid}")
    return int(pid)


@dataclass(frozen=True)
class SocketEntry:
    """One socket of a C{sockets} message: which listener it serves, what it is, where it is bound."""

    listener: str
    kind: str
    family: int
    address: tuple[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"listener": self.listener, "kind": self.kind, "family": self.family, "address": list(self.address)}


def describe(listener: str, sock: socket.socket) -> SocketEntry:
    """The entry of one of our listening sockets."""
    host, port = sock.getsockname()[:2]
    return SocketEntry(listener, "udp" if sock.type == socket.SOCK_DGRAM else "tcp", int(sock.family), (str(host), int(port)))


def entries_of(message: dict[str, Any]) -> list[SocketEntry]:
    """The entries of a C{sockets} message; a malformed one refuses the peer."""
    listed = message.get("sockets")
    if not isinstance(listed, list) or len(listed) > MOST_SOCKETS:
        raise HandoverRefused("a sockets message without a list of sockets")
    entries = []
    for item in listed:
        try:
            host, port = item["address"]
            entry = SocketEntry(str(item["listener"]), str(item["kind"]), int(item["family"]), (str(host), int(port)))
        except (KeyError, TypeError, ValueError):
            raise HandoverRefused("a malformed socket entry") from None
        if entry.kind not in KINDS or entry.family not in (socket.AF_INET, socket.AF_INET6):
            raise HandoverRefused(f"a socket of kind {entry.kind[:20]!r}, family {entry.family}")
        entries.append(entry)
    return entries


def rendezvous_address(path: str) -> str:
    """
    The unix socket address of C{--handover PATH}: C{@NAME} is the Linux abstract name C{NAME} (C{"\\0NAME"}:
    no file, no volume; one per network namespace, so the hostNetwork pods of a node share it), anything else a path.
    """
    return "\0" + path[1:] if path.startswith("@") else path


def read_key(path: str) -> bytes:
    """The shared key: the file's bytes, at least 16 of them; raises ValueError with the reason."""
    try:
        with open(path, "rb") as file:
            key = file.read(4096).strip()
    except OSError as error:
        raise ValueError(f"{path!r}: {error.strerror}") from None
    if len(key) < 16:
        raise ValueError(f"{path!r} holds {len(key)} bytes; a key has at least 16")
    return key
