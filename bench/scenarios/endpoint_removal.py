"""
Endpoint removal: how long the proxy keeps sending to a pod removed from an EndpointSlice, measured
by traffic, with C{--scale} N Ingresses around the measured one.

The three scale echo backends behind Service C{rm} (slice C{rm-1}) and host C{rm.conv.test}; a
client thread sends keep-alive GETs back to back through the proxy and notes each answer's backend
and arrival.  Each trial: a JSON patch removes the last endpoint; measured from the PATCH call to the
first of C{--run} answers in a row from the two remaining pods (an answer from the removed one later
restarts the count).  Then the endpoint is added back and awaited.

The floor (unless C{--no-floor}): a bare watch in a process of its own (bench/lib/barewatch.py)
notes when each trial's MODIFIED event arrives (the PATCH answer names its resourceVersion): PATCH
call -> event is what the apiserver and etcd take, traffic less event what twingress adds.  Also
twingress's garbage collections during the trials (each full one holds every request that long).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import threading
import time
from typing import Any, Optional

from bench.lib import cluster
from bench.lib.barewatch import Floor
from bench.lib.cluster import CONV_NS, SCALE_BACKEND_NAMES, SCALE_BACKENDS, SCALE_NS, Api, log, summary
from bench.lib.kubeproxy import Http, Twingress, backend_of, wait_all_live
from bench.lib.procs import BenchFailed
from bench.scenarios import Run

NAME = "endpoint-removal"
QUESTION = "How long does the proxy keep sending to a pod removed from an EndpointSlice, at 10k Ingresses?"
TARGET_P99_MS = 30.0
HOST, SLICE = "rm.conv.test", "rm-1"
REMOVED, REMOVED_NAME = SCALE_BACKENDS[-1], SCALE_BACKEND_NAMES[-1]
GC = re.compile(r'twingress_gc_pause_seconds_(count|sum|bucket)\{(?:le="([^"]+)",)?generation="(\d)"(?:,le="([^"]+)")?\} (\S+)')


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", type=int, default=10000, help="Ingresses (each with a Service and a slice) around the measured one (10000)")
    p.add_argument("--trials", type=int, default=100, help="removals timed (100)")
    p.add_argument("--run", type=int, default=10, help="answers in a row from the remaining pods that mean 'stopped' (10)")
    p.add_argument("--gap", type=float, default=0.05, help="pause after the endpoint is served again, s (0.05)")
    p.add_argument("--warmup", type=float, default=1.0, help="traffic before the first trial, s (1)")
    p.add_argument("--timeout", type=float, default=30.0, help="per-trial timeout, s (30)")
    p.add_argument("--threads", type=int, default=12, help="threads creating the scale objects (12)")
    p.add_argument("--no-floor", action="store_true", help="no bare watch beside the traffic")


def check(args: argparse.Namespace) -> str:
    if args.against:
        return "--against: the cluster scenarios measure twingress alone"
    if args.trials < 1 or args.run < 1 or args.scale < 0 or args.threads < 1:
        return "--trials, --run and --threads at least 1, --scale 0 or more"
    return cluster.missing()


class Traffic(threading.Thread):
    """Back-to-back keep-alive GETs for HOST: (arrival time, backend name) of every answer."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.http = Http(port)
        self.answers: list[tuple[float, str]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                status, body = self.http.get("/", HOST)
                name = backend_of(status, body) or f"status {status}"
            except OSError as e:
                name = f"error {e}"
            self.answers.append((time.monotonic(), name))

    def stop(self) -> None:
        self.stopping.set()
        self.join()
        self.http.close()

    def removed_gone(self, since: float, run: int) -> Optional[float]:
        """Arrival of the first of RUN answers in a row after SINCE from the remaining pods only, if there are RUN yet."""
        start: Optional[float] = None
        count = 0
        for at, name in self.answers[self._first_after(since):]:
            if name in SCALE_BACKEND_NAMES[:-1]:
                start, count = (at if count == 0 else start), count + 1
                if count >= run:
                    return start
            else:
                count = 0
        return None

    def _first_after(self, since: float) -> int:
        for i in range(len(self.answers) - 1, -1, -1):
            if self.answers[i][0] <= since:
                return i + 1
        return 0

    def served_by(self, name: str, since: float) -> bool:
        return any(n == name for _, n in self.answers[self._first_after(since):])


def one_trial(api: Api, traffic: Traffic, floor: Optional[Floor], run: int, timeout: float) -> dict[str, Any]:
    """One removal: the PATCH call's times, the traffic's answer, the bare watch's event (time.monotonic)."""
    t0 = time.monotonic()
    body = api.patch_endpoint_slice(CONV_NS, SLICE, [{"op": "remove", "path": "/endpoints/2"}])
    returned = time.monotonic()
    while (gone := traffic.removed_gone(t0, run)) is None and time.monotonic() - t0 < timeout:
        time.sleep(0.002)
    version = str(json.loads(body)["metadata"]["resourceVersion"])
    return {"start": t0, "returned": returned, "gone": gone, "version": version, "event": floor.arrival(version, timeout) if floor else None}


def add_back(api: Api, traffic: Traffic, timeout: float) -> None:
    """The removed endpoint added again, and awaited until it answers (each trial starts from three)."""
    t1 = time.monotonic()
    api.patch_endpoint_slice(CONV_NS, SLICE, [{"op": "add", "path": "/endpoints/-", "value": {"addresses": [REMOVED], "conditions": {"ready": True}}}])
    while not traffic.served_by(REMOVED_NAME, t1):
        if time.monotonic() - t1 > timeout:
            raise BenchFailed(f"{REMOVED_NAME} not served again within {timeout} s")
        time.sleep(0.002)


def ms(a: float, b: float) -> float:
    return (a - b) * 1000.0


def summarise(rows: list[dict[str, Any]], floored: bool) -> dict[str, Any]:
    timed = [r for r in rows if r["gone"] is not None]
    failures = len(rows) - len(timed)
    result = summary([ms(r["gone"], r["start"]) for r in timed], failures)
    result["patch_call_ms_median"] = statistics.median(ms(r["returned"], r["start"]) for r in rows)
    result["after_call"] = summary([ms(r["gone"], r["returned"]) for r in timed], failures) if timed else {}
    result["samples_ms"] = [round(ms(r["gone"], r["start"]), 2) for r in timed]
    result["patch_call_samples_ms"] = [round(ms(r["returned"], r["start"]), 2) for r in rows]
    if floored:
        with_event = [r for r in rows if r["event"] is not None]
        both = [r for r in with_event if r["gone"] is not None]
        missing = len(rows) - len(with_event)
        result["floor"] = {
            "from_call": summary([ms(r["event"], r["start"]) for r in with_event], missing),
            "from_call_returning": summary([ms(r["event"], r["returned"]) for r in with_event], missing),
            "twingress_adds": summary([ms(r["gone"], r["event"]) for r in both], len(rows) - len(both)),
            "from_call_samples_ms": [None if r["event"] is None else round(ms(r["event"], r["start"]), 2) for r in rows],
        }
    return result


def collections(tw: Twingress) -> dict[str, dict[str, float]]:
    """twingress's garbage collections so far by generation ("2": full): how many, their seconds, how many over 10 and 50 ms."""
    found: dict[str, dict[str, float]] = {}
    for m in (GC.match(line) for line in tw.admin_get("/metrics")[1].decode().splitlines()):
        if m is None:
            continue
        kind, le, generation, le_after, value = m.groups()
        cell = found.setdefault(generation, {"count": 0.0, "seconds": 0.0, "over_10ms": 0.0, "over_50ms": 0.0})
        if kind == "count":
            cell["count"] = float(value)
        elif kind == "sum":
            cell["seconds"] = round(float(value), 4)
        elif (le or le_after) in ("0.01", "0.05"):
            cell["over_10ms" if (le or le_after) == "0.01" else "over_50ms"] -= float(value)  # the count is added below
    for cell in found.values():
        cell["over_10ms"] += cell["count"]
        cell["over_50ms"] += cell["count"]
    return found


def run(run: Run) -> list[dict[str, Any]]:
    args = run.args
    kube = cluster.start_control_plane(run.children)
    cluster.start_scale_backends(run.children)
    api = Api(kube.kubeconfig)
    api.create(cluster.INGRESS_CLASS)
    for ns in (CONV_NS, SCALE_NS):
        api.create(cluster.namespace(ns))
    tw = Twingress(run.children, kube.kubeconfig, args.workers, run.proxy_cpus)
    tw.wait_ready(args.start_timeout)
    if args.scale:
        create_s, last_host = cluster.fill(api, 0, args.scale, args.threads, headless=True)
        live = wait_all_live(tw, args.scale, args.scale, last_host, time.monotonic(), 900.0)
        if live.get("timeout"):
            raise BenchFailed(f"the {args.scale} Ingresses were not all live within 900 s: {live}")
        log(f"{args.scale} Ingresses created in {create_s:.0f} s, live {live}")
    api.create(cluster.service("rm", CONV_NS))
    api.create(cluster.endpoint_slice("rm", CONV_NS, SCALE_BACKENDS))
    api.create(cluster.ingress("rm", CONV_NS, HOST, "rm"))
    if tw.wait_live(HOST, "/", REMOVED_NAME, time.monotonic(), args.timeout)[0] is None:
        raise BenchFailed(f"{HOST} never answered from {REMOVED_NAME}")
    tw.wait_generation_stable(quiet=2.0)
    floor = None if args.no_floor else Floor(kube.kubeconfig, CONV_NS, SLICE)
    if floor is not None:
        run.children.stack.callback(floor.stop)
        if not floor.ready.wait(args.timeout):
            raise BenchFailed(f"the bare watch not watching within {args.timeout} s")
    traffic = Traffic(tw.http_port)
    traffic.start()
    run.children.stack.callback(traffic.stop)
    time.sleep(args.warmup)  # connections made, to twingress and from it to each endpoint
    before = collections(tw)
    rows = []
    for i in range(args.trials):
        rows.append(row := one_trial(api, traffic, floor, args.run, args.timeout))
        if row["gone"] is None:
            log(f"trial {i}: {REMOVED_NAME} still answering after {args.timeout} s")
        add_back(api, traffic, args.timeout)
        time.sleep(args.gap)
    result = summarise(rows, floor is not None)
    after = collections(tw)
    result["collections"] = {g: {k: round(v - before.get(g, {}).get(k, 0.0), 4) for k, v in cell.items()} for g, cell in after.items()}
    result["collections_since_start"] = after
    if result["failures"]:
        run.failures.append(f"{result['failures']} of {args.trials} removals not seen by traffic within {args.timeout} s")
    return [{"ingresses": args.scale, "run": args.run, **result}]


def dist(label: str, r: dict[str, Any]) -> str:
    if not r.get("n"):
        return f"  {label}: no samples ({r.get('failures', 0)} missing)"
    return (f"  {label}: p50 {r['p50_ms']:.1f}  p90 {r['p90_ms']:.1f}  p99 {r['p99_ms']:.1f}  max {r['max_ms']:.1f} ms"
            + (f"  ({r['failures']} missing)" if r["failures"] else ""))


def lines(document: dict[str, Any]) -> list[str]:
    out = []
    for r in document["figures"]:
        out.append(f"endpoint removed at {r['ingresses']} Ingresses, PATCH call -> first of {r['run']}+ answers in a row from the remaining pods "
                   f"(target p99 <= {TARGET_P99_MS:.0f} ms; the PATCH call itself {r['patch_call_ms_median']:.1f} ms median)")
        out.append(dist(f"{r['n']} trials", r))
        if r["after_call"]:
            out.append(dist("from the PATCH call returning", r["after_call"]))
        if "floor" in r:
            out.append(dist("floor: PATCH call -> the event in a bare watch (no proxy)", r["floor"]["from_call"]))
            out.append(dist("floor: from the PATCH call returning", r["floor"]["from_call_returning"]))
            out.append(dist("twingress adds (traffic - floor, per trial)", r["floor"]["twingress_adds"]))
        full = r["collections"].get("2", {})
        out.append(f"  garbage collections during the trials: {r['collections']}; full ones over 10 ms: {full.get('over_10ms', 0):.0f}")
    return out
