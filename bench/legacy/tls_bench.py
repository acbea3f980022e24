#!/usr/bin/env python3
"""
TLS benchmark: twingress's full handshakes/s and keep-alive HTTPS req/s as a ratio to
nginx serving the same certificate, measured in the same run; and SNI selection with
1 vs 10,000 certificates loaded.

One nginx backend answers C{200 "hello world\\n"} (the HTTP bench's).  In turn, and never
at the same time: an nginx TLS reverse proxy and twingress (C{--https}), each pinned to
the proxy CPU, the load generators and the backend to the other CPU.  Then twingress
twice more, with the one certificate of h5000.bench.local and with 10,000 certificates
(h0 ... h9999.bench.local), for full handshakes/s with SNI h5000.bench.local.
See bench/README.md.

Run with the project venv::

    .venv/bin/python -m bench tls [--duration 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # ingress, for its cipher list

import cpuload  # noqa: E402
import procs  # noqa: E402
import targets  # noqa: E402
import wrk  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402
from harness import Harness, install_signal_handlers, twingress_env  # noqa: E402
from report import IDLE_LIMIT, environment  # noqa: E402

from bench.lib import handshakes as tls_handshakes  # noqa: E402

NGINX_TLS, TWINGRESS = "nginx-tls", "twingress"
# wrk sends the URL's host as SNI and cannot be told otherwise: it connects to
# https://localhost:PORT/ (Host: bench.local), and the certificate covers both names,
# so both proxies select the bench certificate for it.
WRK_SNI = "localhost"
SECRET = "bench-tls"
SNI_HOST = "h5000.bench.local"
TWINGRESS_TLS_CMD = (
    "{venv_bin}/twistd --pidfile= -n ingress --manifests {manifests} --http ''"
    " --https tcp:{port}:interface=127.0.0.1 --admin tcp:{admin_port}:interface=127.0.0.1"
)


class BenchFailed(RuntimeError):
    """The harness cannot go on, or a target answered wrongly."""


# --- certificates and configs -----------------------------------------------------------

@dataclass
class Cert:
    cert_pem: bytes
    key_pem: bytes
    sha256: str  # of the DER, as tls_handshakes.describe reports the served one


def make_key(kind: str) -> Any:
    return ec.generate_private_key(ec.SECP256R1()) if kind == "ecdsa" else \
        rsa.generate_private_key(public_exponent=65537, key_size=2048)


def make_cert(key: Any, hosts: Sequence[str]) -> Cert:
    """A self-signed certificate for C{hosts} (CN = the first), valid for a day."""
    import hashlib
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    der = cert.public_bytes(serialization.Encoding.DER)
    return Cert(cert.public_bytes(serialization.Encoding.PEM), key_pem,
                hashlib.sha256(der).hexdigest())


def nginx_tls_conf(workdir: Path, port: int, backend_port: int, cert: Path, key: Path) -> str:
    """The HTTP bench's reference proxy (upstream keep-alive and all), listening with TLS."""
    plain = targets.proxy_conf(workdir, port, backend_port).replace(
        "nginx-proxy.pid", f"{NGINX_TLS}.pid").replace("nginx-proxy-tmp", f"{NGINX_TLS}-tmp")
    listen = f"listen 127.0.0.1:{port} backlog=4096;"
    if listen not in plain:
        raise BenchFailed(f"targets.proxy_conf changed: no {listen!r} to add TLS to")
    from ingress.proxy.tls.termination import MODERN_CIPHERS  # the same TLS 1.2 suites as twingress
    return plain.replace(listen, f"""listen 127.0.0.1:{port} ssl backlog=4096;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {MODERN_CIPHERS};
        ssl_prefer_server_ciphers on;
        ssl_session_cache off;
        ssl_session_tickets off;""")


def secret(name: str, cert: Cert) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"namespace": targets.NAMESPACE, "name": name},
            "stringData": {"tls.crt": cert.cert_pem.decode(), "tls.key": cert.key_pem.decode()}}


def tls_ingress(name: str, hosts: Sequence[str], secret_name: str) -> dict[str, Any]:
    """An Ingress routing C{hosts[0]} / to the bench Service, with C{hosts} on C{secret_name}."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"namespace": targets.NAMESPACE, "name": name},
            "spec": {"ingressClassName": "twingress",
                     "tls": [{"hosts": list(hosts), "secretName": secret_name}],
                     "rules": [{"host": hosts[0], "http": {"paths": [{
                         "path": "/", "pathType": "Prefix",
                         "backend": {"service": {"name": targets.SERVICE,
                                                 "port": {"number": 80}}}}]}}]}}


def write_manifests(directory: Path, backend_port: int, extra: list[dict[str, Any]],
                    with_bench_ingress: bool) -> None:
    """The HTTP bench's Service/EndpointSlice/IngressClass, plus C{extra} as one v1 List file."""
    directory.mkdir(parents=True, exist_ok=True)
    base = targets.manifests(backend_port)
    if not with_bench_ingress:
        del base["ingress.yaml"]
    items = list(base.values()) + extra
    (directory / "all.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                    "items": items}))


# --- results ----------------------------------------------------------------------------

@dataclass
class Handshakes:
    rate: float
    handshakes: int
    seconds: float
    errors: int
    negotiated: Optional[dict[str, Any]]
    cpu_busy: dict[str, float]
    target_cpu_seconds: float
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def cpu_us_per_handshake(self) -> Optional[float]:
        return round(1e6 * self.target_cpu_seconds / self.handshakes, 1) if self.handshakes else None


@dataclass
class Keepalive:
    result: wrk.WrkResult
    warmup_errors: int
    cpu_busy: dict[str, float]
    target_cpu_seconds: float


@dataclass
class Target:
    name: str
    handshakes: Optional[Handshakes] = None
    keepalive: Optional[Keepalive] = None
    info: dict[str, Any] = field(default_factory=dict)
    failure: Optional[str] = None


# --- the run ----------------------------------------------------------------------------

def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per test (10)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per test (3)")
    p.add_argument("--connections", type=int, default=32, help="wrk -c (32)")
    p.add_argument("--threads", type=int, default=1, help="wrk -t (1)")
    p.add_argument("--handshake-clients", type=int, default=4,
                   help="parallel handshake processes (4)")
    p.add_argument("--tls", choices=sorted(tls_handshakes.VERSIONS),
                   help="pin the handshake test's TLS version (default: what both agree, 1.3)")
    p.add_argument("--key", choices=("ecdsa", "rsa"), default="ecdsa",
                   help="certificate key: ECDSA P-256 or RSA-2048 (ecdsa)")
    p.add_argument("--sni-certs", type=int, default=10_000,
                   help="certificates in the big SNI run (10000); 0 skips the SNI test")
    p.add_argument("--annotation", action="append", default=[], metavar="KEY=VALUE",
                   help="an annotation on twingress's bench Ingress, to measure a policy over TLS (repeatable); "
                        "{ca_secret} in a value names a Secret whose ca.crt is the bench certificate "
                        "(auth-tls-secret={ca_secret} with auth-tls-verify-client=optional: wrk sends no certificate)")
    p.add_argument("--sni-rounds", type=int, default=2,
                   help="measurements of each SNI instance, alternated A B B A (2)")
    p.add_argument("--proxy-cpu", type=int, default=0, help="CPU for the proxy under test (0)")
    p.add_argument("--load-cpu", type=int, default=1, help="CPU for backend and load (1)")
    p.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    p.add_argument("--start-timeout", type=float, default=20.0,
                   help="seconds to listen and answer correctly (20)")
    p.add_argument("--load-timeout", type=float, default=600.0,
                   help="seconds for twingress to load the big certificate table (600)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    p.add_argument("--keep-logs", action="store_true",
                   help="copy the process logs and configs next to --json (or the cwd)")
    args = p.parse_args(argv)
    if args.duration < 1 or args.warmup < 0 or args.connections < args.threads:
        p.error("need --duration >= 1, --warmup >= 0 and --connections >= --threads")
    if args.sni_rounds < 1:
        p.error("--sni-rounds must be at least 1")
    if args.sni_certs and not 5001 <= args.sni_certs:
        p.error("--sni-certs must be 0 or at least 5001 (the test host is h5000)")
    return args


def check_environment(args: argparse.Namespace) -> None:
    missing = [t for t in (args.nginx, "wrk", "taskset") if not shutil.which(t)]
    if missing:
        raise BenchFailed(f"missing {', '.join(missing)}: run bench/setup.sh")
    if not {args.proxy_cpu, args.load_cpu} <= os.sched_getaffinity(0) \
            or args.proxy_cpu == args.load_cpu:
        raise BenchFailed("need two distinct usable CPUs for --proxy-cpu and --load-cpu")


def https_get(port: int, sni: str, host: str = targets.HOST) -> tuple[int, bytes, dict[str, Any]]:
    """GET / (Host: C{host}) over a fresh TLS connection with SNI C{sni}."""
    ctx = tls_handshakes.client_context(None)
    conn = tls_handshakes.handshake(ctx, port, sni, timeout=3.0)
    try:
        info = tls_handshakes.describe(conn)
        conn.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                     .encode())
        response = http.client.HTTPResponse(conn)
        response.begin()
        return response.status, response.read(), info
    finally:
        conn.close()


def wait_until_served(proc: procs.Proc, port: int, checks: dict[str, str], timeout: float,
                      body: bool = True) -> dict[str, Any]:
    """Poll until every SNI name in C{checks} gets its certificate (and, if C{body}, 200 BODY)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise procs.StartError(f"{proc.name} exited with code {proc.popen.returncode}; "
                                   f"its output:\n{proc.tail()}")
        seen: dict[str, Any] = {}
        try:
            for sni, sha in checks.items():
                if body:
                    status, data, info = https_get(port, sni)
                else:
                    conn = tls_handshakes.handshake(tls_handshakes.client_context(None), port, sni)
                    info, status, data = tls_handshakes.describe(conn), 200, targets.BODY
                    conn.close()
                if info["cert_sha256"] != sha:
                    raise ValueError(f"SNI {sni}: served certificate {info['cert_sha256'][:16]} "
                                     f"is not ours ({sha[:16]})")
                if status != 200 or data != targets.BODY:
                    raise ValueError(f"SNI {sni}: HTTP {status} {data[:200]!r}")
                seen[sni] = info
            return seen
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    raise procs.StartError(f"{proc.name} on 127.0.0.1:{port} did not serve the right certificate "
                           f"and body within {timeout:.0f} s (last: {last}); its output:\n"
                           f"{proc.tail()}")


def admin_json(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_for_table(proc: procs.Proc, admin_port: int, certificates: int, timeout: float) -> float:
    """Wait for /readyz and for /debug/routes to list C{certificates} hosts; seconds it took."""
    began = time.monotonic()
    deadline = began + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise procs.StartError(f"{proc.name} exited with code {proc.popen.returncode}; "
                                   f"its output:\n{proc.tail()}")
        try:
            status, ready = admin_json(admin_port, "/readyz")
            if status == 200:
                _, routes = admin_json(admin_port, "/debug/routes")
                count = len(routes["certificates"])
                if count == certificates:
                    return time.monotonic() - began
                last = f"ready, {count} certificates, problems {routes['problems'][:3]}"
            else:
                last = f"/readyz {status} {ready}"
        except (OSError, ValueError, KeyError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(1.0)
    raise procs.StartError(f"{proc.name}: the table did not reach {certificates} certificates "
                           f"within {timeout:.0f} s (last: {last}); its output:\n{proc.tail()}")


def rss_mib(pid: int) -> Optional[float]:
    """Resident memory of the process (the child of taskset is exec'd in place)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


class Bench(Harness):
    """The TLS comparison: handshakes and keep-alive HTTPS against nginx, SNI with 1 vs 10k certificates."""

    def __init__(self, args: argparse.Namespace, stack: ExitStack, workdir: Path) -> None:
        super().__init__(args, stack, workdir)
        self.cpus = [args.proxy_cpu, args.load_cpu]

    # processes

    def twingress(self, name: str, manifests: Path, port: int, admin_port: int, extra: Sequence[str] = ()) -> procs.Proc:
        """twingress serving C{manifests} over TLS on C{port}, with C{extra} options after the command's."""
        argv = [a.replace("{admin_port}", str(admin_port)) for a in targets.twingress_argv(
            TWINGRESS_TLS_CMD.replace("{admin_port}", "{{admin_port}}"),
            Path(sys.prefix) / "bin", manifests, port, 0)] + list(extra)
        env = twingress_env()
        return self.spawn(name, argv, port, self.args.proxy_cpu, env=env)

    # measurements

    def handshakes(self, proc: procs.Proc, port: int, sni: str, seconds: int) -> Handshakes:
        argv = ["taskset", "-c", str(self.args.load_cpu), sys.executable,
                str(Path(__file__).resolve().parent / "tls_handshakes.py"),
                "--port", str(port), "--sni", sni, "--seconds", str(seconds),
                "--clients", str(self.args.handshake_clients)]
        if self.args.tls:
            argv += ["--tls", self.args.tls]
        before, used = cpuload.cpu_times(), cpuload.group_cpu_seconds(proc.pid)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 90)
        busy = cpuload.busy_percent(before, cpuload.cpu_times(), self.cpus)
        used = round(cpuload.group_cpu_seconds(proc.pid) - used, 2)
        if done.returncode != 0:
            raise BenchFailed(f"the handshake client failed ({done.returncode}):\n"
                              f"{done.stdout}{done.stderr}")
        raw = json.loads(done.stdout)
        return Handshakes(raw["rate"], raw["handshakes"], raw["seconds"], raw["errors"],
                          raw["negotiated"], busy, used, raw)

    def measure_handshakes(self, proc: procs.Proc, port: int, sni: str, label: str) -> Handshakes:
        print(f"==> {label}: full handshakes, SNI {sni}: warm-up {self.args.warmup} s, "
              f"measuring {self.args.duration} s", flush=True)
        if self.args.warmup:
            warm = self.handshakes(proc, port, sni, self.args.warmup)
            if warm.errors:
                raise BenchFailed(f"{label}: {warm.errors} failed handshakes during warm-up: "
                                  f"{warm.raw['error_samples']}")
        result = self.handshakes(proc, port, sni, self.args.duration)
        if result.errors or not result.handshakes:
            raise BenchFailed(f"{label}: {result.errors} failed handshakes "
                              f"({result.handshakes} good): {result.raw['error_samples']}")
        if result.negotiated and result.negotiated["session_reused"]:
            raise BenchFailed(f"{label}: a session was resumed; the test must be full handshakes")
        if proc.popen.poll() is not None:
            raise BenchFailed(f"{proc.name} exited during the run:\n{proc.tail()}")
        return result

    def measure_keepalive(self, proc: procs.Proc, port: int, label: str) -> Keepalive:
        print(f"==> {label}: keep-alive HTTPS, wrk -c{self.args.connections}: warm-up "
              f"{self.args.warmup} s, measuring {self.args.duration} s", flush=True)
        url = f"https://{WRK_SNI}:{port}/"
        warm_errors = 0
        if self.args.warmup:
            warm_errors = wrk.run(url, targets.HOST, self.args.warmup, self.args.connections,
                                  self.args.threads, self.args.load_cpu)[0].errors
        before, used = cpuload.cpu_times(), cpuload.group_cpu_seconds(proc.pid)
        result, _ = wrk.run(url, targets.HOST, self.args.duration, self.args.connections,
                            self.args.threads, self.args.load_cpu)
        busy = cpuload.busy_percent(before, cpuload.cpu_times(), self.cpus)
        used = round(cpuload.group_cpu_seconds(proc.pid) - used, 2)
        if proc.popen.poll() is not None:
            raise BenchFailed(f"{proc.name} exited during the run:\n{proc.tail()}")
        return Keepalive(result, warm_errors, busy, used)

    def proxy_target(self, name: str, cert: Cert, backend_port: int) -> Target:
        """nginx-tls or twingress with the bench certificate: handshakes, then keep-alive."""
        target = Target(name)
        port = procs.free_port()
        try:
            if name == NGINX_TLS:
                conf = nginx_tls_conf(self.workdir, port, backend_port,
                                      self.workdir / "bench.crt", self.workdir / "bench.key")
                proc = self.nginx(NGINX_TLS, conf, port, self.args.proxy_cpu)
            else:
                manifests = self.workdir / "manifests-bench"
                ca = secret(f"{SECRET}-ca", cert)
                ca["stringData"]["ca.crt"] = ca["stringData"]["tls.crt"]
                write_manifests(manifests, backend_port, [secret(SECRET, cert), ca], True)
                objects = json.loads((manifests / "all.json").read_text())["items"]
                ingress = next(o for o in objects if o["kind"] == "Ingress")
                ingress["spec"]["tls"] = [{"hosts": [targets.HOST, WRK_SNI],
                                           "secretName": SECRET}]
                annotations = dict(item.split("=", 1) for item in self.args.annotation)
                ca_ref = f"{targets.NAMESPACE}/{SECRET}-ca"
                ingress["metadata"]["annotations"] = {k: v.replace("{ca_secret}", ca_ref) for k, v in annotations.items()}
                (manifests / "all.json").write_text(json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": objects}))
                admin_port = procs.free_port()
                proc = self.twingress(TWINGRESS, manifests, port, admin_port)
                wait_for_table(proc, admin_port, 2, self.args.start_timeout)
            try:
                seen = wait_until_served(proc, port, {targets.HOST: cert.sha256,
                                                      WRK_SNI: cert.sha256},
                                         self.args.start_timeout)
                target.info["check"] = seen[targets.HOST]
                target.handshakes = self.measure_handshakes(proc, port, targets.HOST, name)
                target.keepalive = self.measure_keepalive(proc, port, name)
                target.info["rss_mib"] = rss_mib(proc.pid)
            finally:
                procs.stop(proc)
        except (procs.StartError, wrk.WrkError, BenchFailed, subprocess.TimeoutExpired) as e:
            target.failure = str(e)
        return target

    def sni_start(self, count: int, backend_port: int) -> tuple[Target, procs.Proc, int]:
        """twingress with C{count} certificates (1: only h5000's), loaded and checked."""
        label = f"twingress-{count}-cert{'s' if count > 1 else ''}"
        target = Target(label)
        indices = [5000] if count == 1 else list(range(count))
        began = time.monotonic()
        key = make_key(self.args.key)  # one key for all: the same handshake cost
        extra, checks = [], {}
        for i in indices:
            host = f"h{i}.bench.local"
            cert = make_cert(key, [host])
            extra += [secret(f"tls-h{i}", cert), tls_ingress(f"h{i}", [host], f"tls-h{i}")]
            if i in (0, 5000, count - 1):
                checks[host] = cert.sha256
        target.info["generate_seconds"] = round(time.monotonic() - began, 1)
        manifests = self.workdir / f"manifests-{count}"
        write_manifests(manifests, backend_port, extra, False)
        target.info["manifests_mib"] = round((manifests / "all.json").stat().st_size / 2**20, 1)
        port, admin_port = procs.free_port(), procs.free_port()
        print(f"==> {label}: {len(indices)} Secrets + Ingresses generated in "
              f"{target.info['generate_seconds']} s, starting twingress", flush=True)
        proc = self.twingress(label, manifests, port, admin_port)
        target.info["table_live_seconds"] = round(
            wait_for_table(proc, admin_port, count, self.args.load_timeout), 1)
        target.info["check"] = wait_until_served(proc, port, checks, self.args.start_timeout,
                                                 body=False)
        target.info["check_hosts"] = sorted(checks)
        target.info["rss_mib_loaded"] = rss_mib(proc.pid)
        return target, proc, port

    def sni_run(self, backend_port: int) -> list[Target]:
        """Both twingress instances up (idle one waits), measured in A B B A order to cancel drift."""
        started: list[tuple[Target, procs.Proc, int]] = []
        try:
            for count in (1, self.args.sni_certs):
                started.append(self.sni_start(count, backend_port))
            rounds: dict[str, list[Handshakes]] = {t.name: [] for t, _, _ in started}
            order = [0, 1, 1, 0] * ((self.args.sni_rounds + 1) // 2)
            for n, i in enumerate(order[:2 * self.args.sni_rounds]):
                target, proc, port = started[i]
                rounds[target.name].append(self.measure_handshakes(
                    proc, port, SNI_HOST, f"{target.name} (round {n // 2 + 1})"))
            for target, proc, port in started:
                status, data, _ = https_get(port, SNI_HOST, SNI_HOST)  # still routing
                if status != 200 or data != targets.BODY:
                    raise BenchFailed(f"{target.name}: GET / after the run: HTTP {status} "
                                      f"{data[:100]!r}")
                if proc.popen.poll() is not None:
                    raise BenchFailed(f"{proc.name} exited during the run:\n{proc.tail()}")
                parts = rounds[target.name]
                target.info["rounds_per_second"] = [h.rate for h in parts]
                total, secs = sum(h.handshakes for h in parts), sum(h.seconds for h in parts)
                target.handshakes = Handshakes(
                    round(total / secs, 1), total, round(secs, 3), 0, parts[0].negotiated,
                    {k: round(sum(h.cpu_busy[k] for h in parts) / len(parts), 1)
                     for k in parts[0].cpu_busy},
                    round(sum(h.target_cpu_seconds for h in parts), 2),
                    {"handshakes": total, "seconds": round(secs, 3), "rate": round(total / secs, 1),
                     "errors": 0, "rounds": [h.raw for h in parts]})
            return [t for t, _, _ in started]
        except (procs.StartError, BenchFailed, subprocess.TimeoutExpired, OSError,
                http.client.HTTPException) as e:
            failed = [t for t, _, _ in started] or [Target("twingress-sni")]
            failed[-1].failure = str(e)
            return failed
        finally:
            for _, proc, _ in started:
                procs.stop(proc)

    def run(self) -> tuple[list[Target], list[Target]]:
        key = make_key(self.args.key)
        cert = make_cert(key, [targets.HOST, WRK_SNI])
        (self.workdir / "bench.crt").write_bytes(cert.cert_pem)
        (self.workdir / "bench.key").write_bytes(cert.key_pem)
        backend_port = procs.free_port()
        backend = self.nginx("backend", targets.backend_conf(self.workdir, backend_port),
                             backend_port, self.args.load_cpu)
        main = [self.proxy_target(NGINX_TLS, cert, backend_port),
                self.proxy_target(TWINGRESS, cert, backend_port)]
        sni = []
        if self.args.sni_certs:
            sni = self.sni_run(backend_port)
        if backend.popen.poll() is not None:
            raise BenchFailed(f"the backend exited during the run:\n{backend.tail()}")
        return main, sni

# --- report -----------------------------------------------------------------------------

def _fmt(value: Optional[float], spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 3) if a is not None and b else None


def report(main: list[Target], sni: list[Target], args: argparse.Namespace,
           loadavg: dict[str, Any]) -> tuple[str, list[str], list[str], dict[str, Any]]:
    ref = next((t for t in main if t.name == NGINX_TLS), None)
    ref_hs = ref.handshakes.rate if ref and ref.handshakes else None
    ref_rps = ref.keepalive.result.rps if ref and ref.keepalive else None
    busy_hdr = f"cpu{args.proxy_cpu}/cpu{args.load_cpu}"
    head = (f"{'target':<11} {'handshakes/s':>12} {'vs nginx':>8} {'CPU/hs':>8} {busy_hdr:>9}"
            f" | {'HTTPS req/s':>11} {'p50':>8} {'p99':>8} {'vs nginx':>8} {'CPU/req':>8}"
            f" {busy_hdr:>9}")
    lines = [head, "-" * len(head)]
    rows, notes, problems = [], [], []
    for t in main:
        hs, ka = t.handshakes, t.keepalive
        hs_ratio = ratio(hs.rate if hs else None, ref_hs)
        rps_ratio = ratio(ka.result.rps if ka else None, ref_rps)
        ka_cpu = (round(1e6 * ka.target_cpu_seconds / ka.result.requests, 1)
                  if ka and ka.result.requests else None)
        left = (f"{hs.rate:>12,.0f} {_fmt(hs_ratio, '.2f', 'x'):>8} "
                f"{_fmt(hs.cpu_us_per_handshake, '.0f', 'us'):>8} "
                f"{'/'.join(f'{v:.0f}%' for v in hs.cpu_busy.values()):>9}" if hs else
                f"{'FAILED':>12} {'-':>8} {'-':>8} {'-':>9}")
        right = (f"{ka.result.rps:>11,.0f} {ka.result.p('50'):>6.2f}ms {ka.result.p('99'):>6.2f}ms "
                 f"{_fmt(rps_ratio, '.2f', 'x'):>8} {_fmt(ka_cpu, '.1f', 'us'):>8} "
                 f"{'/'.join(f'{v:.0f}%' for v in ka.cpu_busy.values()):>9}" if ka else
                 f"{'FAILED':>11}")
        lines.append(f"{t.name:<11} {left} | {right}")
        for what, busy in (("handshakes", hs.cpu_busy if hs else {}),
                           ("keep-alive", ka.cpu_busy if ka else {})):
            p, l_ = busy.get(f"cpu{args.proxy_cpu}", 0.0), busy.get(f"cpu{args.load_cpu}", 0.0)
            if l_ >= 95.0 and p < 90.0:
                notes.append(f"{t.name} {what}: the load CPU was {l_:.0f}% busy and the proxy CPU "
                             f"only {p:.0f}%: this number is bounded by the load side")
        if t.failure:
            problems.append(f"{t.name}: {t.failure}")
        if ka and (ka.result.errors or ka.warmup_errors):
            problems.append(f"{t.name}: keep-alive: {ka.result.non_2xx} non-2xx/3xx, socket "
                            f"errors {ka.result.socket_errors}, {ka.warmup_errors} in warm-up")
        rows.append({"target": t.name, "failure": t.failure, "info": t.info,
                     "handshakes": hs.raw | {"cpu_busy_percent": hs.cpu_busy,
                                             "target_cpu_seconds": hs.target_cpu_seconds,
                                             "cpu_us_per_handshake": hs.cpu_us_per_handshake,
                                             "ratio_to_nginx": hs_ratio} if hs else None,
                     "keepalive": {"wrk": ka.result.to_json(), "warmup_errors": ka.warmup_errors,
                                   "cpu_busy_percent": ka.cpu_busy,
                                   "target_cpu_seconds": ka.target_cpu_seconds,
                                   "cpu_us_per_request": ka_cpu,
                                   "ratio_to_nginx": rps_ratio} if ka else None})
    negotiated = {t.name: t.handshakes.negotiated for t in main if t.handshakes}
    if negotiated:
        lines.append("negotiated: " + "; ".join(
            f"{n} {v['version']} {v['cipher']}" for n, v in negotiated.items() if v))
    sni_rows = []
    if sni:
        one, many = (sni + [None, None])[:2]
        lines.append("")
        lines.append(f"SNI selection, full handshakes/s for {SNI_HOST} (twingress):")
        for t in sni:
            hs = t.handshakes
            extra = ", ".join(f"{k} {t.info[k]}" for k in
                              ("rounds_per_second", "table_live_seconds", "rss_mib_loaded",
                               "generate_seconds", "manifests_mib") if k in t.info)
            lines.append(f"  {t.name:<22} " + (
                f"{hs.rate:>9,.0f}/s  CPU/hs {_fmt(hs.cpu_us_per_handshake, '.0f', 'us')}  "
                f"busy {'/'.join(f'{v:.0f}%' for v in hs.cpu_busy.values())}  ({extra})"
                if hs else "FAILED"))
            if t.failure:
                problems.append(f"{t.name}: {t.failure}")
            sni_rows.append({"target": t.name, "failure": t.failure, "info": t.info,
                             "handshakes": hs.raw | {"cpu_busy_percent": hs.cpu_busy,
                                                     "target_cpu_seconds": hs.target_cpu_seconds,
                                                     "cpu_us_per_handshake":
                                                         hs.cpu_us_per_handshake}
                             if hs else None})
        r = ratio(many.handshakes.rate if many and many.handshakes else None,
                  one.handshakes.rate if one and one.handshakes else None)
        lines.append(f"  {args.sni_certs} certs / 1 cert: {_fmt(r, '.2f', 'x')}")
        sni_summary = {"ratio_many_to_one": r}
    else:
        sni_summary = {}
    if max(loadavg["before"][0], loadavg["after"][0]) >= 0.5:
        notes.append(f"load average (1/5/15 min) before {loadavg['before']}, after "
                     f"{loadavg['after']}: other work may have shared the CPUs")
    env = environment(args.nginx)
    out = {"benchmark": "tls", "time": datetime.datetime.now().astimezone().isoformat(),
           "ok": not problems, "environment": env | {
               "openssl_cli": subprocess.run(["openssl", "version"], capture_output=True,
                                             text=True).stdout.strip(),
               "python_ssl": __import__("ssl").OPENSSL_VERSION,
               "twingress_openssl": _pyopenssl_version(),
               "platform": platform.platform()},
           "loadavg": loadavg, "background_busy_percent": loadavg.get("busy"), "notes": notes,
           "config": {k: getattr(args, k) for k in (
               "duration", "warmup", "connections", "threads", "handshake_clients", "tls",
               "key", "sni_certs", "sni_rounds", "proxy_cpu", "load_cpu")} | {
               "host": targets.HOST, "wrk_sni": WRK_SNI, "sni_host": SNI_HOST},
           "results": rows, "sni": {"results": sni_rows, **sni_summary}}
    return "\n".join(lines), notes, problems, out


def _pyopenssl_version() -> str:
    """The OpenSSL twingress uses (pyOpenSSL's, through cryptography), not the system one."""
    from OpenSSL import SSL
    return SSL.SSLeay_version(SSL.SSLEAY_VERSION).decode()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    try:
        check_environment(args)
        busy = cpuload.background_busy([args.proxy_cpu, args.load_cpu])
        loadavg: dict[str, Any] = {"before": [round(v, 2) for v in os.getloadavg()],
                                   "busy": busy}
        print(f"load average before: {loadavg['before']}, CPUs busy {busy}", flush=True)
        if max(busy.values()) >= IDLE_LIMIT:
            print("note: the machine is busy before the run; numbers are suspect", flush=True)
        with ExitStack() as stack:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="twtls-")))
            bench = Bench(args, stack, workdir)
            try:
                main_results, sni_results = bench.run()
            finally:
                if args.keep_logs:
                    bench.keep_logs((args.json.parent if args.json else Path.cwd())
                                    / "bench-logs")
        loadavg["after"] = [round(v, 2) for v in os.getloadavg()]
    except KeyboardInterrupt:
        print("\ninterrupted: all benchmark processes stopped", file=sys.stderr)
        return 130
    except (BenchFailed, procs.StartError, wrk.WrkError) as e:
        print(f"FAILED {e}", file=sys.stderr)
        return 1
    text, notes, problems, out = report(main_results, sni_results, args, loadavg)
    print()
    print(text)
    print(f"load average before {loadavg['before']}, after {loadavg['after']}")
    for line in notes:
        print(f"note: {line}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"results written to {args.json}")
    for line in problems:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
