"""The Gateway API part of bench/convergence.py (``--gateway-routes N``): HTTPRoutes at scale.

What it does, with the cluster, the echo backends and the twingress of convergence.py:

1. A GatewayClass of twingress's controller and a Gateway ``bench`` in namespace ``gwscale`` whose
   one HTTP listener is twingress's ``--http`` port (so the routes are served there).
2. N HTTPRoutes ``s{i}`` (host ``s{i}.gwscale.test``), each with its own Service and an EndpointSlice
   of the 3 scale endpoints, created by the thread pool of the Ingress scale step
   (``convergence.create_scale``); then the same wait for all live (the HTTPRoute informer holds
   every route, the last host answers, /debug/routes lists every host).
3. The full rebuild time with N routes (an annotation on one HTTPRoute, ``convergence.rebuilds``).
4. ``--gateway-changes`` new hosts: an HTTPRoute ``x{i}`` for host ``x{i}.gwscale.test`` to the
   Service of echo conv-a, timed from the create returning to the first 200 from conv-a through the
   proxy (``convergence.series``, back-to-back polls). Reported as p50/p99/max against the target
   p99 < 250 ms.

The routes are created before any Ingress scale step, so those steps run with them in the table.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import convergence as conv

NAMESPACE = "gwscale"
CLASS = "twingress-bench"
CONTROLLER = "twingress.io/gateway-controller"
GATEWAY_API = f"{conv.GATEWAY_GROUP}/v1"


def gateway_class() -> dict:
    return {"apiVersion": GATEWAY_API, "kind": "GatewayClass", "metadata": {"name": CLASS}, "spec": {"controllerName": CONTROLLER}}


def gateway(port: int) -> dict:
    return {
        "apiVersion": GATEWAY_API, "kind": "Gateway", "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {"gatewayClassName": CLASS, "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}]},
    }


def http_route(name: str, namespace: str, host: str, service_name: str) -> dict:
    """An HTTPRoute for HOST (every path) to port 80 of SERVICE_NAME, on the bench Gateway."""
    return {
        "apiVersion": GATEWAY_API, "kind": "HTTPRoute", "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": "bench"}],
            "hostnames": [host],
            "rules": [{"backendRefs": [{"name": service_name, "port": 80}]}],
        },
    }


def touch_route(api: conv.Api, name: str) -> Any:
    """A change that makes a full build: an annotation on HTTPRoute NAME (a merge patch)."""

    def touch(k: int) -> None:
        custom = conv.k8s.CustomObjectsApi(api._client())
        body = {"metadata": {"annotations": {"bench/touch": str(k)}}}
        response = custom.patch_namespaced_custom_object(conv.GATEWAY_GROUP, "v1", NAMESPACE, "httproutes", name, body, _preload_content=False)
        api._drain(response)

    return touch


def gateway_phase(api: conv.Api, tw: conv.Twingress, args: argparse.Namespace) -> dict[str, Any]:
    n = args.gateway_routes
    api.create(gateway_class())
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    api.create(gateway(tw.http_port))
    api.create(conv.service("conv-a", NAMESPACE))
    api.create(conv.endpoint_slice("conv-a", NAMESPACE, (conv.CONV_BACKENDS["conv-a"],)))
    conv.log(f"gateway {n}: creating HTTPRoutes s0..s{n - 1} (+ Service + EndpointSlice each), {args.threads} threads")
    create_s, last_host = conv.create_scale(api, 0, n, args.threads, http_route, NAMESPACE)
    t_last = time.monotonic()
    conv.log(f"gateway {n}: {3 * n} objects in {create_s:.1f} s; waiting for all live")
    live = conv.wait_all_live(tw, n, n, last_host, t_last, args.live_timeout, kind="HTTPRoute", namespace=NAMESPACE)
    conv.log(f"gateway {n}: {live}")
    if live.get("timeout"):
        raise RuntimeError(f"the {n} HTTPRoutes were not all live within {args.live_timeout:.0f} s: {live}")
    tw.wait_generation_stable(quiet=3.0)
    rebuild = conv.rebuilds(tw, args.rebuilds, touch_route(api, f"s{n - 1}"))
    conv.log(f"gateway {n}: rebuild {rebuild['build_ms']} ms, write->swap {rebuild['write_to_swap_ms']} ms")
    tw.wait_generation_stable(quiet=1.0)

    def create(i: int) -> tuple[str, str, str]:
        host = f"x{i}.{NAMESPACE}.test"
        api.create(http_route(f"x{i}", NAMESPACE, host, "conv-a"))
        return host, "/", "conv-a"

    label = f"new HTTPRoute host @ {n}"
    series = conv.series(label, tw, args.gateway_changes, create, args.gap, args.timeout)
    return {"routes": n, "create_s": create_s, "live": live, "rebuild": rebuild, "convergence": {label: series}}


def report_lines(result: dict[str, Any]) -> list[str]:
    """The Gateway phase in the text report."""
    live = result["live"].get("all_live_s")
    rb = result["rebuild"]
    lines = [
        "",
        f"Gateway API: {result['routes']} HTTPRoutes (each with its own Service and EndpointSlice of 3 endpoints) on one Gateway",
        f"  created in {result['create_s']:.1f} s, all live {'TIMEOUT' if live is None else f'{live:.2f} s'} after the last create; "
        f"rebuild {rb['build_ms_median']:.0f} ms (process CPU {rb['process_cpu_ms_median']:.0f} ms), write->swap {rb['write_to_swap_ms_median']:.0f} ms",
    ]
    for name, r in result["convergence"].items():
        if not r.get("n"):
            lines.append(f"  {name}: no samples ({r.get('failures', 0)} failures)")
            continue
        ok = "ok" if r["p99_ms"] < conv.TARGET_P99_MS and not r["failures"] else "MISSED"
        lines.append(
            f"  {name}: n={r['n']} failures={r['failures']} p50 {r['p50_ms']:.1f} / p99 {r['p99_ms']:.1f} / max {r['max_ms']:.1f} ms"
            f" (target p99 < {conv.TARGET_P99_MS:.0f} ms: {ok})"
        )
    return lines
