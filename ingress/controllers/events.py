# -*- test-case-name: tests.kube.test_servicegen -*-
"""
Events (C{events.k8s.io/v1}) that tell a person what the controller did or refused.

Events are best effort: a failed Event write is logged, never retried and
never fails a sync.  The same Warning about the same object version is
recorded once (again after ten minutes), not on every resync, so a broken annotation does not flood
the namespace.
"""

from __future__ import annotations

import threading
import time

from twisted.logger import Logger

from ingress.controllers.leader import micro_time
from ingress.controllers.writer import LeaderWriter
from ingress.model import CONTROLLER_NAME, ObjectMeta

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

NORMAL, WARNING = "Normal", "Warning"
REPEAT_AFTER = 600.0  # seconds before the same event about the same object is recorded again
_MAX_REMEMBERED = 10_000
_API_VERSIONS = {"Service": "v1", "ConfigMap": "v1", "Gateway": "gateway.networking.k8s.io/v1"}  # the regarding object's; else networking's (Ingress)


class EventRecorder:
    """Creates Events about Services (C{regarding}) and, optionally, the Ingress involved (C{related})."""

    def __init__(self, writer: LeaderWriter, instance: str) -> None:
        self.writer = writer
        self.instance = instance
        self._recent: dict[tuple[str, str, str, str], float] = {}
        self._lock = threading.Lock()

    def record(self, about: ObjectMeta, kind: str, type_: str, reason: str, action: str, note: str, related: str = "") -> None:
        """One Event about C{about} (a C{kind} in API group core, networking or gateway.networking); repeated Warnings are dropped."""
        if type_ == WARNING and not self._first_time((about.uid, reason, note, about.resource_version)):
            return
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{about.name}.{time.time_ns():x}", "namespace": about.namespace},  # as client-go names them
            "eventTime": micro_time(),
            "reportingController": CONTROLLER_NAME,
            "reportingInstance": self.instance[:128],
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": type_,
            "regarding": {
                "apiVersion": _API_VERSIONS.get(kind, "networking.k8s.io/v1"),
                "kind": kind,
                "namespace": about.namespace,
                "name": about.name,
                "uid": about.uid,
            },
        }
        if related:
            body["related"] = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "namespace": about.namespace, "name": related}
        try:
            path = f"/apis/events.k8s.io/v1/namespaces/{about.namespace}/events"
            self.writer.request("POST", path, "Event", "create", body, timeout=(2.0, 10.0))
        except Exception as error:  # noqa: BLE001 - an Event is never worth failing a sync for
            log.warn("event {reason} about {ns}/{name} not recorded: {error}", reason=reason, ns=about.namespace, name=about.name, error=str(error)[:200])

    def _first_time(self, key: tuple[str, str, str, str]) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._recent.get(key)
            if last is not None and now - last < REPEAT_AFTER:
                return False
            if len(self._recent) >= _MAX_REMEMBERED:
                self._recent = {k: t for k, t in self._recent.items() if now - t < REPEAT_AFTER}
            self._recent[key] = now
            return True
