"""
The controllers' one way to write to the cluster: the leadership check right
before the request, then the write counted (C{twingress_controller_api_writes_total}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingress.sources.kube.client import FIELD_MANAGER, KubeClient


class LeaderWriter:
    """Writes of one controller: C{check} raises L{NotLeader} when we may not write; C{count(kind, verb)} counts a done write."""

    def __init__(self, client: KubeClient, check: Callable[[], None], count: Callable[[str, str], None]) -> None:
        self.client = client
        self.check = check
        self.count = count

    def request(
        self,
        method: str,
        path: str,
        kind: str,
        verb: str,
        body: Any,
        content_type: str = "application/json",
        timeout: tuple[float, float] = (5.0, 30.0),
    ) -> dict[str, Any]:
        """One write as our field manager; raises L{APIError} (not counted) when the apiserver refuses it."""
        self.check()
        query = {"fieldManager": FIELD_MANAGER}
        answer = self.client.request(method, path, query, body=body, timeout=timeout, content_type=content_type)
        self.count(kind, verb)
        return answer
