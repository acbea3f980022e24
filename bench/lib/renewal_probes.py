"""The handshakes of the renewal scenario (bench/scenarios/renewal.py): what each host served, when, and which handshakes failed.

Three kinds of threads share one L{Hosts} record:

- background probers: ``rate`` handshakes/s over all hosts in a fixed shuffled order, before,
  during and after the renewal (the "no handshake failing meanwhile" half of the target);
- detectors: the hosts whose Secret write returned and whose new certificate has not been seen
  yet, each in turn, at a bounded rate (the "served within 2 s" half);
- a generation poller: twingress swaps certificates together with its routing table, so /readyz's
  generation, polled every few tens of milliseconds, says when a swap happened; after each swap it
  reads /metrics once, whose ``twingress_tls_certificate_not_after_seconds`` (set in the same
  reactor call that swaps the contexts) says which Secrets' new certificates are loaded (the new
  ones expire a day after the old ones).

A handshake is a new TCP connection and a full TLS handshake with SNI (stdlib ssl, no
verification: the leaf's SHA-256 is compared with the host's old and new certificate). It fails on
any exception (5 s timeout included) or a certificate that is neither; an old certificate after
the new one was seen is a step back, counted apart.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import random
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Optional

from bench.lib.cluster import log
from bench.lib.kubeproxy import Http, Prober

NAN = float("nan")
NOT_AFTER = re.compile(r'^twingress_tls_certificate_not_after_seconds\{namespace="[^"]*",secret="tls-(\d+)"\} (\S+)$', re.M)


def bound(values: tuple[float, ...], pick: Callable[..., float]) -> float:
    """PICK (min or max) of the VALUES that are known (not NaN); NaN if none is."""
    known = [v for v in values if not math.isnan(v)]
    return pick(known) if known else NAN


class Pacer:
    """Hands out probe times RATE per second to any number of threads; a slot missed (a slow
    handshake) is dropped rather than caught up, so a stall never turns into a burst."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def wait(self, stop: threading.Event) -> bool:
        """Sleep until this thread's slot; False once STOP is set."""
        with self.lock:
            now = time.monotonic()
            self.next = max(self.next + self.interval, now)
            at = self.next
        return not stop.wait(max(0.0, at - now))


class Hosts:
    """Per host: old and new certificate, when its write started and returned, the start of the
    latest handshake (and /metrics read) that got the old certificate, the end of the first that got
    the new one."""

    def __init__(self, old_sha: list[str], new_sha: list[str], new_not_after: list[float]) -> None:
        n = len(old_sha)
        self.old, self.new, self.new_not_after = old_sha, new_sha, new_not_after
        self.lock = threading.Lock()
        self.write_start, self.write_end = [NAN] * n, [NAN] * n
        self.last_old, self.first_new = [NAN] * n, [NAN] * n
        self.metrics_old, self.metrics_new = [NAN] * n, [NAN] * n
        self.pending: deque[int] = deque()
        self.served = 0
        self.outcomes: Counter[str] = Counter()  # "{who} {outcome}" -> handshakes
        self.failures: list[dict[str, Any]] = []
        self.samples: list[tuple[float, float]] = []  # background handshakes: (start, seconds)

    def written(self, i: int, start: float, end: float) -> None:
        with self.lock:
            self.write_start[i], self.write_end[i] = start, end
            if math.isnan(self.first_new[i]):
                self.pending.append(i)

    def loaded(self, not_after: dict[int, float], start: float, end: float) -> None:
        """A /metrics read from START to END: the expiry of each Secret's loaded certificate."""
        with self.lock:
            for i, value in not_after.items():
                if value < self.new_not_after[i] - 1.0:
                    self.metrics_old[i] = start
                elif math.isnan(self.metrics_new[i]):
                    self.metrics_new[i] = end

    def next_pending(self) -> Optional[int]:
        with self.lock:
            while self.pending:
                i = self.pending.popleft()
                if math.isnan(self.first_new[i]):
                    return i
            return None

    def requeue(self, i: int) -> None:
        with self.lock:
            if math.isnan(self.first_new[i]):
                self.pending.append(i)

    def observe(self, who: str, i: int, start: float, end: float, sha: str, error: str = "") -> None:
        with self.lock:
            if error or sha not in (self.old[i], self.new[i]):
                outcome = "failed"
                self.failures.append({"t": start, "who": who, "host": i, "error": error or f"certificate {sha[:16]}"})
            elif sha == self.new[i]:
                outcome = "new"
                if math.isnan(self.first_new[i]):
                    self.first_new[i] = end
                    self.served += 1
            elif start > self.first_new[i]:  # False while first_new is NaN
                outcome = "old after new"
            else:
                outcome = "old"
                self.last_old[i] = start if math.isnan(self.last_old[i]) else max(self.last_old[i], start)
            self.outcomes[f"{who} {outcome}"] += 1
            if who == "background":
                self.samples.append((start, end - start))


def handshake(prober: Prober, hosts: Hosts, who: str, i: int, name: str) -> bool:
    """One handshake to NAME (host I), recorded; whether it got the new certificate."""
    start = time.monotonic()
    try:
        sha = prober.served_cert_sha(name)
    except Exception as e:  # noqa: BLE001 - every way a handshake can fail counts
        hosts.observe(who, i, start, time.monotonic(), "", f"{type(e).__name__}: {e}")
        return False
    hosts.observe(who, i, start, time.monotonic(), sha)
    return sha == hosts.new[i]


def background(prober: Prober, hosts: Hosts, name: Callable[[int], str], pacer: Pacer, stop: threading.Event, order: itertools.count[int]) -> None:
    """Handshakes to every host in turn (a fixed shuffled order), one per pacer slot."""
    n = len(hosts.old)
    shuffled = list(range(n))
    random.Random(16).shuffle(shuffled)
    while pacer.wait(stop):
        i = shuffled[next(order) % n]
        handshake(prober, hosts, "background", i, name(i))


def detect(prober: Prober, hosts: Hosts, name: Callable[[int], str], pacer: Pacer, stop: threading.Event) -> None:
    """The written hosts not yet serving their new certificate, each in turn, until STOP."""
    while not stop.is_set():
        i = hosts.next_pending()
        if i is None:
            stop.wait(0.005)
        elif pacer.wait(stop) and not handshake(prober, hosts, "detect", i, name(i)):
            hosts.requeue(i)


class GenerationPoller(threading.Thread):
    """Polls /readyz every INTERVAL s; each generation change is kept as (after, by, generation):
    the swap happened after the start of the last poll that saw the old generation and by the
    end of the first that saw the new one. /metrics is read at start and after every change."""

    def __init__(self, admin_port: int, interval: float, hosts: Hosts, stop: threading.Event) -> None:
        super().__init__(name="renewal-generations", daemon=True)
        self.http = Http(admin_port, timeout=5.0)
        self.interval, self.hosts, self.stop = interval, hosts, stop
        self.swaps: list[tuple[float, float, int]] = []
        self.metrics_reads: list[float] = []  # seconds each /metrics read took
        self.polls = self.errors = 0

    def get(self, path: str) -> Optional[bytes]:
        try:
            return self.http.get(path)[1]
        except (OSError, http.client.HTTPException) as e:
            self.errors += 1
            if self.errors <= 3:
                log(f"{path} failed: {e}")
            return None

    def read_metrics(self) -> None:
        start = time.monotonic()
        body = self.get("/metrics")
        if body is not None:
            self.metrics_reads.append(time.monotonic() - start)
            self.hosts.loaded({int(m[1]): float(m[2]) for m in NOT_AFTER.finditer(body.decode())}, start, time.monotonic())

    def run(self) -> None:
        last, after = -1, NAN
        self.read_metrics()
        while not self.stop.wait(self.interval):
            start = time.monotonic()
            body = self.get("/readyz")
            if body is None:
                continue
            self.polls += 1
            generation = int(json.loads(body).get("generation", -1))
            if generation != last and last != -1:
                self.swaps.append((after, time.monotonic(), generation))
                self.read_metrics()
            last, after = generation, start
        self.http.close()


def served_at(hosts: Hosts, i: int, swaps: list[tuple[float, float, int]]) -> tuple[float, int, bool]:
    """When host I served its new certificate at the latest, how many table swaps could be it, and
    whether its handshakes and /metrics reads agree.

    Its new context went live at a swap after its write started and after the last handshake or
    /metrics read that still got the old certificate (LOWER), and before the end of the first that
    got the new one (UPPER). The latest swap seen in that window bounds it more tightly than UPPER;
    with exactly one such swap the time is known to a poll interval. NaN until a handshake got it."""
    if math.isnan(hosts.first_new[i]):
        return NAN, 0, True
    upper = bound((hosts.first_new[i], hosts.metrics_new[i]), min)
    lower = bound((hosts.write_start[i], hosts.last_old[i], hosts.metrics_old[i]), max)
    candidates = [by for after, by, _ in swaps if after < upper and by > lower]
    return (min(upper, max(candidates)) if candidates else upper), len(candidates), lower < upper
