"""What the HTTP benchmark runs: nginx configs (backend, reference proxy), twingress manifests."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

HOST = "bench.local"
BODY = b"hello world\n"
KEEPALIVE_REQUESTS = 100_000_000
SERVICE = "bench"
NAMESPACE = "default"

DEFAULT_TWINGRESS_CMD = (
    "{venv_bin}/twistd --pidfile= -n ingress --manifests {manifests}"
    " --http tcp:{port}:interface=127.0.0.1 --admin '' --https ''"
)


def _nginx_main(workdir: Path, name: str, http_body: str, workers: int = 1) -> str:
    """The parts every nginx here shares: foreground, C{workers} worker processes, no logs, private temp paths."""
    tmp = workdir / f"{name}-tmp"
    return f"""
daemon off;
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
    keepalive_requests {KEEPALIVE_REQUESTS};
    keepalive_timeout 300s;
{http_body}
}}
"""


def set_body_size(size: int) -> None:
    """C{--body-size}: the backend answers a text body of C{size} bytes (lines of text, compressible as text is)."""
    global BODY
    line = b"twingress benchmark body: a line of ordinary compressible text, 0123456789\n"
    BODY = (line * (size // len(line) + 1))[:size]


def backend_conf(workdir: Path, port: int) -> str:
    """An nginx that answers every request with 200 and L{BODY} (from a file when it is not the default's)."""
    if BODY == b"hello world\n":
        body = BODY.decode().replace("\n", "\\n")
        answer = f'return 200 "{body}";'
    else:  # nginx's configuration buffer takes no 64 KiB string
        (workdir / "www").mkdir(exist_ok=True)
        (workdir / "www" / "body.txt").write_bytes(BODY)
        workdir.chmod(0o711)  # nginx's workers (user nobody when run as root) must reach the file
        answer = f"root {workdir / 'www'}; try_files /body.txt =404; etag off;"
    server = f"""
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            default_type text/plain;
            {answer}
        }}
    }}"""
    return _nginx_main(workdir, "backend", server)


GZIP_NGINX = "gzip on; gzip_comp_level 1; gzip_min_length 256; gzip_proxied any; gzip_vary on; gzip_types text/plain;"
"""C{--gzip} for the reference nginx: what ingress-nginx's use-gzip turns on (its defaults)."""


def proxy_conf(workdir: Path, port: int, backend_port: int, workers: int = 1, extra: str = "") -> str:
    """The reference: nginx as an ingress would configure it, with upstream keep-alive (and C{extra} directives)."""
    server = f"""
    upstream b {{
        server 127.0.0.1:{backend_port};
        keepalive 64;
        keepalive_requests {KEEPALIVE_REQUESTS};
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        {extra}
        location / {{
            proxy_pass http://b;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP $remote_addr;
        }}
    }}"""
    return _nginx_main(workdir, "nginx-proxy", server, workers)


def write_nginx_conf(workdir: Path, name: str, text: str) -> list[str]:
    """Write C{name}.conf (and its temp dir); return the nginx arguments that run it."""
    (workdir / f"{name}-tmp").mkdir(exist_ok=True)
    conf = workdir / f"{name}.conf"
    conf.write_text(text)
    return ["-p", str(workdir), "-e", "stderr", "-c", str(conf)]


def manifests(backend_port: int) -> dict[str, dict]:
    """Service, EndpointSlice, IngressClass and Ingress routing C{bench.local/} to the backend."""
    meta = {"namespace": NAMESPACE}
    return {
        "service.yaml": {
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta | {"name": SERVICE},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP",
                                "targetPort": backend_port}]},
        },
        "endpointslice.yaml": {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": meta | {"name": f"{SERVICE}-1",
                                "labels": {"kubernetes.io/service-name": SERVICE}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": backend_port, "protocol": "TCP"}],
        },
        "ingressclass.yaml": {
            "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "twingress"},
            "spec": {"controller": "twingress.io/ingress-controller"},
        },
        "ingress.yaml": {
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": meta | {"name": SERVICE},
            "spec": {
                "ingressClassName": "twingress",
                "rules": [{"host": HOST, "http": {"paths": [{
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": SERVICE, "port": {"number": 80}}},
                }]}}],
            },
        },
    }


def write_manifests(directory: Path, backend_port: int, annotations: dict[str, str] | None = None,
                    canary: dict[str, str] | None = None) -> None:
    """One object per YAML file, as C{kubectl apply -f DIR} would read them.

    C{annotations} go on the Ingress (to measure what a route policy costs); C{canary}, when
    given, adds a canary Ingress of the same host and path to the same backend with these
    annotations besides C{canary: "true"}.
    """
    directory.mkdir(parents=True, exist_ok=True)
    objects = manifests(backend_port)
    ingress = objects["ingress.yaml"]
    ingress["metadata"] = ingress["metadata"] | {"annotations": dict(annotations or {})}
    if canary is not None:
        objects["canary.yaml"] = ingress | {"metadata": ingress["metadata"] | {
            "name": f"{SERVICE}-canary",
            "annotations": {"nginx.ingress.kubernetes.io/canary": "true", **canary}}}
    for name, obj in objects.items():
        (directory / name).write_text(yaml.safe_dump(obj, sort_keys=False))


def gateway_manifests(directory: Path, port: int) -> None:
    """Route the benchmark's host by the Gateway API instead of an Ingress: a Gateway whose HTTP
    listener is twingress's port C{port} and an HTTPRoute of C{HOST} to the same Service."""
    (directory / "ingress.yaml").unlink(missing_ok=True)
    objects = [
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": "twingress"},
         "spec": {"controllerName": "twingress.io/gateway-controller"}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "bench", "namespace": NAMESPACE},
         "spec": {"gatewayClassName": "twingress", "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}]}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
         "spec": {"parentRefs": [{"name": "bench"}], "hostnames": [HOST], "rules": [{"backendRefs": [{"name": SERVICE, "port": 80}]}]}},
    ]
    (directory / "gateway.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))


def twingress_argv(template: str, venv_bin: Path, manifests_dir: Path, port: int,
                   backend_port: int) -> list[str]:
    """Fill the placeholders into the command template, then split it like a shell would.

    C{{venv_bin}}, C{{manifests}} and C{{port}} are what twingress needs;
    C{{backend_port}} lets a stand-in proxy (socat, say) check the harness itself.
    """
    return shlex.split(template.format(
        venv_bin=shlex.quote(str(venv_bin)),
        manifests=shlex.quote(str(manifests_dir)),
        port=port,
        backend_port=backend_port,
    ))
