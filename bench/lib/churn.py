"""The soak scenario's cluster objects, their churn, and the checker that sees each change go live.

Namespace ``soak``, three echo backends ``soak-0..2`` (10.244.0.20-22:8080) and, for each Ingress i:

- Service ``s{i}`` with one EndpointSlice of two endpoints on two different backends: the load's
  hosts always have a live endpoint when one backend is killed;
- Ingress ``i{i}`` with two rules: ``h{i}.soak.test`` ``/`` -> ``s{i}`` (the load's host, TLS with
  Secret ``tls-{i}`` for every ``tls_every``-th Ingress) and ``c{i}.soak.test`` ``/c{k}`` -> one of
  the pinned Services ``b0..b2`` (one endpoint each, on backend 0..2): the checker's host, where a
  new path or backend can be told from the old one.

A churn tick changes one object, in turn: an Ingress (its ``c{i}`` path ``/c{k}`` -> ``/c{k+1}``,
or its pinned backend), an EndpointSlice (one endpoint of ``s{i}`` moves to the third backend), a
TLS Secret (a new certificate). Each change leaves an expectation (host, path and backend that
must answer, or certificate that must be served) that the checker thread polls through the proxy,
never blocking the churn; an object is not changed again while its last change is pending. While
the backend a change expects is killed (or restarted less than 5 s ago: twingress skips an endpoint
that refused for --upstream-fail-timeout), its probes wait (they could only get 502s), and its time to
live is kept apart: it measures the kill, not twingress.
"""

from __future__ import annotations

import hashlib
import http.client
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes.client.exceptions import ApiException

from bench.lib.cluster import Api, endpoint_slice, ingress, log, service
from bench.lib.kubeproxy import Prober
from tests.proxy import certs

NS = "soak"
BACKENDS = {"soak-0": "10.244.0.20", "soak-1": "10.244.0.21", "soak-2": "10.244.0.22"}
NAMES = tuple(BACKENDS)
CHANGE_KINDS = ("ingress-path", "ingress-backend", "endpointslice", "secret")
PROBE_INTERVAL = 0.05  # seconds between two probes of one pending change
SLICE_TRIES = 3  # requests per probe of a moved endpoint: round robin over two endpoints, and the load's requests in between


# --- the objects ---------------------------------------------------------------------------------


def host(i: int) -> str:
    return f"h{i}.soak.test"


def check_host(i: int) -> str:
    return f"c{i}.soak.test"


def soak_ingress(i: int, path: str, pinned: int, tls: bool) -> dict[str, Any]:
    body = ingress(f"i{i}", NS, host(i), f"s{i}")
    checked = ingress("-", NS, check_host(i), f"b{pinned}", path)["spec"]["rules"][0]
    body["spec"]["rules"].append(checked)
    if tls:
        body["spec"]["tls"] = [{"hosts": [host(i)], "secretName": f"tls-{i}"}]
        body["metadata"]["annotations"] = {"twingress.io/ssl-redirect": "false"}  # the plain load also visits it
    return body


@dataclass
class World:
    """What the bench wrote last for each object (the churn computes the next change from it)."""

    n: int
    tls_every: int
    ca: certs.CertificateAuthority = field(default_factory=lambda: certs.CertificateAuthority("twingress soak", key_type="ec"))
    path_k: list[int] = field(default_factory=list)
    pinned: list[int] = field(default_factory=list)
    endpoints: list[list[int]] = field(default_factory=list)
    cert_sha: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path_k = [0] * self.n
        self.pinned = [i % 3 for i in range(self.n)]
        self.endpoints = [[i % 3, (i + 1) % 3] for i in range(self.n)]

    @property
    def tls_indices(self) -> list[int]:
        return list(range(0, self.n, self.tls_every)) if self.tls_every else []

    def new_secret(self, i: int) -> dict[str, Any]:
        """A Secret tls-{i} with a new certificate for h{i}; its SHA-256 is remembered."""
        leaf = self.ca.issue([host(i)], key_type="ec")
        self.cert_sha[i] = hashlib.sha256(leaf.cert.public_bytes(Encoding.DER)).hexdigest()
        return certs.tls_secret(f"tls-{i}", leaf, NS)

    def objects(self) -> Iterable[dict[str, Any]]:
        """Everything to create, pinned Services first, Ingresses last."""
        for m, name in enumerate(NAMES):
            yield service(f"b{m}", NS)
            yield endpoint_slice(f"b{m}", NS, (BACKENDS[name],))
        tls = set(self.tls_indices)
        for i in range(self.n):
            yield service(f"s{i}", NS)
            yield endpoint_slice(f"s{i}", NS, tuple(BACKENDS[NAMES[b]] for b in self.endpoints[i]))
            if i in tls:
                yield self.new_secret(i)
            yield soak_ingress(i, "/c0", self.pinned[i], i in tls)


# --- expectations and the checker ----------------------------------------------------------------


@dataclass
class Expectation:
    """A change made at WRITTEN that is live once HOST+PATH answers from BACKEND (or serves CERT_SHA)."""

    kind: str
    key: str
    host: str
    written: float
    deadline: float
    path: str = "/"
    backend: str = ""
    cert_sha: str = ""
    tries: int = 1
    next_probe: float = 0.0
    waited_for_kill: bool = False


def live(prober: Prober, e: Expectation) -> bool:
    """One probe of an expectation through the proxy: a keep-alive GET, or a new TLS handshake."""
    if e.cert_sha:
        return prober.serves(e.host, e.cert_sha)
    try:
        return any(prober.answering_backend(e.host, e.path) == e.backend for _ in range(e.tries))
    except (OSError, ValueError, http.client.HTTPException):
        prober.http.close()
        return False


class Checker(threading.Thread):
    """Polls pending expectations (each every PROBE_INTERVAL) until live or past their deadline;
    BACKEND_DOWN(name) says whether that echo backend is killed now (its probes wait then)."""

    def __init__(self, prober: Prober, stop: threading.Event, backend_down: Callable[[str], bool]) -> None:
        super().__init__(name="soak-checker", daemon=True)
        self.prober = prober
        self.stop = stop
        self.backend_down = backend_down
        self.lock = threading.Lock()
        self.pending: dict[str, Expectation] = {}
        self.live_ms: dict[str, list[float]] = {k: [] for k in CHANGE_KINDS}
        self.live_after_kill_ms: dict[str, list[float]] = {k: [] for k in CHANGE_KINDS}
        self.not_live: dict[str, list[str]] = {k: [] for k in CHANGE_KINDS}

    def expect(self, e: Expectation) -> None:
        with self.lock:
            self.pending[e.key] = e

    def is_pending(self, key: str) -> bool:
        with self.lock:
            return key in self.pending

    def run(self) -> None:
        while not (self.stop.is_set() and not self.pending):
            now = time.monotonic()
            with self.lock:
                due = [e for e in self.pending.values() if e.next_probe <= now]
            for e in due:
                self.check(e)
            time.sleep(0.01)
        self.prober.http.close()

    def check(self, e: Expectation) -> None:
        if e.backend and self.backend_down(e.backend) and time.monotonic() < e.deadline:
            e.waited_for_kill = True
            e.next_probe = time.monotonic() + PROBE_INTERVAL
            return
        if live(self.prober, e):
            times = self.live_after_kill_ms if e.waited_for_kill else self.live_ms
            times[e.kind].append((time.monotonic() - e.written) * 1000.0)
        elif time.monotonic() > e.deadline:
            what = f"{e.host}: certificate {e.cert_sha[:12]}" if e.cert_sha else f"{e.host}{e.path} from {e.backend}"
            self.not_live[e.kind].append(what)
            log(f"{e.kind} change not live within the timeout: {what}")
        else:
            e.next_probe = time.monotonic() + PROBE_INTERVAL
            return
        with self.lock:
            del self.pending[e.key]


# --- the churn -----------------------------------------------------------------------------------


class Churn:
    """One change per tick: Ingress (path, then backend), EndpointSlice, Secret, in turn."""

    def __init__(self, api: Api, world: World, checker: Checker, timeout: float) -> None:
        self.api, self.world, self.checker, self.timeout = api, world, checker, timeout
        self.made = dict.fromkeys(CHANGE_KINDS, 0)
        self.api_errors = dict.fromkeys(CHANGE_KINDS, 0)
        self.skipped = 0  # ticks when every candidate object still had a change pending
        self._cursor: dict[str, int] = {}
        self._ingress_changes = 0

    def tick(self, n: int) -> None:
        rotation = ("ingress", "endpointslice", "secret") if self.world.tls_indices else ("ingress", "endpointslice")
        kind = rotation[n % len(rotation)]
        if kind == "ingress":
            kind = CHANGE_KINDS[self._ingress_changes % 2]
            self._ingress_changes += 1
        candidates = self.world.tls_indices if kind == "secret" else range(self.world.n)
        i = self._next_free(kind, candidates)
        if i is None:
            self.skipped += 1
            return
        change = getattr(self, kind.replace("-", "_"))
        try:
            e = change(i)
        except (ApiException, OSError) as error:
            self.api_errors[kind] += 1
            log(f"{kind} change of #{i} failed: {str(error).splitlines()[0]}")
            return
        self.made[kind] += 1
        self.checker.expect(e)

    def _next_free(self, kind: str, candidates: Iterable[int]) -> Optional[int]:
        """The next object (round robin) with no change pending."""
        ordered = list(candidates)
        start = self._cursor.get(kind, 0)
        for step in range(len(ordered)):
            i = ordered[(start + step) % len(ordered)]
            if not self.checker.is_pending(f"{kind.split('-')[0]}/{i}"):
                self._cursor[kind] = (start + step + 1) % len(ordered)
                return i
        return None

    def _expectation(self, kind: str, i: int, host_name: str, **what: Any) -> Expectation:
        now = time.monotonic()
        return Expectation(kind, f"{kind.split('-')[0]}/{i}", host_name, now, now + self.timeout, **what)

    def ingress_path(self, i: int) -> Expectation:
        path = f"/c{self.world.path_k[i] + 1}"
        self.api.patch_ingress(NS, f"i{i}", [{"op": "replace", "path": "/spec/rules/1/http/paths/0/path", "value": path}])
        self.world.path_k[i] += 1
        return self._expectation("ingress-path", i, check_host(i), path=path, backend=NAMES[self.world.pinned[i]])

    def ingress_backend(self, i: int) -> Expectation:
        pinned = (self.world.pinned[i] + 1) % 3
        ops = [{"op": "replace", "path": "/spec/rules/1/http/paths/0/backend/service/name", "value": f"b{pinned}"}]
        self.api.patch_ingress(NS, f"i{i}", ops)
        self.world.pinned[i] = pinned
        return self._expectation("ingress-backend", i, check_host(i), path=f"/c{self.world.path_k[i]}", backend=NAMES[pinned])

    def endpointslice(self, i: int) -> Expectation:
        """One of s{i}'s two endpoints moves to the backend the slice does not use."""
        ends = self.world.endpoints[i]
        slot = sum(self.world.endpoints[i]) % 2
        target = ({0, 1, 2} - set(ends)).pop()
        ops = [{"op": "replace", "path": f"/endpoints/{slot}/addresses/0", "value": BACKENDS[NAMES[target]]}]
        self.api.patch_endpoint_slice(NS, f"s{i}-1", ops)
        ends[slot] = target
        return self._expectation("endpointslice", i, host(i), backend=NAMES[target], tries=SLICE_TRIES)

    def secret(self, i: int) -> Expectation:
        data = self.world.new_secret(i)["data"]
        self.api.patch_secret(NS, f"tls-{i}", [{"op": "replace", "path": "/data", "value": data}])
        return self._expectation("secret", i, host(i), cert_sha=self.world.cert_sha[i])

    def summary(self) -> dict[str, Any]:
        return {"made": self.made, "api_errors": self.api_errors, "skipped_ticks": self.skipped}
