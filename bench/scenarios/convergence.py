"""
Convergence: how long from an API write returning to the change being live through the proxy (real
keep-alive requests with the changed Host, back to back, until one answers 200 from the expected
echo backend), on a real control plane (bench/lib/cluster.py), at growing numbers of Ingresses.

1. Series of C{--changes}: C{create} (a new Ingress for a new host), C{update-path} (an Ingress's
   path changes; the new one is polled), C{update-backend} (its Service flips between echo conv-a and
   conv-b), C{update-endpoints} (a Service's one endpoint moves between them: a pod replaced).
2. With C{--gateway-routes N}: a Gateway of ours, N HTTPRoutes (each with its own Service and
   EndpointSlice), their time to all live, the rebuild at N, and C{--gateway-changes} new HTTPRoute
   hosts timed as in 1.
3. For each C{--scale} N, cumulatively: N Ingresses, each with its own Service and EndpointSlice of 3
   endpoints, created by C{--threads} threads while twingress runs; the create rate, the time from
   the last create returning to every host live (informers, the last host through the proxy, every
   host in /debug/routes), the full rebuild (the build histogram around a touch of one Ingress,
   C{--rebuilds} times) with twingress's CPU and the write-to-swap time, C{--scale-changes} new hosts
   once per C{--scale-poll-intervals} value (back-to-back polls keep the reactor busy and the build
   shares the GIL with it: a second series with a pause shows what the probe itself costs) and
   endpoint moves, and the steady RSS and peak.
4. With C{--baseline N}: first, N routes of another class created with no twingress running, in a
   control plane of its own, for the creation rate the scale steps' rate compares with.
5. Unless C{--no-cold-start}: a fresh twingress against the largest cluster: time to ready, to all
   live, its builds and steady RSS.
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from typing import Any, Optional

from bench.lib import cluster
from bench.lib.cluster import CONV_BACKENDS, CONV_NS, SCALE_NS, Api, endpoint_slice, ingress, log, service
from bench.lib.kubeproxy import Twingress, rebuilds, series, steady_memory, wait_all_live
from bench.lib.procs import BenchFailed, Children
from bench.scenarios import Run

NAME = "convergence"
QUESTION = "How long until a change is live, by traffic, at 1k to 50k Ingresses (--gateway-routes N: HTTPRoutes), and what memory does the table take?"
TARGET_P99_MS = 250.0
# The large-cluster targets by size: new host p99 ms, endpoint move p99 ms, cold start to ready s, steady RSS MB.
SCALE_TARGETS = {10000: (50.0, 30.0, 5.0, 200.0), 50000: (100.0, 100.0, 30.0, 800.0)}
TARGET_CREATION_RATIO = 0.8  # objects/s with twingress running, to without it
GATEWAY_NS = "gwscale"
GATEWAY_API = f"{cluster.GATEWAY_GROUP}/v1"


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--changes", type=int, default=200, help="changes per convergence series (200; 0: none)")
    p.add_argument("--scale", type=lambda s: sorted(int(x) for x in s.split(",") if x.strip()), default=[1000, 10000],
                   help="Ingress counts, cumulative (1000,10000; '': none)")
    p.add_argument("--threads", type=int, default=12, help="threads creating the scale objects (12)")
    p.add_argument("--rebuilds", type=int, default=5, help="touches of one route per scale step (5)")
    p.add_argument("--scale-changes", type=int, default=20, help="new hosts (and endpoint moves) timed at each scale step (20)")
    p.add_argument("--scale-poll-intervals", type=floats, default=[0.0, 0.01], help="one series of new hosts per poll pause at each scale step (0,0.01)")
    p.add_argument("--gap", type=float, default=0.05, help="pause between two changes, s (0.05)")
    p.add_argument("--timeout", type=float, default=30.0, help="per-change timeout, s (30)")
    p.add_argument("--live-timeout", type=float, default=600.0, help="seconds a scale step has to go all live (600)")
    p.add_argument("--no-cold-start", dest="cold_start", action="store_false", help="no cold start at the end")
    p.add_argument("--baseline", type=int, default=0, help="routes (x3 objects) created with no twingress, for the creation rate without it (0: none)")
    p.add_argument("--headless-services", action="store_true",
                   help="scale Services without a cluster IP (this control plane allocates cluster IPs slowly by the thousand: 50k takes hours)")
    p.add_argument("--gateway-routes", type=int, default=0, help="HTTPRoutes on a Gateway of ours (0: no Gateway phase)")
    p.add_argument("--gateway-changes", type=int, default=200, help="new HTTPRoute hosts timed at the Gateway phase (200)")


def check(args: argparse.Namespace) -> str:
    if args.against:
        return "--against: the cluster scenarios measure twingress alone"
    if min([args.changes, args.rebuilds, args.scale_changes, args.gateway_routes, args.baseline, *args.scale] or [0]) < 0 or args.threads < 1:
        return "counts are 0 or more, --threads at least 1"
    if args.scale and args.rebuilds < 1:
        return "--rebuilds at least 1 with --scale"
    return cluster.missing()


def run(run: Run) -> list[dict[str, Any]]:
    args = run.args
    figures: list[dict[str, Any]] = []
    setup: dict[str, Any] = {"phase": "setup", "loadavg_start": cluster.loadavg()}
    figures.append(setup)
    if args.baseline:
        figures.append({"phase": "baseline", **baseline_rate(run, args.baseline)})
        run.say(f"baseline without twingress: {figures[-1]['objects_per_s']:.0f} objects/s")
    kube = cluster.start_control_plane(run.children)
    setup["cluster_startup_s"] = dict(kube.startup_seconds)
    for name, address in CONV_BACKENDS.items():
        cluster.start_echo(run.children, name, address)
    cluster.start_scale_backends(run.children)
    api = Api(kube.kubeconfig)
    api.create(cluster.INGRESS_CLASS)
    for ns in (CONV_NS, SCALE_NS):
        api.create(cluster.namespace(ns))
    for name, address in CONV_BACKENDS.items():
        api.create(service(name, CONV_NS))
        api.create(endpoint_slice(name, CONV_NS, (address,)))
    tw = Twingress(run.children, kube.kubeconfig, args.workers, run.proxy_cpus)
    setup["twingress_ready_s"] = tw.wait_ready(args.start_timeout)
    run.say(f"control plane up in {kube.startup_seconds['total']:.1f} s, twingress ready in {setup['twingress_ready_s']:.2f} s")
    mover = EndpointMover(api)
    if args.changes:
        figures += [{"phase": "series", "ingresses": 0, "series": name, **r} for name, r in convergence(api, tw, mover, args).items()]
    routes = args.changes + 2 if args.changes else 0
    if args.gateway_routes:
        figures.append({"phase": "gateway", **gateway_phase(api, tw, args)})
    have = 0
    for n in args.scale:
        step, conv = scale_phase(api, tw, mover, n, have, routes, args)
        figures.append({"phase": "scale", **step})
        figures += [{"phase": "series", "ingresses": n, "series": name, **r} for name, r in conv.items()]
        routes += args.scale_changes * len(args.scale_poll_intervals)
        have = n
    if args.cold_start and args.scale:
        tw.stop()  # one twingress at a time: the machine has few cores
        log(f"cold start against {args.scale[-1]} Ingresses")
        figures.append({"phase": "cold-start", "ingresses": args.scale[-1],
                        **cold_start(run, kube.kubeconfig, args.scale[-1], routes, figures_last_host(figures), args.live_timeout)})
    setup["loadavg_end"] = cluster.loadavg()
    return figures


def figures_last_host(figures: list[dict[str, Any]]) -> str:
    return str([f for f in figures if f["phase"] == "scale"][-1]["last_host"])


class EndpointMover:
    """The one endpoint of Service upd-ep moves to the other echo backend each time (a pod replaced by another)."""

    def __init__(self, api: Api) -> None:
        self.api, self.at = api, "conv-a"

    def __call__(self, i: int) -> tuple[str, str, str]:
        self.at = "conv-b" if self.at == "conv-a" else "conv-a"
        self.api.patch_endpoint_slice(CONV_NS, "upd-ep-1", [{"op": "replace", "path": "/endpoints/0/addresses/0", "value": CONV_BACKENDS[self.at]}])
        return "upd-ep.conv.test", "/", self.at


def convergence(api: Api, tw: Twingress, mover: EndpointMover, args: argparse.Namespace) -> dict[str, Any]:
    n, gap, timeout = args.changes, args.gap, args.timeout
    out: dict[str, Any] = {}

    def create(i: int) -> tuple[str, str, str]:
        host = f"c{i}.conv.test"
        api.create(ingress(f"c{i}", CONV_NS, host, "conv-a"))
        return host, "/", "conv-a"

    out["create"] = series("create", tw, n, create, gap, timeout)
    api.create(ingress("upd-path", CONV_NS, "upd-path.conv.test", "conv-a", "/p0"))
    api.create(ingress("upd-backend", CONV_NS, "upd-backend.conv.test", "conv-a"))
    api.create(service("upd-ep", CONV_NS))
    api.create(endpoint_slice("upd-ep", CONV_NS, (CONV_BACKENDS["conv-a"],)))
    api.create(ingress("upd-ep", CONV_NS, "upd-ep.conv.test", "upd-ep"))
    t0 = time.monotonic()
    for host, path in (("upd-path.conv.test", "/p0"), ("upd-backend.conv.test", "/"), ("upd-ep.conv.test", "/")):
        if tw.wait_live(host, path, "conv-a", t0, timeout)[0] is None:
            raise BenchFailed(f"{host}{path} never became live")

    def update_path(i: int) -> tuple[str, str, str]:
        path = f"/p{i + 1}"
        api.patch_ingress(CONV_NS, "upd-path", [{"op": "replace", "path": "/spec/rules/0/http/paths/0/path", "value": path}])
        return "upd-path.conv.test", path, "conv-a"

    def update_backend(i: int) -> tuple[str, str, str]:
        target = "conv-b" if i % 2 == 0 else "conv-a"
        api.patch_ingress(CONV_NS, "upd-backend", [{"op": "replace", "path": "/spec/rules/0/http/paths/0/backend/service/name", "value": target}])
        return "upd-backend.conv.test", "/", target

    out["update-path"] = series("update-path", tw, n, update_path, gap, timeout)
    out["update-backend"] = series("update-backend", tw, n, update_backend, gap, timeout)
    out["update-endpoints"] = series("update-endpoints", tw, n, mover, gap, timeout)
    return out


def touch_ingress(api: Api, name: str) -> Any:
    """A change that makes a full build and nothing else: an annotation on Ingress NAME."""
    return lambda k: api.patch_ingress(SCALE_NS, name, [{"op": "add", "path": "/metadata/annotations", "value": {"bench/touch": str(k)}}])


def baseline_rate(run: Run, n: int) -> dict[str, Any]:
    """Objects/s creating N routes of another class with no twingress running, in a fresh control plane
    of its own (as the main one is when the scale step creates the same objects), stopped after."""
    with ExitStack() as stack:
        kube = cluster.start_control_plane(Children(stack, run.children.workdir, run.args.start_timeout), "kube-baseline")
        api = Api(kube.kubeconfig)
        api.create(cluster.namespace("baseline"))

        def other_class(name: str, ns: str, host: str, service_name: str) -> dict[str, Any]:
            body = ingress(name, ns, host, service_name)
            body["spec"]["ingressClassName"] = "not-twingress"
            return body

        seconds, _ = cluster.fill(api, 0, n, run.args.threads, other_class, "baseline", run.args.headless_services)
    return {"objects": 3 * n, "seconds": round(seconds, 2), "objects_per_s": round(3 * n / seconds, 1)}


def scale_phase(api: Api, tw: Twingress, mover: EndpointMover, n: int, have: int, routes: int, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    log(f"scale {n}: creating Ingresses s{have}..s{n - 1} (+ Service + EndpointSlice each), {args.threads} threads")
    m0, cpu0 = tw.metrics(), cluster.proc_status(tw.pid)["cpu_s"]
    create_s, last_host = cluster.fill(api, have, n, args.threads, headless=args.headless_services)
    objects = 3 * (n - have)
    log(f"scale {n}: {objects} objects in {create_s:.1f} s ({objects / create_s:.0f}/s); waiting for all live")
    live = wait_all_live(tw, routes + n, n, last_host, time.monotonic(), args.live_timeout)
    m1, cpu1 = tw.metrics(), cluster.proc_status(tw.pid)["cpu_s"]
    tw.wait_generation_stable(quiet=3.0)
    rb = rebuilds(tw, args.rebuilds, touch_ingress(api, f"s{n - 1}"))
    conv: dict[str, Any] = {}
    for k, interval in enumerate(args.scale_poll_intervals if args.scale_changes else ()):
        tw.wait_generation_stable(quiet=1.0)

        def create(i: int, k: int = k) -> tuple[str, str, str]:
            host = f"x{n}-{k}-{i}.conv.test"
            api.create(ingress(f"x{n}-{k}-{i}", CONV_NS, host, "conv-a"))
            return host, "/", "conv-a"

        label = "create" + (f", poll {interval * 1000:g}ms" if interval else "")
        conv[label] = series(f"{label} @ {n}", tw, args.scale_changes, create, args.gap, args.timeout, interval)
    if args.scale_changes and args.changes:  # the Service whose endpoint moves is made by the first series
        tw.wait_generation_stable(quiet=1.0)
        conv["update-endpoints"] = series(f"update-endpoints @ {n}", tw, args.scale_changes, mover, args.gap, args.timeout)
    memory = steady_memory(tw)
    log(f"scale {n}: steady RSS {memory['rss_mb']:.0f} MB (peak {memory['hwm_mb']:.0f} MB)")
    return {"ingresses": n, "create_s": create_s, "objects_per_s": objects / create_s, "last_host": last_host, "live": live,
            "builds_during_create": int(m1["twingress_table_build_seconds_count"] - m0["twingress_table_build_seconds_count"]),
            "build_s_during_create": m1["twingress_table_build_seconds_sum"] - m0["twingress_table_build_seconds_sum"],
            "twingress_cpu_s_during_create": cpu1 - cpu0, "rebuild": rb, "memory": memory}, conv


def cold_start(run: Run, kubeconfig: Any, n: int, routes: int, last_host: str, timeout: float) -> dict[str, Any]:
    tw = Twingress(run.children, kubeconfig, run.args.workers, run.proxy_cpus, name="twingress-cold")
    try:
        t0 = time.monotonic()
        ready_s = tw.wait_ready(timeout)
        live = wait_all_live(tw, routes + n, n, last_host, t0, timeout)
        memory = steady_memory(tw)
        m = tw.metrics()
        return {"ready_s": ready_s, "all_live_s": live.get("all_live_s"), "builds": int(m.get("twingress_table_build_seconds_count", 0)),
                "build_s_total": m.get("twingress_table_build_seconds_sum", 0.0), "memory": memory}
    finally:
        tw.stop()


# --- the Gateway API phase -----------------------------------------------------------------------


def http_route(name: str, ns: str, host: str, service_name: str) -> dict[str, Any]:
    """An HTTPRoute for HOST (every path) to port 80 of SERVICE_NAME, on the bench Gateway."""
    return {"apiVersion": GATEWAY_API, "kind": "HTTPRoute", "metadata": {"name": name, "namespace": ns},
            "spec": {"parentRefs": [{"name": "bench"}], "hostnames": [host], "rules": [{"backendRefs": [{"name": service_name, "port": 80}]}]}}


def gateway_phase(api: Api, tw: Twingress, args: argparse.Namespace) -> dict[str, Any]:
    """A GatewayClass of twingress's controller, a Gateway whose HTTP listener is twingress's --http
    port, N HTTPRoutes to all live, the rebuild at N, and new HTTPRoute hosts timed by traffic."""
    n = args.gateway_routes
    api.create({"apiVersion": GATEWAY_API, "kind": "GatewayClass", "metadata": {"name": "twingress-bench"},
                "spec": {"controllerName": "twingress.io/gateway-controller"}})
    api.create(cluster.namespace(GATEWAY_NS))
    api.create({"apiVersion": GATEWAY_API, "kind": "Gateway", "metadata": {"name": "bench", "namespace": GATEWAY_NS},
                "spec": {"gatewayClassName": "twingress-bench", "listeners": [{"name": "http", "port": tw.http_port, "protocol": "HTTP"}]}})
    api.create(service("conv-a", GATEWAY_NS))
    api.create(endpoint_slice("conv-a", GATEWAY_NS, (CONV_BACKENDS["conv-a"],)))
    log(f"gateway {n}: creating HTTPRoutes s0..s{n - 1} (+ Service + EndpointSlice each), {args.threads} threads")
    create_s, last_host = cluster.fill(api, 0, n, args.threads, http_route, GATEWAY_NS)
    live = wait_all_live(tw, n, n, last_host, time.monotonic(), args.live_timeout, kind="HTTPRoute", ns=GATEWAY_NS)
    if live.get("timeout"):
        raise BenchFailed(f"the {n} HTTPRoutes were not all live within {args.live_timeout:.0f} s: {live}")
    tw.wait_generation_stable(quiet=3.0)
    rebuild = rebuilds(tw, args.rebuilds, lambda k: api.patch_route(GATEWAY_NS, f"s{n - 1}", {"metadata": {"annotations": {"bench/touch": str(k)}}}))
    tw.wait_generation_stable(quiet=1.0)

    def create(i: int) -> tuple[str, str, str]:
        host = f"x{i}.{GATEWAY_NS}.test"
        api.create(http_route(f"x{i}", GATEWAY_NS, host, "conv-a"))
        return host, "/", "conv-a"

    return {"routes": n, "create_s": create_s, "live": live, "rebuild": rebuild,
            "new_host": series(f"new HTTPRoute host @ {n}", tw, args.gateway_changes, create, args.gap, args.timeout)}


# --- the table -----------------------------------------------------------------------------------


def series_line(label: str, r: dict[str, Any]) -> str:
    if not r.get("n"):
        return f"  {label:<30}{0:>5}{r.get('failures', 0):>6}"
    ok = "ok" if r["p99_ms"] <= TARGET_P99_MS and not r["failures"] else "MISSED"
    return f"  {label:<30}{r['n']:>5}{r['failures']:>6}{r['p50_ms']:>9.1f}{r['p90_ms']:>9.1f}{r['p99_ms']:>9.1f}{r['max_ms']:>9.1f}  {ok}"


def scale_line(s: dict[str, Any]) -> str:
    live, rb, memory = s["live"].get("all_live_s"), s["rebuild"], s["memory"]
    return (f"  {s['ingresses']:>9}{s['create_s']:>10.1f}{s['objects_per_s']:>7.0f}{(f'{live:.2f}' if live is not None else 'TIMEOUT'):>10}"
            f"{s['builds_during_create']:>8}{rb['build_ms_median']:>12.0f}{rb['process_cpu_ms_median']:>8.0f}{rb['write_to_swap_ms_median']:>11.0f}"
            f"{memory['rss_mb']:>8.0f}{memory['hwm_mb']:>9.0f}")


def targets(s: dict[str, Any], by_series: dict[tuple[int, str], dict[str, Any]], baseline: Optional[dict[str, Any]],
            cold: Optional[dict[str, Any]]) -> list[str]:
    """The large-cluster targets at this size, each with the measured value and ok/MISSED."""
    n = s["ingresses"]
    out = []
    if n in SCALE_TARGETS:
        host_p99, endpoint_p99, cold_s, rss_mb = SCALE_TARGETS[n]
        found = [("new host live p99 ms", by_series.get((n, "create"), {}).get("p99_ms"), host_p99),
                 ("endpoint moved p99 ms", by_series.get((n, "update-endpoints"), {}).get("p99_ms"), endpoint_p99),
                 ("steady RSS MB", s["memory"]["rss_mb"], rss_mb)]
        if cold and cold["ingresses"] == n:
            found.append(("cold start to ready s", cold["ready_s"], cold_s))
        out.append(f"  at {n}: " + ", ".join(f"{name} {value:.1f} (<= {limit:g}: {'ok' if value <= limit else 'MISSED'})"
                                             for name, value, limit in found if value is not None))
    if baseline:
        ratio = s["objects_per_s"] / baseline["objects_per_s"]
        out.append(f"  at {n}: creation {s['objects_per_s']:.0f}/s with twingress, {baseline['objects_per_s']:.0f}/s without: "
                   f"{ratio:.2f}x (>= {TARGET_CREATION_RATIO}: {'ok' if ratio >= TARGET_CREATION_RATIO else 'MISSED'})")
    return out


def lines(document: dict[str, Any]) -> list[str]:
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for f in document["figures"]:
        by_phase.setdefault(f["phase"], []).append(f)
    out: list[str] = []
    for setup in by_phase.get("setup", []):
        startup = setup.get("cluster_startup_s", {})
        out.append(f"load average {setup['loadavg_start']} at start, {setup.get('loadavg_end', '?')} at end; control plane up in "
                   f"{startup.get('total', float('nan')):.1f} s, twingress ready in {setup.get('twingress_ready_s', float('nan')):.2f} s")
    rows = by_phase.get("series", [])
    gateways = by_phase.get("gateway", [])
    if rows or gateways:
        out.append(f"API write returned -> 200 from the expected backend through the proxy (target p99 <= {TARGET_P99_MS:.0f} ms)")
        out.append(f"  {'series':<30}{'n':>5}{'fail':>6}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
        out += [series_line(f"{r['series']} @ {r['ingresses']}" if r["ingresses"] else r["series"], r) for r in rows]
        out += [series_line(f"new HTTPRoute host @ {g['routes']}", g["new_host"]) for g in gateways]
    for g in gateways:
        live, rb = g["live"].get("all_live_s"), g["rebuild"]
        out.append(f"Gateway API: {g['routes']} HTTPRoutes created in {g['create_s']:.1f} s, all live "
                   f"{'TIMEOUT' if live is None else f'{live:.2f} s'} after the last create; rebuild {rb['build_ms_median']:.0f} ms "
                   f"(CPU {rb['process_cpu_ms_median']:.0f} ms), write->swap {rb['write_to_swap_ms_median']:.0f} ms")
    scales = by_phase.get("scale", [])
    baseline = (by_phase.get("baseline") or [None])[0]
    cold = (by_phase.get("cold-start") or [None])[0]
    if scales:
        out.append("Scale (each Ingress with its own Service and EndpointSlice of 3 endpoints)")
        out.append(f"  {'ingresses':>9}{'create s':>10}{'obj/s':>7}{'->live s':>10}{'builds':>8}{'rebuild ms':>12}{'cpu ms':>8}{'->swap ms':>11}{'RSS MB':>8}{'peak MB':>9}")
        out += [scale_line(s) for s in scales]
        out.append("  ->live: last create returned -> every host in /debug/routes and the last answering; builds: while creating;")
        out.append("  rebuild: median build after touching one Ingress (cpu: twingress's CPU around it); ->swap: write returned -> new generation")
        by_series = {(r["ingresses"], r["series"]): r for r in rows}
        for s in scales:
            out += targets(s, by_series, baseline, cold)
    if cold:
        out.append(f"Cold start at {cold['ingresses']} Ingresses: ready in {cold['ready_s']:.2f} s, all live in "
                   f"{'TIMEOUT' if cold['all_live_s'] is None else round(cold['all_live_s'], 2)} s, {cold['builds']} builds "
                   f"({cold['build_s_total']:.2f} s), steady RSS {cold['memory']['rss_mb']:.0f} MB (peak {cold['memory']['hwm_mb']:.0f} MB)")
    return out
