# -*- test-case-name: tests.unit.test_acme_schedule -*-
"""
When to order again, the same in both modes (the manifests issuer and the cluster's leader).

- A certificate is renewed at the time the server suggests (ACME Renewal Information, RFC 9773: a
  random point of its C{suggestedWindow}, which the C{acme} library picks), never later than
  L{LATEST} of its lifetime, so that failed renewals still have time to be retried before it
  expires; a server without C{renewalInfo} gets the usual two thirds of the lifetime.
- The renewal window is asked for again (RFC 9773 4.3.3) at the C{Retry-After} of the last
  renewalInfo answer, bounded to between a minute and a day (L{next_renewal_poll}), so that a window
  the server moved (a revoked certificate: renew at once) is acted upon; never after the renewal.
- A failed order waits, per certificate, 30 s doubling to an hour (L{Backoff}), and at least what the
  server said: its C{Retry-After} (seconds or an HTTP date), or an hour for a C{rateLimited} problem
  that names no time.  Nothing else (a changed Ingress, a status write, a new table) shortens it,
  and neither does a restart or a new leader: the wait is kept (L{Pause}, as text: L{pause_text})
  where the order's URL is kept, and read again before the next order.

Pure: no I/O, the clock is a parameter (a wall clock: a kept wait outlives the process).
"""

from __future__ import annotations

import datetime
import email.utils
import json
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Optional

FIRST_BACKOFF, LAST_BACKOFF = 30.0, 3600.0
RATE_LIMITED = "urn:ietf:params:acme:error:rateLimited"
DEFAULT_SHARE = 2 / 3  # of the lifetime, without renewal information
LATEST = 5 / 6  # of the lifetime: a window that ends later is cut here
RENEW_AFTER_ANNOTATION = "acme.twingress.io/renew-after"
RENEWAL_INFO_ANNOTATION = "acme.twingress.io/renewal-info-at"  # when the renewalInfo is asked for again
POLL_FLOOR, POLL_CEILING = 60.0, 86400.0  # a renewalInfo Retry-After shorter is a minute, longer a day (RFC 9773 4.3.3)


def renewal_at(not_before: datetime.datetime, not_after: datetime.datetime, suggested: Optional[datetime.datetime]) -> datetime.datetime:
    """When to renew a certificate valid from C{not_before} to C{not_after}, given the server's C{suggested} time (or None)."""
    lifetime = not_after - not_before
    latest = not_before + lifetime * LATEST
    if suggested is None:
        return not_before + lifetime * DEFAULT_SHARE
    return min(suggested, latest)


def next_renewal_poll(now: datetime.datetime, retry_after: Optional[datetime.datetime], renew_at: datetime.datetime) -> Optional[datetime.datetime]:
    """
    When to fetch the renewalInfo again: at its answer's C{Retry-After} (the C{acme} library's: six hours without one),
    bounded to between L{POLL_FLOOR} and L{POLL_CEILING} from C{now}; None when the renewal comes first.
    """
    wait = (retry_after - now).total_seconds() if retry_after is not None else POLL_CEILING / 4
    at = now + datetime.timedelta(seconds=min(max(wait, POLL_FLOOR), POLL_CEILING))
    return at if at < renew_at else None


def retry_after_seconds(value: Optional[str], now: datetime.datetime) -> Optional[float]:
    """A C{Retry-After} header's wait in seconds (RFC 9110: delay-seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max((when - now).total_seconds(), 0.0)


def failure_wait(backoff: float, retry_after: Optional[float], rate_limited: bool) -> float:
    """The wait after a failure: the backoff, or longer when the server asked for longer (a rateLimited problem: an hour at least)."""
    wait = backoff
    if retry_after is not None:
        wait = max(wait, retry_after)
    elif rate_limited:
        wait = max(wait, LAST_BACKOFF)
    return wait


@dataclass(frozen=True)
class Pause:
    """A certificate's backoff as it is kept across restarts: no order before C{until} (seconds since the epoch), after C{failures} failed ones in a row."""

    until: float
    failures: int


def pause_text(pause: Pause, hosts: tuple[str, ...]) -> str:
    """The kept form of a pause (a file's content, an annotation's value): JSON naming the hosts it is for."""
    until = datetime.datetime.fromtimestamp(pause.until, datetime.UTC).isoformat()
    return json.dumps({"hosts": ",".join(hosts), "until": until, "failures": pause.failures}, sort_keys=True)


def pause_of(text: str, hosts: tuple[str, ...]) -> Optional[Pause]:
    """The pause kept for C{hosts}; None when there is none, it is unreadable, or it was for other hosts (a changed spec.tls starts over)."""
    try:
        kept = json.loads(text)
        if kept["hosts"] != ",".join(hosts):
            return None
        until = datetime.datetime.fromisoformat(kept["until"])
        failures = int(kept["failures"])
    except (ValueError, TypeError, KeyError):
        return None
    if until.tzinfo is None or failures < 1:
        return None
    return Pause(until.timestamp(), failures)


class Backoff:
    """Per certificate: when the next order may be placed, and how long the next failure waits (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._state: dict[Hashable, Pause] = {}
        self._lock = threading.Lock()

    def remaining(self, key: Hashable) -> float:
        """Seconds until C{key} may be ordered again (0: now)."""
        with self._lock:
            pause = self._state.get(key)
        return max(pause.until - self.clock(), 0.0) if pause is not None else 0.0

    def failed(self, key: Hashable, retry_after: Optional[float] = None, rate_limited: bool = False) -> float:
        """An order of C{key} failed: the seconds to wait before the next one (the backoff doubles, up to an hour)."""
        with self._lock:
            failures = self._state[key].failures if key in self._state else 0
            wait = failure_wait(min(FIRST_BACKOFF * 2**failures, LAST_BACKOFF), retry_after, rate_limited)
            self._state[key] = Pause(self.clock() + wait, failures + 1)
        return wait

    def pause(self, key: Hashable) -> Optional[Pause]:
        """What to keep of C{key}'s backoff (None: nothing failed since its last success)."""
        with self._lock:
            return self._state.get(key)

    def restore(self, key: Hashable, pause: Pause) -> None:
        """Take up a kept pause (a restart, a new leader), unless this process already knows of a later one."""
        with self._lock:
            known = self._state.get(key)
            if known is None or known.until < pause.until:
                self._state[key] = pause

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self._state.pop(key, None)
