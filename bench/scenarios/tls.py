"""
TLS: twingress beside nginx serving the same ECDSA P-256 certificate, each in turn on the proxy
CPUs: full handshakes a second (bench/lib/handshakes.py: connect, handshake with SNI, close, never
a session to resume) and keep-alive HTTPS/1.1 req/s (wrk), each with CPU per handshake or request
of the proxy's process group.  Then SNI selection: twingress with one certificate and twingress
with C{--sni-certs} more (h0 ... hN-1.bench.local), both up, their full handshakes to the middle
host measured in A B B A rounds so that the guest's drift falls on both: the ratio many / one.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from bench.lib import cpu, handshakes, procs, site, wrk
from bench.lib.load import HOST, SNI
from bench.scenarios import Run

NAME = "tls"
QUESTION = "How many full TLS handshakes per second, keep-alive HTTPS req/s, and SNI selection with 10,000 certificates, beside nginx?"
TOOLS = ("wrk", "nginx")
AGAINST = ("nginx",)
BODY = b"hello world\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=int, default=10, help="measured seconds per test (10)")
    p.add_argument("--warmup", type=int, default=3, help="seconds of load before each measured one (3)")
    p.add_argument("--connections", type=int, default=32, help="wrk -c for keep-alive HTTPS (32)")
    p.add_argument("--handshake-clients", type=int, default=4, help="processes doing handshakes one after another (4)")
    p.add_argument("--tls", choices=sorted(handshakes.VERSIONS), help="pin the handshakes' TLS version (what both agree: 1.3)")
    p.add_argument("--sni-certs", type=int, default=10_000, help="certificates of the big SNI instance (10000); 0: no SNI test")
    p.add_argument("--sni-rounds", type=int, default=2, help="measurements of each SNI instance, A B B A (2)")
    p.add_argument("--load-timeout", type=float, default=600.0, help="seconds for twingress to load the big certificate table (600)")


def check(args: argparse.Namespace) -> str:
    if any(a not in AGAINST for a in args.against):
        return f"--against: only {', '.join(AGAINST)} (nginx always runs: the ratio is to it)"
    if args.seconds < 1 or args.warmup < 0 or args.connections < 1 or args.handshake_clients < 1 or args.sni_rounds < 1:
        return "--seconds, --connections, --handshake-clients and --sni-rounds at least 1, --warmup at least 0"
    return "--sni-certs 0 or at least 2" if args.sni_certs == 1 or args.sni_certs < 0 else ""


def certificate_sha(conn: Any) -> str:
    return hashlib.sha256(conn.getpeercert(binary_form=True) or b"").hexdigest()


def https_get(port: int, sni: str, host: str) -> tuple[int, bytes, str]:
    """GET / (Host: C{host}) over a fresh TLS connection with SNI C{sni}: (status, body, the served certificate's SHA-256)."""
    conn = handshakes.handshake(handshakes.client_context(None), port, sni, timeout=3.0)
    try:
        conn.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        response = http.client.HTTPResponse(conn)
        response.begin()
        return response.status, response.read(), certificate_sha(conn)
    finally:
        conn.close()


def served(run: Run, proc: procs.Proc, port: int, checks: dict[str, str], host: Optional[str] = None) -> None:
    """Until each SNI name of C{checks} gets its certificate (SHA-256) and GET / answers 200 the backend's body."""
    deadline, last = time.monotonic() + run.args.start_timeout, "no answer"
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise procs.BenchFailed(f"{proc.name} exited with code {proc.popen.returncode}:\n{proc.tail()}")
        try:
            for sni, sha in checks.items():
                status, body, got = https_get(port, sni, host or sni)
                if got != sha or status != 200 or body != BODY:
                    raise ValueError(f"SNI {sni}: certificate {got[:16]} (ours {sha[:16]}), HTTP {status} {body[:100]!r}")
            return
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    raise procs.BenchFailed(f"{proc.name} did not serve the right certificate and body within {run.args.start_timeout:.0f} s "
                            f"(last: {last}):\n{proc.tail()}")


def full_handshakes(run: Run, proc: procs.Proc, port: int, sni: str, seconds: int) -> dict[str, Any]:
    """C{seconds} of full handshakes to C{sni}: the client's totals and the proxy's CPU per handshake."""
    args = run.args
    before = cpu.group_user_system(proc.pid)
    got = handshakes.measure(port, sni, seconds, args.handshake_clients, run.load_cpus, args.tls)
    used = sum(cpu.group_user_system(proc.pid)) - sum(before)
    if got["errors"] or not got["handshakes"]:
        raise procs.BenchFailed(f"{proc.name}: {got['errors']} failed handshakes ({got['handshakes']} good): {got['error_samples']}")
    if got["negotiated"] and got["negotiated"]["session_reused"]:
        raise procs.BenchFailed(f"{proc.name}: a session was resumed; the test is of full handshakes")
    return {"rate": got["rate"], "handshakes": got["handshakes"], "seconds": got["seconds"], "negotiated": got["negotiated"],
            "cpu_us": round(1e6 * used / got["handshakes"], 1)}


def keepalive(run: Run, proc: procs.Proc, port: int) -> dict[str, Any]:
    args = run.args
    url = f"https://{SNI}:{port}/"  # wrk sends the URL's host as SNI: the certificate covers it
    warm = wrk.run(url, HOST, args.warmup, args.connections, run.load_cpus).errors if args.warmup else 0
    before = cpu.group_user_system(proc.pid)
    result = wrk.run(url, HOST, args.seconds, args.connections, run.load_cpus)
    used = sum(cpu.group_user_system(proc.pid)) - sum(before)
    if result.errors or warm:
        raise procs.BenchFailed(f"{proc.name}: {result.non_2xx} non-2xx, socket errors {result.socket_errors}, {warm} in the warm-up")
    return {"rps": round(result.rps), "p50_ms": result.percentiles_ms["50"], "p99_ms": result.percentiles_ms["99"],
            "cpu_us": round(1e6 * used / max(result.requests, 1), 2)}


def rss_mib(pid: int) -> Optional[float]:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def proxy_row(run: Run, name: str, backends: site.Backends, sha: str) -> dict[str, Any]:
    """nginx or twingress with the bench certificate: full handshakes, then keep-alive HTTPS."""
    if name == "nginx":
        listening = site.nginx(run.children, name, backends, run.proxy_cpus, run.args.workers)
    else:
        listening = site.twingress(run.children, name, site.Checkout(site.REPO), backends, run.proxy_cpus, run.args.workers)
    try:
        proc, port = listening.proc, listening.https_port
        served(run, proc, port, {SNI: sha}, HOST)
        if run.args.warmup:
            full_handshakes(run, proc, port, HOST, run.args.warmup)
        row = {"target": name, "handshakes": full_handshakes(run, proc, port, HOST, run.args.seconds),
               "keepalive": keepalive(run, proc, port)}
        return row | {"rss_mib": rss_mib(proc.pid)}
    finally:
        procs.stop(listening.proc)


# --- SNI selection ----------------------------------------------------------------------

def sni_manifests(count: int, key: Any) -> tuple[str, dict[str, str]]:
    """C{count} Secrets and Ingresses (h0 ... hN-1.bench.local, one key for all: the same handshake cost) as one v1 List:
    (its JSON, the SHA-256 of the certificates of the first, middle and last host)."""
    from bench.lib.site import self_signed
    items, checks = [], {}
    for i in range(count):
        host = f"h{i}.bench.local"
        cert_pem, key_pem, der = self_signed(key, [host])
        items += [{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"namespace": "default", "name": f"tls-h{i}"},
                   "stringData": {"tls.crt": cert_pem.decode(), "tls.key": key_pem.decode()}},
                  {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"namespace": "default", "name": f"h{i}"},
                   "spec": {"ingressClassName": "twingress", "tls": [{"hosts": [host], "secretName": f"tls-h{i}"}],
                            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                                         "backend": {"service": {"name": "bench", "port": {"number": 80}}}}]}}]}}]
        if i in (0, count // 2, count - 1):
            checks[host] = hashlib.sha256(der).hexdigest()
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), checks


def admin_json(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return int(r.status), json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None


def table_loaded(proc: procs.Proc, admin_port: int, certificates: int, timeout: float) -> float:
    """Seconds until /readyz answers 200 and /debug/routes lists at least C{certificates} certificates (or L{BenchFailed})."""
    began, last = time.monotonic(), "no answer"
    while time.monotonic() < began + timeout:
        if proc.popen.poll() is not None:
            raise procs.BenchFailed(f"{proc.name} exited with code {proc.popen.returncode}:\n{proc.tail()}")
        try:
            status, _ = admin_json(admin_port, "/readyz")
            if status == 200:
                count = len(admin_json(admin_port, "/debug/routes")[1]["certificates"])
                if count >= certificates:
                    return time.monotonic() - began
                last = f"ready, {count} certificates"
            else:
                last = f"/readyz {status}"
        except (OSError, ValueError, KeyError, TypeError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(1.0)
    raise procs.BenchFailed(f"{proc.name}: fewer than {certificates} certificates after {timeout:.0f} s (last: {last}):\n{proc.tail()}")


def sni_instance(run: Run, count: int, backends: site.Backends) -> tuple[dict[str, Any], site.Listening]:
    """twingress with C{count} more certificates than the bench's own, loaded and checked."""
    from cryptography.hazmat.primitives.asymmetric import ec
    began = time.monotonic()
    text, checks = sni_manifests(count, ec.generate_private_key(ec.SECP256R1()))
    info: dict[str, Any] = {"certificates": count, "generate_seconds": round(time.monotonic() - began, 1),
                            "manifests_mib": round(len(text) / 2**20, 1)}
    admin_port = procs.free_port()
    name = f"twingress-{count}-cert{'s' if count > 1 else ''}"
    run.say(f"==> {name}: {count} Secrets and Ingresses generated in {info['generate_seconds']} s, starting twingress")
    listening = site.twingress(run.children, name, site.Checkout(site.REPO), backends, run.proxy_cpus, run.args.workers,
                               ["--admin", f"tcp:{admin_port}:interface=127.0.0.1"], more_manifests={"sni.json": text})
    info["table_live_seconds"] = round(table_loaded(listening.proc, admin_port, count, run.args.load_timeout), 1)
    served(run, listening.proc, listening.https_port, checks)
    info["rss_mib"] = rss_mib(listening.proc.pid)
    return info | {"target": name}, listening


def sni_row(run: Run, backends: site.Backends) -> dict[str, Any]:
    """Both instances up; full handshakes to the big one's middle host, A B B A; the ratio of their rates."""
    count, middle = run.args.sni_certs, f"h{run.args.sni_certs // 2}.bench.local"
    one, small = sni_instance(run, 1, backends)
    try:
        many, big = sni_instance(run, count, backends)
        try:
            started = [(one, small, "h0.bench.local"), (many, big, middle)]
            rounds: dict[str, list[dict[str, Any]]] = {one["target"]: [], many["target"]: []}
            for i in ([0, 1, 1, 0] * run.args.sni_rounds)[:2 * run.args.sni_rounds]:
                info, listening, host = started[i]
                rounds[info["target"]].append(full_handshakes(run, listening.proc, listening.https_port, host, run.args.seconds))
            for info, _listening, host in started:
                parts = rounds[info["target"]]
                total, seconds = sum(h["handshakes"] for h in parts), sum(h["seconds"] for h in parts)
                info |= {"sni": host, "rate": round(total / seconds, 1), "rounds": [h["rate"] for h in parts],
                         "cpu_us": round(sum(h["cpu_us"] * h["handshakes"] for h in parts) / total, 1)}
        finally:
            procs.stop(big.proc)
    finally:
        procs.stop(small.proc)
    return {"target": "sni", "one": one, "many": many, "ratio_many_to_one": round(many["rate"] / one["rate"], 3)}


def run(run: Run) -> list[dict[str, Any]]:
    backends = site.start_backends(run.children, run.load_cpus)
    sha = hashlib.sha256(der(backends)).hexdigest()
    rows = []
    for name in ("nginx", "twingress"):
        try:
            rows.append(proxy_row(run, name, backends, sha))
        except procs.BenchFailed as e:
            run.failed(f"{name}", e)
            continue
        run.say(line(rows[-1]))
    if run.args.sni_certs:
        try:
            rows.append(sni_row(run, backends))
            run.say(line(rows[-1]))
        except procs.BenchFailed as e:
            run.failed("SNI", e)
    by = {row["target"]: row for row in rows}
    if "nginx" in by and "twingress" in by:
        for row, part, key in ((by["twingress"], "handshakes", "rate"), (by["twingress"], "keepalive", "rps")):
            row[part]["ratio_to_nginx"] = round(row[part][key] / by["nginx"][part][key], 3)
    return rows


def der(backends: site.Backends) -> bytes:
    """The bench certificate's DER (what a client's SHA-256 of the served certificate is checked against)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    return x509.load_pem_x509_certificate(backends.cert.read_bytes()).public_bytes(Encoding.DER)


def line(row: dict[str, Any]) -> str:
    if row["target"] == "sni":
        one, many = row["one"], row["many"]
        return (f"SNI        {one['rate']:>8,.0f} handshakes/s with 1 certificate, {many['rate']:,.0f} with {many['certificates']:,} "
                f"(ratio {row['ratio_many_to_one']:.3f}; table live in {many['table_live_seconds']} s, {many['rss_mib']} MiB)")
    h, k = row["handshakes"], row["keepalive"]
    ratio = lambda part: f" ({part['ratio_to_nginx']:.2f}x nginx)" if "ratio_to_nginx" in part else ""  # noqa: E731
    return (f"{row['target']:<10} {h['rate']:>8,.0f} full handshakes/s{ratio(h)}, {h['cpu_us']:.0f} us CPU each "
            f"({(h['negotiated'] or {}).get('version', '?')}); keep-alive HTTPS {k['rps']:,} req/s{ratio(k)}, "
            f"p99 {k['p99_ms']:.2f} ms, {k['cpu_us']:.1f} us CPU per request")


def lines(document: dict[str, Any]) -> list[str]:
    return [line(row) for row in document["figures"]]
