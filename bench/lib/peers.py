"""
The Go peers an operator would pick instead of twingress, Traefik and Caddy, built by bench/peers.sh
(minutes, once) and configured as L{bench.lib.site.nginx} is: one route for every request to the
backend, HTTP/1.1 in clear and TLS (HTTP/1.1 and h2 by ALPN) on two ports, gRPC by its host to
grpcecho over h2c, no access log, as many idle upstream connections as twingress keeps, one OS thread
running Go code per worker asked for (GOMAXPROCS: the equivalent of one nginx worker).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from bench.lib import procs
from bench.lib.load import GRPC_HOST
from bench.lib.site import REPO, UPSTREAM_IDLE, Backends, Listening

TRAEFIK, CADDY = "traefik", "caddy"
PEERS = (TRAEFIK, CADDY)
PEERS_SH = REPO / "bench" / "peers.sh"


def built() -> dict[str, Path]:
    """Where bench/peers.sh builds each peer (whether or not it has)."""
    done = subprocess.run(["bash", str(PEERS_SH), "--print-path"], capture_output=True, text=True)
    if done.returncode != 0:
        raise procs.BenchFailed(f"bench/peers.sh --print-path failed:\n{done.stderr}")
    return {name: Path(path) for name, path in (line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)}


def binary(name: str) -> Path:
    """The peer's binary, or L{BenchFailed} saying how to build it: a comparison without it is not the one asked for."""
    path = built().get(name)
    if path is None or not os.access(path, os.X_OK):
        raise procs.BenchFailed(f"{name} is not built ({path}): run bench/peers.sh (minutes, once)")
    return path


def traefik_argv(path: Path, workdir: Path, http_port: int, https_port: int, backends: Backends) -> list[str]:
    """Traefik with two entry points and a file-provider config: a catch-all router, and gRPC's host to grpcecho (h2c)."""
    services: dict[str, Any] = {
        "bench": {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{backends.http_port}"}], "passHostHeader": True}},
        "grpc": {"loadBalancer": {"servers": [{"url": f"h2c://127.0.0.1:{backends.grpc_port}"}]}}}
    routers = {"plain": {"rule": "PathPrefix(`/`)", "entryPoints": ["http"], "service": "bench"},
               "tls": {"rule": "PathPrefix(`/`)", "entryPoints": ["https"], "service": "bench", "tls": {}},
               "grpc": {"rule": f"Host(`{GRPC_HOST}`)", "priority": 1000, "entryPoints": ["https"], "service": "grpc", "tls": {}}}
    pair = {"certFile": str(backends.cert), "keyFile": str(backends.key)}
    dynamic = workdir / "traefik.json"
    dynamic.write_text(json.dumps({"http": {"routers": routers, "services": services},
                                   "tls": {"certificates": [pair], "stores": {"default": {"defaultCertificate": pair}}}}))
    return [str(path), f"--entryPoints.http.address=127.0.0.1:{http_port}", f"--entryPoints.https.address=127.0.0.1:{https_port}",
            f"--providers.file.filename={dynamic}", "--providers.file.watch=false", f"--serversTransport.maxIdleConnsPerHost={UPSTREAM_IDLE}",
            "--global.checkNewVersion=false", "--global.sendAnonymousUsage=false", "--log.level=ERROR"]


def caddy_argv(path: Path, workdir: Path, http_port: int, https_port: int, backends: Backends) -> list[str]:
    """Caddy from a Caddyfile (admin, automatic HTTPS and HTTP/3 off): reverse_proxy to the backend, gRPC's host to grpcecho (h2c)."""
    transport = f"transport http {{\n            keepalive_idle_conns {UPSTREAM_IDLE}\n            keepalive_idle_conns_per_host {UPSTREAM_IDLE}\n        }}"
    caddyfile = workdir / "Caddyfile"
    caddyfile.write_text(f"""{{
    admin off
    auto_https off
    persist_config off
    servers {{
        protocols h1 h2
    }}
}}

http://:{http_port} {{
    bind 127.0.0.1
    reverse_proxy 127.0.0.1:{backends.http_port} {{
        {transport}
    }}
}}

https://:{https_port} {{
    bind 127.0.0.1
    tls {backends.cert} {backends.key}
    @grpc host {GRPC_HOST}
    reverse_proxy @grpc h2c://127.0.0.1:{backends.grpc_port}
    reverse_proxy 127.0.0.1:{backends.http_port} {{
        {transport}
    }}
}}
""")
    return [str(path), "run", "--config", str(caddyfile), "--adapter", "caddyfile"]


def start(children: procs.Children, name: str, backends: Backends, cpus: Optional[str], workers: int = 1,
          wrapper: Sequence[str] = (), environment: Optional[dict[str, str]] = None) -> Listening:
    """Traefik or Caddy, built, started pinned to C{cpus} with its own home (nothing read from or written to the user's),
    under C{wrapper} (valgrind's command line, say) with C{environment} added."""
    if name not in PEERS:
        raise procs.BenchFailed(f"unknown peer {name!r}: one of {', '.join(PEERS)}")
    path = binary(name)
    http_port, https_port = procs.free_port(), procs.free_port()
    make = traefik_argv if name == TRAEFIK else caddy_argv
    home = children.workdir / f"{name}-home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ) | {"GOMAXPROCS": str(workers), "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
                              "XDG_CONFIG_HOME": str(home / "config")} | (environment or {})
    proc = children.spawn(name, [*wrapper, *make(path, children.workdir, http_port, https_port, backends)], https_port, cpus, env=env)
    procs.wait_for_port(proc, http_port, children.start_timeout)
    return Listening(name, proc, http_port, https_port)
