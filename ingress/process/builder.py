# -*- test-case-name: tests.proxy.test_builder -*-
"""
Rebuilding the routing table off the reactor thread, one build at a time.

Sources call L{TableBuilder.submit} (on the reactor thread) with a function
that produces a snapshot.  Submissions are debounced and coalesced: while a
build runs, later submissions collapse into one more build with the newest
snapshot function.  The finished table is swapped in on the reactor thread.

The debounce has a leading edge: a change after a quiet spell is built at
once, so that one Ingress edited or one pod replaced is live in the time of
its build, not its build plus the debounce; changes that follow within the
window after a build wait for the rest of it and are built together.  The
window is twice the last build's time (the build thread's, and the reactor's
for the swap and its listeners: workers' tables, status, TLS contexts), at
least C{min_window} and at most C{debounce}; doubled for each build in a row
that found changes waiting, up to C{burst_window} (a quarter second) and, once
the stream has lasted C{long_stream} (five seconds), up to C{stream_window}
(one second): builds never take more than about a third of the process while
changes stream in.  A burst (cert-manager renewing 1,000 Secrets in two
seconds: each must be served within 2 s) is built four times a second; a
stream that goes on (150,000 objects created in four minutes) once a second,
so what every build pays beyond its changes, the copies of the table's
mappings, is paid a quarter as often (Traefik waits two seconds between
configurations, its providersThrottleDuration).  A change after the stream
ends waits for the last build only.  A cheap build (an EndpointSlice-only
update: 2 ms at 10k Ingresses) does not make the next pod replaced wait 50 ms
for a window sized for a full build (measured: the endpoint moves that waited
for it were the p99 of the convergence bench, 53-64 ms against a p50 of 3 ms).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Optional

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from ingress.model import ClusterState, Problem
from ingress.observe.metrics import Metrics
from ingress.routing.report import BuildReport, Built
from ingress.routing.table import RoutingTable
from ingress.runtime.live import LiveTable
from ingress.runtime.reactor import IProcessReactor
from ingress.speedups.heap import frozen_after

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

Snapshot = Callable[[], ClusterState]
BuildFunction = Callable[[ClusterState, int], Built]
Preparer = Callable[[RoutingTable], Callable[[], None]]
"""Runs on the build thread with a new table (not its report); returns what to do on the reactor thread before the swap."""


class TableBuilder:
    """Debounced, coalescing table builds on a dedicated worker thread."""

    def __init__(
        self,
        reactor: IProcessReactor,
        live: LiveTable,
        metrics: Metrics,
        build: BuildFunction,
        debounce: float = 0.05,
        min_window: float = 0.01,
        burst_window: float = 0.25,
        stream_window: float = 1.0,
        long_stream: float = 5.0,
    ) -> None:
        self.reactor = reactor
        self.live = live
        self.metrics = metrics
        self.build = build
        self.debounce = debounce
        self.min_window = min(min_window, debounce)
        self.burst_window = max(burst_window, debounce)  # the longest wait while changes stream in
        self.stream_window = max(stream_window, self.burst_window)  # ... once they have for long_stream seconds
        self.long_stream = long_stream
        self._stream_since = 0.0  # when the builds in a row that found changes waiting began
        self._window = debounce  # after the next build: twice its time, within [min_window, debounce]; doubled per build of a stream
        self._cost = debounce / 2  # the last build's time (build thread and swap)
        self._streak = 0  # builds in a row that found more changes waiting when they ended
        self.generation = 0
        self._next: Optional[Snapshot] = None
        self._timer: Optional[IDelayedCall] = None
        self._running = False
        self._finished_at = float("-inf")  # when the last build ended (reactor time)
        self._pool = ThreadPool(1, 1, name="twingress-build")
        self.preparers: list[Preparer] = []

    def start(self) -> None:
        self._pool.start()

    def stop(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()  # no build starts on a stopped pool
        self._timer = None
        self._pool.stop()

    def submit(self, snapshot: Snapshot) -> None:
        """Ask for a build from C{snapshot} (reactor thread); the newest request wins."""
        self._next = snapshot
        if self._timer is None and not self._running:
            wait = self._window - (self.reactor.seconds() - self._finished_at)
            self._timer = self.reactor.callLater(max(0.0, wait), self._start_build)

    def _start_build(self) -> None:
        self._timer = None
        snapshot, self._next = self._next, None
        if snapshot is None:
            return
        self._running = True
        self.generation += 1
        generation = self.generation
        d: Deferred[tuple[Built, float, list[Callable[[], None]]]] = deferToThreadPool(
            self.reactor, self._pool, self._build_timed, snapshot, generation
        )
        d.addCallbacks(self._built, self._failed)
        d.addBoth(self._done)

    def _build_timed(self, snapshot: Snapshot, generation: int) -> tuple[Built, float, list[Callable[[], None]]]:
        """
        Build with the cyclic garbage collector paused, then freeze what is alive
        (L{frozen_after}: the new table and its model leave every later scan).
        """
        started = time.perf_counter()
        built = frozen_after(lambda: self.build(snapshot(), generation))
        commits = [prepare(built.table) for prepare in self.preparers]
        return built, time.perf_counter() - started, commits

    def _built(self, result: tuple[Built, float, list[Callable[[], None]]]) -> None:
        built, seconds, commits = result
        table, report = built.table, built.report
        swap_started = time.perf_counter()
        for commit in commits:
            commit()
        self.metrics.build_seconds.observe(seconds)
        self.metrics.table_generation.set(table.generation)
        self.metrics.set_problems([p.reason for p in report.problems])
        if report.class_skipped is not self.live.report.class_skipped:
            self._report_skipped(self.live.report, report)
        previous = set(self.live.report.problems)
        for problem in report.problems:
            if problem not in previous:  # each problem is logged once, when it appears
                log.warn("{problem}", problem=problem_line(problem))
        self.live.swap(table, report)
        self._cost = seconds + time.perf_counter() - swap_started
        log.info(
            "routing table {generation} live: {hosts} hosts, {problems} problems, built in {ms:.1f} ms{how}",
            generation=table.generation,
            hosts=len(table.hosts) + len(table.wildcards),
            problems=len(report.problems),
            ms=seconds * 1000,
            how=f" ({how})" if (how := getattr(self.build, "last_path", "")) else "",
        )

    def _report_skipped(self, old: BuildReport, new: BuildReport) -> None:
        """
        The Ingresses of other classes, counted by why, logged when that changes (and at start): a
        class kept from ingress-nginx's chart must not look like "0 hosts, 0 problems".
        """
        summary = new.skipped_summary()
        if summary == old.skipped_summary():
            return
        by_reason: dict[str, int] = {}
        for (reason, _), count in summary.items():
            by_reason[reason] = by_reason.get(reason, 0) + count
        self.metrics.set_skipped(by_reason)
        if not summary:
            log.info("no Ingress is skipped for its class any more")
            return
        reasons = "; ".join(f"{count}: {message}" for (_, message), count in sorted(summary.items(), key=lambda item: -item[1]))
        log.warn("{count} Ingresses skipped, not served by twingress: {reasons}", count=len(new.class_skipped), reasons=reasons)

    def _failed(self, failure: Failure) -> None:
        self.metrics.source_errors.labels("build").inc()
        log.failure("routing table build failed; the last good table stays live", failure)

    def _done(self, _: object) -> None:
        self._finished_at = self.reactor.seconds()
        warm = getattr(self.build, "warm", None)
        if self._next is None and warm is not None:
            # Nothing to build: the build thread prepares what the next cheap update needs (inside the window).
            d = deferToThreadPool(self.reactor, self._pool, frozen_after, warm)
            d.addErrback(lambda failure: log.failure("preparing for the next build failed", failure))
            d.addBoth(self._ready)
            return
        self._ready(None)

    def _ready(self, _: object) -> None:
        self._running = False
        # Twice the last build's time (at most the debounce); doubled for each build in a row that
        # found changes waiting (a stream of them: a cluster being filled, a rollout), up to the
        # burst window, and the stream window once the stream has gone on for long_stream seconds
        # (next_window): while changes stream in, fewer and larger builds, and what a build costs
        # beyond its changes (copies of the table's mappings: about 5 ms at 50k Ingresses, and the
        # informers' parts) is paid a few times a second, not a hundred.  A change after a quiet
        # build waits twice that build's time only.
        self._streak = self._streak + 1 if self._next is not None else 0
        now = self.reactor.seconds()
        if self._streak == 1:
            self._stream_since = now
        self._window = self.next_window(self._streak, now - self._stream_since)
        if self._next is not None:
            # They wait for the rest of the window like any other change, so that builds take a
            # third of the process at most while changes stream in, not all of it (at 40k Ingresses,
            # back-to-back builds took 76% of a core and slowed the apiserver beside it).
            wait = self._window - (now - self._finished_at)
            self._timer = self.reactor.callLater(max(0.0, wait), self._start_build)

    def next_window(self, streak: int, stream_age: float) -> float:
        """
        The window after a build: twice its time (within [min_window, debounce]); doubled for each of
        the C{streak} builds in a row that found changes waiting, up to the burst window, or up to the
        stream window once the stream is C{stream_age} >= long_stream seconds old.
        """
        window = max(self.min_window, 2 * self._cost)
        if not streak:
            return min(self.debounce, window)
        cap = self.stream_window if stream_age >= self.long_stream else self.burst_window
        return float(min(cap, window * 2 ** min(streak, 10)))


def problem_line(problem: Problem) -> str:
    """
    A problem's log line, worded by what it does to its object: "skipped" only for an object left
    out whole (new and unparsable).  Any other problem's message says what of the object is not
    served, or served otherwise; the rest of the object is.  A ConfigMap's other keys always apply.
    """
    if problem.left_out:
        return f"skipped {problem}"
    if problem.ref.kind == "ConfigMap":
        return f"{problem} (the rest of it applies)"
    return str(problem)

