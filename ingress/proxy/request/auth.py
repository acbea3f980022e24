# -*- test-case-name: tests.proxy.test_basic_auth -*-
"""
Checking a request's Basic credentials against a route's users, without blocking the reactor.

Hashes such as bcrypt take milliseconds of CPU by design, so a password is checked on a
small thread pool of its own (a flood of guesses queues there, never on the reactor),
and a success is remembered for a while, keyed by a digest of the user, the password
and the hash it matched, so that a client sending its credentials on every request
pays the hash once.  A changed Secret changes the hash, so an old password stops
working at once.  Failures are not remembered: each guess costs the guesser a hash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from typing import Optional

from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from ingress.proxy.message.fields import field_value
from ingress.routing.policies.auth import HASHES, BasicAuth

_REMEMBERED = 10_000  # successes kept
_REMEMBER_SECONDS = 300.0


def credentials(block: bytes) -> Optional[tuple[str, str]]:
    """The user and password of an C{Authorization: Basic} field (RFC 7617), or None."""
    value = field_value(block, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


class PasswordChecker:
    """The proxy's checks: a bounded pool for the hashing, and the recent successes."""

    def __init__(self, reactor: object, threads: int = 2) -> None:
        self.reactor = reactor
        self._pool = ThreadPool(minthreads=0, maxthreads=threads, name="twingress-basic-auth")
        self._started = False
        self._remembered: dict[bytes, float] = {}

    def check(self, auth: BasicAuth, block: bytes) -> Deferred[bool]:
        """Whether the request's credentials let it through (fires at once when the answer is known)."""
        given = credentials(block)
        if given is None:
            return succeed(False)
        user, password = given
        hashed = auth.hash_for(user)
        if hashed is None:
            return succeed(False)
        key = hashlib.blake2b(b"\0".join((user.encode(), password.encode(), hashed.encode())), digest_size=16).digest()
        seen = self._remembered.get(key)
        if seen is not None and time.monotonic() - seen < _REMEMBER_SECONDS:
            return succeed(True)
        if not self._started:
            self._pool.start()
            self._started = True
            self.reactor.addSystemEventTrigger("during", "shutdown", self._pool.stop)  # type: ignore[attr-defined]  # the reactor is typed object here; the process reactor given has system event triggers
        checking = deferToThreadPool(self.reactor, self._pool, _verify, password, hashed)  # type: ignore[arg-type]  # the same reactor: an IReactorFromThreads, typed object here
        return checking.addCallback(self._remember, key)

    def _remember(self, ok: bool, key: bytes) -> bool:
        if ok:
            if len(self._remembered) >= _REMEMBERED:
                self._remembered.pop(next(iter(self._remembered)))  # the oldest
            self._remembered[key] = time.monotonic()
        return ok


def _verify(password: str, hashed: str) -> bool:
    """On a pool thread: the hash's own scheme decides (bcrypt, apr1, {SHA}, SHA-2 crypt, DES crypt)."""
    try:
        return bool(HASHES.verify(password, hashed))
    except (ValueError, TypeError):
        return False
