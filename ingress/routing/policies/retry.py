# -*- test-case-name: tests.unit.test_retry -*-
"""
When a request is passed to the next endpoint: ingress-nginx's C{proxy-next-upstream} (nginx's
C{proxy_next_upstream}, C{_tries}, C{_timeout}; docs/user-guide/nginx-configuration/annotations.md,
"Custom timeouts").
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @classmethod
    def from_conditions(cls, conditions: tuple[str, ...], tries: int, timeout: float) -> Retry:
        """From the annotation's words; C{off} passes nothing on."""
        words = frozenset(conditions)
        if "off" in words:
            return cls(on=frozenset(), tries=tries, timeout=timeout)
        statuses = frozenset(int(word[5:]) for word in words if word.startswith("http_"))
        return cls(on=words - {"non_idempotent"}, statuses=statuses, non_idempotent="non_idempotent" in words, tries=tries, timeout=timeout)

    def to_json(self) -> dict[str, object]:
        """For /debug/routes."""
        return {"on": sorted(self.on) or ["off"], "nonIdempotent": self.non_idempotent, "tries": self.tries, "timeout": self.timeout}
