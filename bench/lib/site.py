"""
The site every contender serves, and the contenders: the benches' nginx backend (answers 200 and a
line of text) and bench/grpcecho (Go's HTTP/2 server answering gRPC unary calls) on the load CPUs,
one self-signed ECDSA P-256 certificate, and a proxy in front of them: twingress from a checkout
(this tree or another one's, L{twingress}), or a peer (L{nginx}; Traefik and Caddy in
L{bench.lib.peers}).  Every proxy listens in clear (HTTP/1.1) and with TLS (HTTP/1.1 and h2 by
ALPN, gRPC by its host) at once, so one process serves every kind a scenario compares.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from bench.lib import procs
from bench.lib.load import GRPC_HOST, HOST, SNI

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "twingress" / "bench"
# The same TLS 1.2 suites as twingress's own (ingress.proxy.tls.termination.MODERN_CIPHERS).
MODERN_CIPHERS = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
                 "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
UPSTREAM_IDLE = 320  # idle upstream connections kept per backend: ingress-nginx's default, twingress's too


@dataclass
class Listening:
    """A started contender: its process (its group is what it costs) and its two ports."""

    name: str
    proc: procs.Proc
    http_port: int
    https_port: int


@dataclass
class Backends:
    """The backends every contender forwards to, and the certificate files they serve."""

    http_port: int
    grpc_port: int
    cert: Path
    key: Path
    proc: Optional[procs.Proc] = None  # the nginx backend's process (what "direct" measures)


def self_signed(key: Any, hosts: Sequence[str]) -> tuple[bytes, bytes, bytes]:
    """A self-signed certificate of C{key} for C{hosts} (CN: the first), valid for a day: (cert PEM, key PEM, cert DER)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem, cert.public_bytes(serialization.Encoding.DER)


def write_certificate(workdir: Path) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for the bench's names, valid for a day: (cert, key) files."""
    from cryptography.hazmat.primitives.asymmetric import ec

    cert_pem, key_pem, _ = self_signed(ec.generate_private_key(ec.SECP256R1()), [HOST, SNI, GRPC_HOST])
    cert_path, key_path = workdir / "bench.crt", workdir / "bench.key"
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(key_pem)
    return cert_path, key_path


def nginx_binary() -> str:
    return shutil.which("nginx") or "/usr/sbin/nginx"


def nginx_main(workdir: Path, name: str, http_body: str, workers: int = 1) -> list[str]:
    """An nginx of C{workers} workers (foreground, no logs, private temp paths) serving C{http_body}: its argv."""
    tmp = workdir / f"{name}-tmp"
    tmp.mkdir(exist_ok=True)
    conf = workdir / f"{name}.conf"
    conf.write_text(f"""daemon off;
master_process on;
worker_processes {workers};
pid {workdir / (name + '.pid')};
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
{http_body}
}}
""")
    return [nginx_binary(), "-p", str(workdir), "-e", "stderr", "-c", str(conf)]


def go_tool(name: str) -> Path:
    """bench/NAME (a Go program: grpcecho, mixload, udpload), built once into the cache (again when a source is newer)."""
    binary, source = CACHE / name, REPO / "bench" / name
    newest = max(path.stat().st_mtime for path in source.glob("*.go"))
    if binary.exists() and binary.stat().st_mtime >= newest:
        return binary
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    CACHE.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ) | {"CGO_ENABLED": "0"}
    try:
        done = subprocess.run([go, "build", "-o", str(binary), "."], cwd=source, capture_output=True, text=True, env=env)
    except OSError as e:
        raise procs.BenchFailed(f"go build bench/{name}: {e} (set GO=/path/to/go)") from e
    if done.returncode != 0:
        raise procs.BenchFailed(f"go build bench/{name} failed:\n{done.stderr}")
    return binary


def grpcecho() -> Path:
    """bench/grpcecho, the gRPC backend."""
    return go_tool("grpcecho")


def start_backends(children: procs.Children, cpus: Optional[str]) -> Backends:
    """The nginx backend and grpcecho on C{cpus}, and the certificate."""
    cert, key = write_certificate(children.workdir)
    http_port, grpc_port = procs.free_port(), procs.free_port()
    server = f"""
    server {{
        listen 127.0.0.1:{http_port} backlog=4096;
        location / {{ default_type text/plain; return 200 "hello world\\n"; }}
    }}"""
    backend = children.spawn("backend", nginx_main(children.workdir, "backend", server), http_port, cpus)
    children.spawn("grpcecho", [str(grpcecho()), "-listen", f"127.0.0.1:{grpc_port}"], grpc_port, cpus)
    return Backends(http_port, grpc_port, cert, key, backend)


# --- twingress, from a checkout ---------------------------------------------------------

@dataclass
class Checkout:
    """A twingress tree with its own .venv (compiled or not): this one, or --baseline's."""

    path: Path

    @property
    def twistd(self) -> Path:
        return self.path / ".venv" / "bin" / "twistd"

    def check(self) -> None:
        """L{BenchFailed} unless the tree has ingress/ and a .venv with twistd."""
        if not (self.path / "ingress").is_dir():
            raise procs.BenchFailed(f"{self.path}: not a twingress checkout (no ingress/)")
        if not os.access(self.twistd, os.X_OK):
            raise procs.BenchFailed(f"{self.path}: no {self.twistd.relative_to(self.path)}: run make venv there")

    def describe(self) -> dict[str, Any]:
        """Its commit, whether its work tree differs from it, whether its modules are compiled."""
        def git(*argv: str) -> str:
            done = subprocess.run(["git", "-C", str(self.path), *argv], capture_output=True, text=True)
            return done.stdout.strip() if done.returncode == 0 else "?"
        compiled = any(self.path.glob("*__mypyc*.so")) or any((self.path / "ingress").rglob("*.so"))
        return {"path": str(self.path), "commit": git("rev-parse", "--short=12", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no")), "compiled": compiled}


def twingress_manifests(directory: Path, backends: Backends, annotations: Optional[dict[str, str]] = None) -> None:
    """The bench's Services, EndpointSlices, Secret and two Ingresses (HOST, served in clear too; GRPC_HOST, gRPC) as one v1 List.

    C{annotations} go on HOST's Ingress besides its own: what a route policy costs (C{latency --annotation}).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ns = "default"

    def service(name: str, port: int) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": ns, "name": name},
                 "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": port}]}},
                {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                 "metadata": {"namespace": ns, "name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}},
                 "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
                 "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}]

    def ingress(name: str, host: str, tls_hosts: list[str], annotations: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"namespace": ns, "name": name, "annotations": annotations},
                "spec": {"ingressClassName": "twingress", "tls": [{"hosts": tls_hosts, "secretName": "bench-tls"}],
                         "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                                      "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}}

    items = [*service("bench", backends.http_port), *service("grpcecho", backends.grpc_port),
             {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "twingress"},
              "spec": {"controller": "twingress.io/ingress-controller"}},
             {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"namespace": ns, "name": "bench-tls"},
              "stringData": {"tls.crt": backends.cert.read_text(), "tls.key": backends.key.read_text()}},
             ingress("bench", HOST, [HOST, SNI], {"twingress.io/ssl-redirect": "false", **(annotations or {})}),
             ingress("grpcecho", GRPC_HOST, [GRPC_HOST], {"twingress.io/backend-protocol": "GRPC"})]
    (directory / "all.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def twingress(children: procs.Children, name: str, checkout: Checkout, backends: Backends, cpus: Optional[str],
              workers: int = 1, extra: Sequence[str] = (), annotations: Optional[dict[str, str]] = None,
              more_manifests: Optional[dict[str, str]] = None, pythonpath: Sequence[str] = (),
              environment: Optional[dict[str, str]] = None, wrapper: Sequence[str] = ()) -> Listening:
    """
    twingress of C{checkout} (its .venv, its tree first on the path: its compiled modules if built), access log off
    (C{extra} arguments come after, and override), C{annotations} on HOST's Ingress, C{more_manifests} (file name: text) beside,
    C{pythonpath} before the tree on its path (bench/libtimes, say), C{environment} added to its environment,
    under C{wrapper} (valgrind's command line, say).
    """
    checkout.check()
    manifests = children.workdir / f"{name}-manifests"
    twingress_manifests(manifests, backends, annotations)
    for file_name, text in (more_manifests or {}).items():
        (manifests / file_name).write_text(text)
    http_port, https_port = procs.free_port(), procs.free_port()
    argv = [str(checkout.twistd), "--pidfile=", "-n", "ingress", "--manifests", str(manifests),
            "--http", f"tcp:{http_port}:interface=127.0.0.1", "--https", f"tcp:{https_port}:interface=127.0.0.1",
            "--admin", "", "--access-log", "off", *(["--workers", str(workers)] if workers > 1 else []), *extra]
    env = dict(os.environ) | {"PYTHONPATH": os.pathsep.join([*pythonpath, str(checkout.path)]), "PYTHONUNBUFFERED": "1"} | (environment or {})
    proc = children.spawn(name, [*wrapper, *argv], https_port, cpus, env=env, cwd=checkout.path)
    procs.wait_for_port(proc, http_port, children.start_timeout)
    return Listening(name, proc, http_port, https_port)


# --- nginx as a proxy -------------------------------------------------------------------

def nginx(children: procs.Children, name: str, backends: Backends, cpus: Optional[str], workers: int = 1,
          resumption: bool = False) -> Listening:
    """nginx as an ingress configures it: upstream keep-alive, HTTP/2 over TLS, gRPC by grpc_pass; TLS session
    resumption (a shared session cache, tickets) only with C{resumption}: a full-handshake figure must not resume."""
    http_port, https_port = procs.free_port(), procs.free_port()
    tls = f"""ssl_certificate {backends.cert};
        ssl_certificate_key {backends.key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {MODERN_CIPHERS};
        ssl_prefer_server_ciphers on;
        {"ssl_session_cache shared:SSL:10m;" if resumption else "ssl_session_cache off;"}
        {"ssl_session_tickets on;" if resumption else "ssl_session_tickets off;"}"""
    body = f"""
    upstream b {{ server 127.0.0.1:{backends.http_port}; keepalive {UPSTREAM_IDLE}; keepalive_requests 100000000; }}
    upstream g {{ server 127.0.0.1:{backends.grpc_port}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{http_port} backlog=4096;
        listen 127.0.0.1:{https_port} ssl http2 backlog=4096;
        server_name {HOST} {SNI};
        {tls}
        location / {{
            proxy_pass http://b;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP $remote_addr;
        }}
    }}
    server {{
        listen 127.0.0.1:{https_port} ssl http2;
        server_name {GRPC_HOST};
        {tls}
        location / {{ grpc_pass grpc://g; }}
    }}"""
    proc = children.spawn(name, nginx_main(children.workdir, name, body, workers), https_port, cpus)
    return Listening(name, proc, http_port, https_port)
