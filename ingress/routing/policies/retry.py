# -*- test-case-name: tests.unit.test_retry -*-
"""
When a request is passed to the next endpoint: ingress-nginx's C{proxy-next-upstream} (nginx's
C{proxy_next_upstream}, C{_tries}, C{_timeout}; docs/user-guide/nginx-configuration/annotations.md,
"Custom timeouts"), and the Gateway API's HTTPRoute rule C{retry} (GEP-1731) in the same value
(L{Retry.from_gateway}).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DEFAULT_GATEWAY_RETRIES = 1
"""A Gateway API retry without C{attempts}: how many is the implementation's choice (GEP-1731); one, as Envoy's default."""

CONDITIONS = frozenset(
    {"error", "timeout", "invalid_header", "http_500", "http_502", "http_503", "http_504", "http_403", "http_404", "http_429", "non_idempotent", "off"}
)


@dataclass(frozen=True, slots=True)
class Retry:
    """
    C{on}: the failures that pass a request on (error, timeout, invalid_header; statuses in
    C{statuses}); C{tries}: attempts in all (0: as many as there are endpoints); C{timeout}:
    seconds from the request's start after which no new attempt is made (0: no limit).
    """

    on: frozenset[str] = frozenset({"error", "timeout"})
    statuses: frozenset[int] = frozenset()
    non_idempotent: bool = False
    tries: int = 3
    timeout: float = 0.0
    same_endpoint: bool = False  # with no other endpoint left, the one that failed is tried again (Gateway API)
    backoff: float = 0.0  # seconds between a failed attempt and the next (Gateway API)

    @classmethod
    def from_conditions(cls, conditions: tuple[str, ...], tries: int, timeout: float) -> Retry:
        """From the annotation's words; C{off} passes nothing on."""
        words = frozenset(conditions)
        if "off" in words:
            return cls(on=frozenset(), tries=tries, timeout=timeout)
        statuses = frozenset(int(word[5:]) for word in words if word.startswith("http_"))
        return cls(on=words - {"non_idempotent"}, statuses=statuses, non_idempotent="non_idempotent" in words, tries=tries, timeout=timeout)

    @classmethod
    def from_gateway(cls, codes: tuple[int, ...], attempts: Optional[int], backoff: Optional[float]) -> Retry:
        """
        An HTTPRoute rule's C{retry} (GEP-1731): the response statuses in C{codes} and connection errors
        are retried; C{attempts} counts retries (one when unset), so the tries are one more; C{backoff}
        is the least wait before each retry.  A retry goes to another endpoint when there is one, else
        to the same (the GEP retries "a backend", not another endpoint).
        """
        retries = DEFAULT_GATEWAY_RETRIES if attempts is None else attempts
        if retries == 0:
            return cls(on=frozenset(), tries=1)
        statuses = frozenset(codes)
        return cls(on=frozenset({"error"}), statuses=statuses, tries=retries + 1, same_endpoint=True, backoff=backoff or 0.0)

    def to_json(self) -> dict[str, object]:
        """For /debug/routes."""
        return {"on": sorted(self.on) or ["off"], "nonIdempotent": self.non_idempotent, "tries": self.tries, "timeout": self.timeout,
                **({"sameEndpoint": True, "backoff": self.backoff} if self.same_endpoint else {})}
