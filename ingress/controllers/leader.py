# -*- test-case-name: tests.kube.test_leader -*-
"""
Leader election on a C{coordination.k8s.io/v1} Lease, the way client-go does it.

Every replica serves traffic; only the holder of the Lease writes to the
cluster.  The rules that make that safe:

- A Lease held by someone else is taken only after it has not changed for a
  whole lease duration, timed by our own clock from when we saw it change
  (never by comparing the holder's timestamps with ours: clocks skew).
- Writes use the Lease's resourceVersion, so two candidates can't both win.
- A leader that has not renewed within the renew deadline (shorter than the
  lease duration) stops acting as leader at once - before anyone else can
  take the Lease - even if it cannot reach the apiserver to say so.
- On graceful shutdown the leader releases the Lease (empty holder), so a
  successor takes over within one retry period.

Runs on its own thread; L{is_leader} may be called from any thread, and the
start/stop callbacks are invoked on the election thread.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Optional

from twisted.logger import Logger

from ingress.sources.kube.client import APIError, KubeClient

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def micro_time(now: Optional[float] = None) -> str:
    """A MicroTime: RFC 3339 in UTC with microseconds, as the API serialises it."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """The pod name (downward API) or host name, plus the pid: unique per process."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"


def default_namespace() -> str:
    """The pod's namespace (downward API or the service account's file), else "default"."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(NAMESPACE_FILE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


class NotLeader(Exception):
    """A write was about to happen on a replica that does not hold the Lease (any more)."""


@dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("need lease duration > renew deadline > retry period > 0")


class LeaderElector:
    """Acquires, renews and releases one Lease; tells its owner when leadership starts and ends."""

    def __init__(
        self,
        client_factory: Callable[[], KubeClient],
        config: ElectionConfig,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client_factory = client_factory
        self.client: Optional[KubeClient] = None
        self.config = config
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.clock = clock
        self.transitions = 0  # leadership gained, for metrics
        self._leading = False
        self._renewed_at = 0.0
        self._observed: Optional[tuple[str, str]] = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._failures = 0  # rounds in a row that got no answer
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.config.namespace}/leases"

    def is_leader(self) -> bool:
        """True only while our last successful renewal is younger than the renew deadline."""
        with self._lock:
            return self._leading and self.clock() - self._renewed_at < self.config.renew_deadline

    def check(self) -> None:
        """Raise L{NotLeader} unless we may write now: called right before every write."""
        if not self.is_leader():
            raise NotLeader(self.config.identity)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning and release the Lease if we hold it (blocking: call it off the reactor)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.config.retry_period + 10)
        if self._leading:
            self._lose("shutting down")
            self._release()

    def _run(self) -> None:
        self.client = self.client_factory()
        while not self._stopped.is_set():
            self._round()
            self._stopped.wait(self.config.retry_period)

    def _round(self) -> None:
        """One acquire-or-renew attempt; losing the deadline ends leadership even without an answer."""
        try:
            won = self._try_acquire_or_renew()
        except Exception as error:  # noqa: BLE001 - the election must go on through any error
            self._failed(error)
            won = False
        else:
            self._answered()
        now = self.clock()
        if won:
            with self._lock:
                self._renewed_at = now
                started = not self._leading
                self._leading = True
            if started:
                self.transitions += 1
                log.info("leader election: {me} is now the leader ({lease})", me=self.config.identity, lease=self.config.name)
                self.on_started()
        elif self._leading and now - self._renewed_at >= self.config.renew_deadline:
            self._lose("renew deadline passed")

    def _failed(self, error: Exception) -> None:
        """Logged when a run of failed rounds starts, not every retry period while the apiserver is away."""
        self._failures += 1
        if self._failures == 1:
            log.warn(
                "leader election: {lease} not renewed: {error}; trying again every {period:g} s, logged again when it answers",
                lease=self.config.name,
                error=str(error)[:200],
                period=self.config.retry_period,
            )

    def _answered(self) -> None:
        if self._failures:
            log.info("leader election: {lease} answers again after {failures} failed rounds", lease=self.config.name, failures=self._failures)
            self._failures = 0

    def _lose(self, why: str) -> None:
        with self._lock:
            if not self._leading:
                return
            self._leading = False
        log.warn("leader election: {me} stopped leading: {why}", me=self.config.identity, why=why)
        self.on_stopped()

    def _try_acquire_or_renew(self) -> bool:
        assert self.client is not None
        try:
            lease = self.client.request("GET", f"{self.path}/{self.config.name}", timeout=(2.0, 5.0))
        except APIError as error:
            if error.status != 404:
                raise
            return self._create()
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        now = self.clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        if holder and holder != self.config.identity and now - self._observed_at < duration:
            return False  # someone else holds a lease we have seen renewed recently
        return self._update(lease, holder)

    def _lease_spec(self, acquired_at: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": int(self.config.lease_duration),
            "acquireTime": acquired_at,
            "renewTime": micro_time(),
            "leaseTransitions": transitions,
        }

    def _create(self) -> bool:
        assert self.client is not None
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": self._lease_spec(micro_time(), 0),
        }
        try:
            self.client.request("POST", self.path, body=body, timeout=(2.0, 5.0))
        except APIError as error:
            if error.status == 409:  # another candidate created it first
                return False
            raise
        return True

    def _update(self, lease: dict[str, Any], holder: str) -> bool:
        """Take or renew with the Lease's resourceVersion: a concurrent write makes ours fail (409)."""
        assert self.client is not None
        spec = lease.get("spec") or {}
        ours = holder == self.config.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if ours or not holder else 1)
        lease["spec"] = self._lease_spec(str(spec.get("acquireTime")) if ours else micro_time(), transitions)
        try:
            self.client.request("PUT", f"{self.path}/{self.config.name}", body=lease, timeout=(2.0, 5.0))
        except APIError as error:
            if error.status == 409:
                return False
            raise
        return True

    def _release(self) -> None:
        """Empty the holder so the next candidate need not wait out the lease (best effort)."""
        try:
            client = self.client or self.client_factory()
            lease = client.request("GET", f"{self.path}/{self.config.name}", timeout=(2.0, 5.0))
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.config.identity:
                return
            spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=micro_time())
            lease["spec"] = spec
            client.request("PUT", f"{self.path}/{self.config.name}", body=lease, timeout=(2.0, 5.0))
            log.info("leader election: released {lease}", lease=self.config.name)
        except Exception as error:  # noqa: BLE001 - shutting down: the lease will expire anyway
            log.warn("leader election: could not release {lease}: {error}", lease=self.config.name, error=str(error)[:200])
