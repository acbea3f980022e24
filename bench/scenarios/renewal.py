"""
Renewal: 1,000 TLS Secrets renewed at once, as cert-manager does: how long until every new
certificate is served, and whether any TLS handshake fails meanwhile.

Certificates issued together are renewed together: cert-manager rewrites hundreds of Secrets
within seconds. twingress hears each write as a watch event, builds the changed Secrets' contexts
on its build thread and swaps them in with the next routing table, while the reactor keeps
answering handshakes. The issue's target: every new certificate served within 2 s, no handshake
failing. The targets are printed next to the numbers.

1. Setup (bench/lib/cluster.py, bench/lib/kubeproxy.py, tests/proxy/certs.py): etcd, kube-apiserver, kube-controller-manager; one echo backend on
   10.244.0.30:8080 behind Service ``echo``; ``--secrets`` TLS Secrets ``tls-{i}`` (leaves of a CA
   made at start) and as many Ingresses, each host ``r{i}.renew.test`` with its own Secret; then
   twingress with HTTPS on loopback. Ready when /debug/routes has every host and its certificate
   and a sample of hosts serves the right one (the leaf's SHA-256 compared).
2. A new key and certificate for every host are made up front; then the probes of
   bench/lib/renewal_probes.py start: background handshakes over all hosts at ``--probe-rate``
   (``--before`` s before the renewal, through it, ``--after`` s after), detection handshakes to
   the renewed hosts not yet serving their new certificate, and /readyz polled for table swaps
   (/metrics read after each).
3. Renewal: every Secret's data is replaced (a JSON patch of /data: new key, new certificate) by
   ``--threads`` threads as fast as the apiserver takes it; when each write returned is kept.
4. Per host, the time from its write returning to its new certificate being served. A round of
   detection handshakes over 1,000 hosts takes seconds, longer than the target, so its first
   new-certificate handshake alone is a loose upper bound (reported too, as the probe's figure).
   It is tightened with what twingress says after each table swap (/readyz's generation polled
   every ``--poll-interval``, /metrics read after each change: the expiry of every loaded
   certificate, the new ones a day later than the old): the new certificate went live at a swap
   after the host's write started and its last handshake or read that still got the old one, and
   by its first that got the new one; the latest swap in that window bounds it (with one swap
   there it is known to the poll interval). Handshakes and reads that disagree are counted. The
   time can be negative: the watch event may reach twingress before the write's answer reaches
   the client. Reported: p50/p99/max of that, the time from the first write to the
   last host serving its new certificate, failed handshakes over the whole window, twingress's RSS
   and CPU, its table builds and its warnings in the window.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import itertools
import json
import math
import random
import re
import threading
import time
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes.client.exceptions import ApiException

from bench.lib import cluster, procs
from bench.lib import renewal_probes as probes
from bench.lib.cluster import Api, endpoint_slice, ingress, log, percentile, proc_status, retrying, service
from bench.lib.kubeproxy import Prober, Twingress
from bench.scenarios import Run
from tests.proxy import certs

NAME = "renewal"
QUESTION = "When 1,000 TLS Secrets renew at once, how long until every new certificate is served, and does any handshake fail?"
NS = "renew"
ECHO_ADDRESS = "10.244.0.30"
TARGET_SERVED_MS = 2000.0
BUILD_LINE = re.compile(r"routing table (\d+) live: (\d+) hosts, (\d+) problems, built in ([\d.]+) ms")
WARNING_LINE = re.compile(r"#(warn|error|critical)\]|Traceback")


def host(i: int) -> str:
    return f"r{i}.renew.test"


def leaf_secrets(ca: certs.CertificateAuthority, n: int, key_type: str, days: int) -> tuple[list[dict[str, Any]], list[str], list[float]]:
    """Secrets tls-{i} with a new key and certificate for each host(i), valid for DAYS more days
    (old and new certificates are told apart by their expiry in /metrics too), the leaves' SHA-256
    and their expiry (Unix time)."""
    not_after = certs.now() + datetime.timedelta(days=days)
    leaves = [ca.issue([host(i)], key_type=key_type, not_after=not_after) for i in range(n)]  # type: ignore[arg-type]
    return (
        [certs.tls_secret(f"tls-{i}", leaf, NS) for i, leaf in enumerate(leaves)],
        [hashlib.sha256(leaf.cert.public_bytes(Encoding.DER)).hexdigest() for leaf in leaves],
        [leaf.not_after.timestamp() for leaf in leaves],
    )


def create_world(api: Api, pool: concurrent.futures.ThreadPoolExecutor, secrets: list[dict[str, Any]]) -> float:
    """IngressClass, namespace, the echo Service, the Secrets, then one Ingress per host; seconds."""
    t0 = time.monotonic()
    api.create(cluster.INGRESS_CLASS)
    api.create(cluster.namespace(NS))
    api.create(service("echo", NS))
    api.create(endpoint_slice("echo", NS, (ECHO_ADDRESS,)))
    list(pool.map(api.create_retrying, secrets))

    def tls_ingress(i: int) -> dict[str, Any]:
        body = ingress(f"r{i}", NS, host(i), "echo")
        body["spec"]["tls"] = [{"hosts": [host(i)], "secretName": f"tls-{i}"}]
        return body

    list(pool.map(api.create_retrying, [tls_ingress(i) for i in range(len(secrets))]))
    return time.monotonic() - t0


def wait_served(tw: Twingress, prober: Prober, old_sha: list[str], sample: int, timeout: float = 600.0) -> float:
    """Until /debug/routes has every host and its certificate and SAMPLE hosts serve theirs; seconds."""
    n, t0 = len(old_sha), time.monotonic()
    checking = sorted(set(random.Random(0).sample(range(n), min(n, sample)) + [0, n - 1]))
    while time.monotonic() - t0 < timeout:
        tw.check_alive()
        routes = json.loads(tw.admin_get("/debug/routes")[1])
        if sum(h.endswith(".renew.test") for h in routes.get("hosts", {})) >= n and sum(h.endswith(".renew.test") for h in routes.get("certificates", {})) >= n:
            checking = [i for i in checking if not prober.serves(host(i), old_sha[i])]
            if not checking:
                return time.monotonic() - t0
        time.sleep(0.5)
    raise procs.BenchFailed(f"not every host served within {timeout:.0f} s ({len(checking)} of the sample not yet)")


def renew(args: argparse.Namespace, api: Api, pool: concurrent.futures.ThreadPoolExecutor, tw: Twingress, https_port: int, hosts: probes.Hosts,
          secrets: list[dict[str, Any]]) -> dict[str, Any]:
    """Probes before, during and after replacing every Secret's data; the raw results."""
    n, stop = len(secrets), threading.Event()
    prober = Prober(tw.http_port, https_port)
    poller = probes.GenerationPoller(tw.admin_port, args.poll_interval, hosts, stop)
    order = itertools.count()
    bg, dp = probes.Pacer(args.probe_rate), probes.Pacer(args.detect_rate)
    threads: list[threading.Thread] = [poller]
    threads += [threading.Thread(target=probes.background, args=(prober, hosts, host, bg, stop, order), daemon=True) for _ in range(args.probe_threads)]
    threads += [threading.Thread(target=probes.detect, args=(prober, hosts, host, dp, stop), daemon=True) for _ in range(args.detect_threads)]
    out: dict[str, Any] = {"write_errors": []}
    try:
        for t in threads:
            t.start()
        log(f"probing for {args.before:.0f} s before the renewal")
        stop.wait(args.before)
        out["before"] = {"mark": time.monotonic(), **proc_status(tw.pid), **tw.metrics()}
        log_offset = tw.proc.log.stat().st_size

        def write(i: int) -> None:
            start = time.monotonic()
            try:
                retrying(lambda: api.patch_secret(NS, f"tls-{i}", [{"op": "replace", "path": "/data", "value": secrets[i]["data"]}]))
            except (ApiException, OSError) as e:
                out["write_errors"].append(f"tls-{i}: {str(e).splitlines()[0]}")
                return
            hosts.written(i, start, time.monotonic())

        log(f"replacing {n} Secrets with {args.threads} threads")
        t_first = time.monotonic()
        list(pool.map(write, range(n)))
        out["writes_s"] = time.monotonic() - t_first
        written = n - len(out["write_errors"])
        log(f"{written} Secrets replaced in {out['writes_s']:.2f} s; waiting for every new certificate")
        while hosts.served < written and time.monotonic() - t_first < args.timeout:
            tw.check_alive()
            time.sleep(0.05)
        out["all_seen"] = time.monotonic()
        log(f"{hosts.served} of {written} new certificates seen {out['all_seen'] - t_first:.2f} s after the first write; probing {args.after:.0f} s more")
        stop.wait(args.after)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10.0)
    tw.wait_generation_stable(quiet=2.0, timeout=60.0)
    out["after"] = {**proc_status(tw.pid), **tw.metrics()}
    with tw.proc.log.open(errors="replace") as f:
        f.seek(log_offset)
        lines = f.read().splitlines()
    out["builds"] = [{"generation": int(m[1]), "hosts": int(m[2]), "problems": int(m[3]), "ms": float(m[4])} for line in lines if (m := BUILD_LINE.search(line))]
    out["warnings"] = [line for line in lines if WARNING_LINE.search(line)]
    out.update(first_write=t_first, swaps=poller.swaps, polls=poller.polls, poll_errors=poller.errors, metrics_reads=poller.metrics_reads)
    return out


def summarize(args: argparse.Namespace, hosts: probes.Hosts, raw: dict[str, Any]) -> dict[str, Any]:
    """The figures of the report from the raw records (times in ms from the first write)."""
    t0, swaps = raw["first_write"], raw["swaps"]
    served, raw_ms, pinned, never, served_times, contradicted = [], [], 0, [], [], []
    by_write: list[tuple[float, float]] = []
    for i in range(len(hosts.old)):
        if math.isnan(hosts.write_end[i]):
            continue
        at, candidates, consistent = probes.served_at(hosts, i, swaps)
        if math.isnan(at):
            never.append(host(i))
            continue
        served.append((at - hosts.write_end[i]) * 1000.0)
        by_write.append((hosts.write_end[i], round(served[-1], 1)))
        raw_ms.append((hosts.first_new[i] - hosts.write_end[i]) * 1000.0)
        pinned += candidates == 1
        served_times.append(at)
        if not consistent:
            contradicted.append(host(i))
    last = max(served_times, default=math.nan)

    def phase(t: float) -> str:
        return "before" if t < t0 else "during" if t <= raw["all_seen"] else "after"

    def dist(ms: list[float]) -> dict[str, float]:
        return {"p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "max_ms": max(ms)} if ms else {}

    by_phase: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for start, seconds in hosts.samples:
        by_phase[phase(start)].append(seconds * 1000.0)
    failures = [
        {"t_ms": round((f["t"] - t0) * 1000.0, 1), "phase": phase(f["t"]), "who": f["who"], "host": host(f["host"]), "error": f["error"]}
        for f in hosts.failures
    ]
    before, after = raw["before"], raw["after"]
    builds = after["twingress_table_build_seconds_count"] - before["twingress_table_build_seconds_count"]
    return {
        "secrets": len(hosts.old),
        "written": len(served) + len(never),
        "write_errors": raw["write_errors"],
        "writes_s": raw["writes_s"],
        "write_to_served": dist(served),
        "write_to_first_new_handshake": dist(raw_ms),
        "served_ms_in_write_order": [ms for _, ms in sorted(by_write)],
        "pinned_to_one_swap": pinned,
        "seen_in_metrics": sum(not math.isnan(t) for t in hosts.metrics_new),
        "contradicted": contradicted,
        "metrics_read_ms": dist([t * 1000.0 for t in raw["metrics_reads"]]),
        "not_served": never,
        "first_write_to_last_served_s": (last - t0) if not math.isnan(last) else None,
        "handshakes": dict(hosts.outcomes),
        "failed": len(failures),
        "failures_by_phase": {p: sum(f["phase"] == p for f in failures) for p in by_phase},
        "failures": failures[:50],
        "old_after_new": sum(v for k, v in hosts.outcomes.items() if k.endswith("old after new")),
        "background_handshake": {p: {"n": len(v), **dist(v)} for p, v in by_phase.items()},
        "rss_mb": {"before": before["VmRSS"], "after": after["VmRSS"], "peak": after["VmHWM"]},
        "twingress_cpu_s": after["cpu_s"] - before["cpu_s"],
        "table_builds": int(builds),
        "build_s": after["twingress_table_build_seconds_sum"] - before["twingress_table_build_seconds_sum"],
        "builds": raw["builds"],
        "swaps": len(swaps),
        "generation_polls": raw["polls"],
        "warnings": raw["warnings"][:20],
        "warning_count": len(raw["warnings"]),
    }


def table(s: dict[str, Any]) -> str:
    """The table: the figures with the targets next to them."""
    setup = s["setup"]
    lines = [f"twingress: {s['secrets']:,} TLS Secrets renewed at once ({s['key_type']} keys)"]
    add = lines.append
    add(f"load average {setup['loadavg_start']} at start, {setup['loadavg_end']} at end")
    add(
        f"setup: control plane {setup['control_plane_s']:.1f} s, Secrets + Ingresses created in {setup['create_s']:.1f} s, "
        f"twingress ready in {setup['ready_s']:.1f} s, every certificate served {setup['served_s']:.1f} s later"
    )
    rate = s["written"] / max(s["writes_s"], 1e-9)
    add(f"writes: {s['written']:,} Secrets replaced in {s['writes_s']:.2f} s ({rate:.0f}/s, {s['threads']} threads), {len(s['write_errors'])} errors")
    add(f"  {'per host, from its write returning':<40}{'p50':>9}{'p99':>9}{'max':>9}   target")
    for label, key in (("new certificate served", "write_to_served"), ("  its first new handshake (probe)", "write_to_first_new_handshake")):
        d = s[key]
        if d:
            met = d["max_ms"] <= TARGET_SERVED_MS and not s["not_served"]
            ok = "" if "probe" in label else f"   all <= {TARGET_SERVED_MS / 1000:.0f} s: " + ("ok" if met else "MISSED")
            add(f"  {label:<40}{d['p50_ms']:>7.0f}ms{d['p99_ms']:>7.0f}ms{d['max_ms']:>7.0f}ms{ok}")
    seen = s["written"] - len(s["not_served"])
    add(f"  hosts whose window held one table swap (known to {s['poll_interval'] * 1000:.0f} ms): {s['pinned_to_one_swap']:,} of {seen:,}")
    add(f"  not served within {s['timeout']:.0f} s: {len(s['not_served'])}")
    m = s["metrics_read_ms"]
    add(
        f"  new certificate loaded per /metrics: {s['seen_in_metrics']:,} hosts ({len(s['contradicted'])} contradicting handshakes); "
        f"/metrics read after each swap: p50 {m.get('p50_ms', 0):.0f} ms, max {m.get('max_ms', 0):.0f} ms"
    )
    last = s["first_write_to_last_served_s"]
    add(f"  first write -> last host serving its new certificate: {'-' if last is None else f'{last:.2f} s'}")
    phases = "/".join(str(v) for v in s["failures_by_phase"].values())
    add(
        f"handshakes: {sum(s['handshakes'].values()):,}, failed {s['failed']} (before/during/after {phases})   "
        f"target 0: {'ok' if not s['failed'] else 'MISSED'}"
    )
    add(f"  old certificate after the new one was seen: {s['old_after_new']}")
    for p, v in s["background_handshake"].items():
        add(f"  background handshakes {p:<7} n={v['n']:<6} p50 {v.get('p50_ms', 0):6.1f} ms  p99 {v.get('p99_ms', 0):7.1f} ms  max {v.get('max_ms', 0):7.1f} ms")
    for f in s["failures"][:5]:
        add(f"  failed at {f['t_ms']:+.0f} ms ({f['who']}, {f['host']}): {f['error'][:100]}")
    builds = ", ".join(f"{b['ms']:.0f}" for b in s["builds"][:12])
    add(f"twingress: {s['table_builds']} table builds in the window ({s['build_s'] * 1000:.0f} ms; each: {builds} ms), {s['swaps']} swaps seen")
    r = s["rss_mb"]
    add(f"  CPU {s['twingress_cpu_s']:.1f} s; RSS {r['before']:.0f} MB before, {r['after']:.0f} MB after ({r['after'] - r['before']:+.1f} MB; peak {r['peak']:.0f} MB)")
    add(f"  {s['warning_count']} warning/error lines logged in the window")
    lines.extend(f"    {w[:160]}" for w in s["warnings"][:5])
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--secrets", type=int, default=1000, help="TLS Secrets, one Ingress and host each (1000)")
    p.add_argument("--key-type", choices=("ec", "rsa"), default="ec", help="leaf keys: ec (P-256) or rsa (2048; slow to make) (ec)")
    p.add_argument("--threads", type=int, default=12, help="threads writing to the apiserver (12)")
    p.add_argument("--probe-rate", type=float, default=80.0, help="background handshakes/s over all hosts (80)")
    p.add_argument("--probe-threads", type=int, default=4, help="background prober threads (4)")
    p.add_argument("--detect-rate", type=float, default=300.0, help="handshakes/s to renewed hosts not yet serving their new certificate (300)")
    p.add_argument("--detect-threads", type=int, default=4, help="detection threads (4)")
    p.add_argument("--poll-interval", type=float, default=0.02, help="seconds between two /readyz polls for table swaps (0.02)")
    p.add_argument("--sample", type=int, default=50, help="hosts whose certificate is checked before the renewal (50)")
    p.add_argument("--before", type=float, default=5.0, help="seconds of probing before the renewal (5)")
    p.add_argument("--after", type=float, default=5.0, help="seconds of probing after the last new certificate is seen (5)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds from the first write after which unseen certificates count as not served (120)")


def check(args: argparse.Namespace) -> str:
    if args.against:
        return "--against: the cluster scenarios measure twingress alone"
    if min(args.secrets, args.threads, args.probe_threads, args.detect_threads) < 1 or min(args.probe_rate, args.detect_rate, args.poll_interval) <= 0:
        return "--secrets and the thread counts at least 1, the rates and --poll-interval above 0"
    return cluster.missing()


def run(run: Run) -> list[dict[str, Any]]:
    args = run.args
    setup: dict[str, Any] = {"loadavg_start": cluster.loadavg()}
    kube = cluster.start_control_plane(run.children)
    setup["control_plane_s"] = kube.startup_seconds["total"]
    log(f"control plane up in {setup['control_plane_s']:.1f} s; making {2 * args.secrets} {args.key_type} certificates")
    cluster.start_echo(run.children, "echo", ECHO_ADDRESS)
    pool = concurrent.futures.ThreadPoolExecutor(args.threads)  # kept: each thread keeps its API client
    run.children.stack.callback(pool.shutdown, cancel_futures=True)
    ca = certs.CertificateAuthority("twingress renewal", key_type="ec")
    old_secrets, old_sha, _ = leaf_secrets(ca, args.secrets, args.key_type, 60)
    new_secrets, new_sha, new_not_after = leaf_secrets(ca, args.secrets, args.key_type, 61)
    api = Api(kube.kubeconfig)
    setup["create_s"] = create_world(api, pool, old_secrets)
    log(f"{args.secrets} Secrets and Ingresses created in {setup['create_s']:.1f} s")
    https_port = procs.free_port()
    extra = ["--https", f"tcp:{https_port}:interface=127.0.0.1", "--access-log", "off", "--shutdown-delay", "0"]
    tw = Twingress(run.children, kube.kubeconfig, args.workers, run.proxy_cpus, extra_args=extra)
    setup["ready_s"] = tw.wait_ready(300.0)
    setup["served_s"] = wait_served(tw, Prober(tw.http_port, https_port), old_sha, args.sample)
    log(f"twingress ready in {setup['ready_s']:.1f} s, every certificate served {setup['served_s']:.1f} s later")
    hosts = probes.Hosts(old_sha, new_sha, new_not_after)
    raw = renew(args, api, pool, tw, https_port, hosts, new_secrets)
    setup["loadavg_end"] = cluster.loadavg()
    figure = {**summarize(args, hosts, raw), "setup": setup, "key_type": args.key_type, "threads": args.threads,
              "poll_interval": args.poll_interval, "timeout": args.timeout, "table_swaps": raw["swaps"]}
    if figure["write_errors"]:
        run.failures.append(f"{len(figure['write_errors'])} Secret writes failed: {figure['write_errors'][0]}")
    return [figure]


def lines(document: dict[str, Any]) -> list[str]:
    return [line for figure in document["figures"] for line in table(figure).splitlines()]
