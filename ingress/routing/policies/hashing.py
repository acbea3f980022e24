# -*- test-case-name: tests.unit.test_hosts_and_hashing -*-
"""
C{upstream-hash-by}: the endpoint chosen by a key made from the request.

ingress-nginx's "Custom NGINX upstream hashing": the key is text, nginx
variables or both (C{$request_uri}, C{$request_uri$host}, C{${request_uri}-text}).
With C{upstream-hash-by-subset} the key picks a subset of
C{upstream-hash-by-subset-size} endpoints (default 3) and each request goes to
one of them at random ("a balance between stickiness and load distribution").
The variables twingress knows are C{request_uri}, C{uri}, C{args}, C{host},
C{remote_addr}, C{http_<name>} and C{cookie_<name>}.  The key is mapped to an
endpoint by rendezvous hashing (L{ingress.routing.policies.affinity.rendezvous}),
which, like the ketama ring ingress-nginx uses, moves only a few keys when
the endpoints change.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingress.routing.policies.variables import Part, UnknownVariable
from ingress.routing.policies.variables import parse_template as parse_parts

__all__ = ["HashBy", "Part", "UnknownVariable", "parse_template"]


@dataclass(frozen=True, slots=True)
class HashBy:
    """The key template, as parts."""

    parts: tuple[Part, ...]
    source: str  # as written, for /debug/routes
    subset_size: int = 0  # upstream-hash-by-subset: the key picks this many endpoints, one of them at random


def parse_template(value: str) -> HashBy:
    """The parts of a key template; raises L{UnknownVariable} or ValueError for what cannot be read."""
    parts = parse_parts(value)
    if not parts:
        raise ValueError("the key is empty")
    return HashBy(parts, value)
