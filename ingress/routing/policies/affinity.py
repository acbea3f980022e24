# -*- test-case-name: tests.unit.test_affinity -*-
"""
Cookie session affinity: a client keeps its endpoint, as ingress-nginx's "Session Affinity" does.

The cookie holds a key and, after "|", a tag of the upstream it belongs to
(ingress-nginx's cookie value is "key|backend-key" too: the tag is what keeps a
client with a canary that served it).  What the key means depends on the mode:

- C{balanced} (the default): a random key, mapped to an endpoint by rendezvous
  hashing over the endpoints ready now.  The same key finds the same endpoint
  while the endpoints stay; when one goes, only its clients move; when one is
  added, about 1/n of the clients move to it ("will redistribute some sessions
  if a deployment gets scaled up").
- C{persistent}: the key names the endpoint itself; a client stays there as
  long as that endpoint is ready, and only then gets a new one ("will not
  rebalance sessions to new servers").
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

Address = tuple[str, int]
BALANCED, PERSISTENT = "balanced", "persistent"


@dataclass(frozen=True, slots=True)
class Affinity:
    """The sticky cookie of a route: its name and attributes, and the mode."""

    cookie: str = "INGRESSCOOKIE"
    mode: str = BALANCED
    path: str = "/"
    domain: str = ""
    max_age: Optional[int] = None
    expires: Optional[int] = None  # seconds from when the cookie is set
    samesite: str = ""
    secure: Optional[bool] = None  # None: Secure on HTTPS only
    change_on_failure: bool = False
    conditional_samesite_none: bool = False  # SameSite=None left out for clients that reject it

    def to_json(self) -> dict[str, object]:
        """For /debug/routes."""
        return {"cookie": self.cookie, "mode": self.mode, "path": self.path}


def endpoint_key(address: Address) -> str:
    """The persistent key of an endpoint: stable across tables, says nothing readable about the address."""
    return hashlib.blake2s(f"{address[0]}:{address[1]}".encode(), digest_size=8).hexdigest()


def upstream_tag(upstream_key: str) -> str:
    """The tag of an upstream in a cookie value (its key hashed: cookies need not show Service names)."""
    return hashlib.blake2s(upstream_key.encode(), digest_size=6).hexdigest()


def rendezvous(key: str, targets: Sequence[Address]) -> Optional[Address]:
    """The target with the highest hash of (key, target): stable while the targets stay, minimal moves when they change."""
    best: Optional[Address] = None
    best_score = b""
    for target in targets:
        score = hashlib.blake2s(f"{key}/{target[0]}:{target[1]}".encode(), digest_size=8).digest()
        if score > best_score:
            best, best_score = target, score
    return best


def rendezvous_top(key: str, targets: Sequence[Address], count: int) -> list[Address]:
    """The C{count} targets with the highest hashes of (key, target): a key's subset, as stable as L{rendezvous}."""
    ranked = sorted(targets, key=lambda target: hashlib.blake2s(f"{key}/{target[0]}:{target[1]}".encode(), digest_size=8).digest(), reverse=True)
    return ranked[:count]


def persistent_target(key: str, targets: Sequence[Address]) -> Optional[Address]:
    """The target a persistent key names, if it is still among the targets."""
    return next((target for target in targets if endpoint_key(target) == key), None)


def samesite_none_understood(user_agent: str) -> bool:
    """
    False for the clients that reject a cookie carrying SameSite=None (Chrome 40 to 69, iOS 12,
    Safari on macOS 10.14: Chromium's list of incompatible clients, which ingress-nginx's
    session-cookie-conditional-samesite-none follows).
    """
    if any(marker in user_agent for marker in ("Chrome/4", "Chrome/5", "Chrome/6", "CPU iPhone OS 12", "iPad; CPU OS 12")):
        return False
    return not ("Macintosh" in user_agent and "Intel Mac OS X 10_14" in user_agent and "Safari" in user_agent and "Chrome" not in user_agent)
