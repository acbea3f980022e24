"""The soak benchmark's summary (from its raw results) and its table, with the issue's targets.

Failed requests are matched against the backend kills by their monotonic times:

- ``in flight at a kill``: the request was open while a backend was being killed (started before
  the process was reaped, ended after the SIGKILL). It may have been on that backend: expected.
- ``during an outage``: started after a kill and up to ``OUTAGE_GRACE`` after the restart. Every
  Service keeps an endpoint on a live backend, so twingress should have passed these on (a refused
  connection is retried on another endpoint): they count as failures, shown apart to diagnose.
- ``other``: everything else.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Optional

from bench.lib.churn import CHANGE_KINDS
from bench.lib.cluster import percentile
from bench.lib.soakload import KINDS, percentile_ms

OUTAGE_GRACE = 1.0
TARGET_RSS_GROWTH_MB = 50.0
SOCKET_JITTER = 32  # sockets sampled under load: the upstream pools keep what the last 30 s of bursts opened


def classify(failure: list[Any], kills: list[dict[str, Any]]) -> str:
    _, started, ended, _ = failure
    if any(started <= k["dead"] and ended >= k["kill"] for k in kills):
        return "in_flight_at_kill"
    if any(k["kill"] <= started <= k["up"] + OUTAGE_GRACE for k in kills):
        return "during_outage"
    return "other"


def requests_summary(load: Optional[dict[str, Any]], kills: list[dict[str, Any]]) -> dict[str, Any]:
    if load is None:
        return {"missing": True}
    out: dict[str, Any] = {}
    classes: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    for failure in load["failures"]:
        classes[failure[0]][classify(failure, kills)] += 1
    for kind in KINDS:
        out[kind] = {
            "ok": load["ok"][kind],
            "failed": load["failed"][kind],
            "skipped_ticks": load["skipped"][kind],
            "in_flight_at_kill": classes[kind]["in_flight_at_kill"],
            "during_outage": classes[kind]["during_outage"],
            "other": classes[kind]["other"],
            "p50_ms": percentile_ms(load["histograms"][kind], 50),
            "p99_ms": percentile_ms(load["histograms"][kind], 99),
        }
    out["unexcused"] = sum(out[k]["during_outage"] + out[k]["other"] for k in KINDS) + load["failures_dropped"]
    out["failures_dropped"] = load["failures_dropped"]
    out["errors"] = Counter(f"{f[0]}: {f[3]}" for f in load["failures"]).most_common(12)
    return out


def usage_summary(samples: list[dict[str, float]], end: Optional[dict[str, float]], warmup: float) -> dict[str, Any]:
    after = next((s for s in samples if s["t"] >= warmup and "died" not in s), None)
    out: dict[str, Any] = {"after_warmup": after, "end": end, "died": any("died" in s for s in samples)}
    if after and end:
        out["rss_growth_mb"] = end["rss_mb"] - after["rss_mb"]
        out["fd_growth"] = end["fds"] - after["fds"]
        out["socket_growth"] = end["sockets"] - after["sockets"]
        out["other_fd_growth"] = out["fd_growth"] - out["socket_growth"]
        under_load = [s["fds"] for s in samples if s["t"] >= warmup and "died" not in s] + [end["fds"]]
        out["fds_range"] = [min(under_load), max(under_load)]
    return out


def changes_summary(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in CHANGE_KINDS:
        live, after_kill = raw["live_ms"][kind], raw["live_after_kill_ms"][kind]
        out[kind] = {
            "made": raw["changes"]["made"][kind],
            "live": len(live) + len(after_kill),
            "live_after_kill": len(after_kill),
            "not_live": len(raw["not_live"][kind]),
            "api_errors": raw["changes"]["api_errors"][kind],
            "p50_ms": percentile(live, 50) if live else None,
            "p99_ms": percentile(live, 99) if live else None,
        }
    out["all_live"] = all(out[k]["made"] == out[k]["live"] and not out[k]["api_errors"] for k in CHANGE_KINDS)
    out["skipped_ticks"] = raw["changes"]["skipped_ticks"]
    out["not_live_examples"] = [x for k in CHANGE_KINDS for x in raw["not_live"][k]][:10]
    return out


def metrics_diff(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    start, end = metrics["start"], metrics["end"]
    return {group: {k: v - start[group].get(k, 0.0) for k, v in sorted(end[group].items())} for group in end}


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    if "samples" not in result:
        return {"incomplete": True, "args": result["args"]}
    kills = result["kills"]
    downtimes = [k["up"] - k["dead"] for k in kills]
    return {
        "args": result["args"],
        "loadavg": [result["loadavg_start"], result["loadavg_end"]],
        "setup": {k: round(result[k], 2) for k in ("create_s", "ready_s", "initial_live_s")},
        "requests": requests_summary(result["load"], kills),
        "usage": usage_summary(result["samples"], result["end_sample"], result["args"]["warmup"]),
        "changes": changes_summary(result),
        "kills": {"count": len(kills), "backends": [k["backend"] for k in kills], "down_s_median": statistics.median(downtimes) if downtimes else None},
        "twingress_metrics": metrics_diff(result["metrics"]),
    }


# --- the table -----------------------------------------------------------------------------------


def ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def table(s: dict[str, Any]) -> str:
    if s.get("incomplete"):
        return "soak: the run did not get to its load phase (its failure says why)"
    a = s["args"]
    lines = [
        f"twingress soak: {a['duration']:.0f} s, {a['ingresses']} Ingresses (TLS every {a['tls_every']}), --workers {a['workers']}, "
        f"{a['connections']} keep-alive connections; load average {s['loadavg'][0]} -> {s['loadavg'][1]}",
        f"setup: objects created in {s['setup']['create_s']} s, twingress ready in {s['setup']['ready_s']} s, all live {s['setup']['initial_live_s']} s later",
        "",
    ]
    lines += requests_table(s["requests"], s["kills"])
    lines += usage_table(s["usage"], a["warmup"])
    lines += changes_table(s["changes"], a["change_timeout"])
    m = s["twingress_metrics"]
    lines.append(
        "twingress's informers over the soak: watch restarts "
        + (", ".join(f"{k} {v:.0f}" for k, v in m["watch_restarts"].items() if v) or "none")
        + "; relists "
        + (", ".join(f"{k} {v:.0f}" for k, v in m["relists"].items() if v) or "none")
    )
    lines.append(
        "twingress's counters over the soak (probes included): twingress_http_requests_total by status "
        + (", ".join(f"{k}: {v:.0f}" for k, v in m["requests_by_status"].items()) or "none")
        + "; twingress_upstream_failures_total "
        + (", ".join(f"{k}: {v:.0f}" for k, v in m["upstream_failures"].items()) or "none")
    )
    return "\n".join(lines)


def requests_table(r: dict[str, Any], kills: dict[str, Any]) -> list[str]:
    if r.get("missing"):
        return ["requests: the load generator wrote no results (its log tail is in the JSON)", ""]
    out = [f"{'requests':<12}{'ok':>10}{'failed':>8}{'in flight@kill':>16}{'in outage':>11}{'other':>7}{'p50 ms':>9}{'p99 ms':>9}"]
    for kind in KINDS:
        k = r[kind]
        out.append(f"{kind:<12}{k['ok']:>10}{k['failed']:>8}{k['in_flight_at_kill']:>16}{k['during_outage']:>11}{k['other']:>7}{ms(k['p50_ms']):>9}{ms(k['p99_ms']):>9}")
    out.append(f"target: 0 failed requests except those in flight at a kill -> {r['unexcused']} ({verdict(r['unexcused'] == 0)})")
    down = kills["down_s_median"]
    out.append(f"backend kills: {kills['count']} ({', '.join(kills['backends']) or 'none'})" + (f", SIGKILL reaped -> listening again: {down:.1f} s (median)" if down else ""))
    for error, count in r["errors"]:
        out.append(f"  {count:>6} x {error}")
    skipped = {k: r[k]["skipped_ticks"] for k in KINDS if r[k]["skipped_ticks"]}
    if skipped:
        out.append(f"  new-connection ticks skipped (64 still open): {skipped}")
    return [*out, ""]


def usage_table(u: dict[str, Any], warmup: float) -> list[str]:
    after, end = u["after_warmup"], u["end"]
    if u["died"]:
        return ["twingress DIED during the soak (its log tail is above)", ""]
    if not after or not end:
        return [f"memory/fds: no sample after the warm-up ({warmup:.0f} s): run longer than --warmup", ""]
    head = f"twingress ({end['processes']:.0f} process{'es' if end['processes'] > 1 else ''})"
    rss_ok = u["rss_growth_mb"] < TARGET_RSS_GROWTH_MB
    others = (after["fds"] - after["sockets"], end["fds"] - end["sockets"])
    low, high = u["fds_range"]
    return [
        f"{head:<24}{'t=' + format(after['t'], '.0f') + ' s':>12}{'t=' + format(end['t'], '.0f') + ' s':>12}{'growth':>10}  target",
        f"{'RSS MB':<24}{after['rss_mb']:>12.1f}{end['rss_mb']:>12.1f}{u['rss_growth_mb']:>+10.1f}  < {TARGET_RSS_GROWTH_MB:.0f} MB ({verdict(rss_ok)})",
        f"{'open fds':<24}{after['fds']:>12.0f}{end['fds']:>12.0f}{u['fd_growth']:>+10.0f}  no growth (range under load {low:.0f}-{high:.0f})",
        f"{'  sockets':<24}{after['sockets']:>12.0f}{end['sockets']:>12.0f}{u['socket_growth']:>+10.0f}"
        f"  <= +{SOCKET_JITTER}: pools hold what bursts opened ({verdict(u['socket_growth'] <= SOCKET_JITTER)})",
        f"{'  other fds':<24}{others[0]:>12.0f}{others[1]:>12.0f}{u['other_fd_growth']:>+10.0f}  no growth ({verdict(u['other_fd_growth'] <= 0)})",
        "",
    ]


def changes_table(c: dict[str, Any], timeout: float) -> list[str]:
    out = [f"{'changes':<16}{'made':>7}{'live':>7}{'not live':>10}{'api errors':>12}{'p50 ms':>9}{'p99 ms':>9}{'waited for a kill':>19}"]
    for kind in CHANGE_KINDS:
        k = c[kind]
        out.append(f"{kind:<16}{k['made']:>7}{k['live']:>7}{k['not_live']:>10}{k['api_errors']:>12}{ms(k['p50_ms']):>9}{ms(k['p99_ms']):>9}{k['live_after_kill']:>19}")
    out.append("  p50/p99: API write returned -> live through the proxy, without the changes that waited for a killed backend")
    out.append(
        f"target: every change live (within {timeout:.0f} s) -> {verdict(c['all_live'])}" + (f"; ticks skipped (all objects pending): {c['skipped_ticks']}" if c["skipped_ticks"] else "")
    )
    out += [f"  not live: {x}" for x in c["not_live_examples"]]
    return [*out, ""]
