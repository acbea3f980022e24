"""
Real processes for data-plane tests: echo backends and twingress itself, each
a subprocess on loopback, configured through a manifests directory.

Tests talk to them with real clients (sockets, http.client, curl), so what is
tested is what an operator runs: C{twistd -n ingress --manifests DIR}.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Optional

import pytest
import yaml

from tests.waiting import eventually

ROOT = Path(__file__).resolve().parent.parent
TWISTD = [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; sys.exit(run())"]


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """
    A port nothing uses on any address now (probed on the wildcard address), for C{host}.

    Probing on C{host} alone is not enough: twingress binds stream listeners on
    every address, which fails if an echo backend listens on the same port of
    a 10.244.0.x address.
    """
    del host  # free on the wildcard means free on every address
    while True:
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("0.0.0.0", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


# Every port free_port() has returned in this test process. The kernel may hand a port that was
# just probed and closed out again, and a test that takes a Gateway or stream port before
# twingress takes its own would then have twingress's --http (or admin) port answer for it
# (seen in CI: curl met plaintext on the "HTTPS" port). Never twice, then.
_handed_out: set[int] = set()


def refusing_address() -> tuple[str, int]:
    """
    An address on 127.0.0.1 whose connects are refused for the rest of the test process.

    A port probed and closed (free_port()) is refused only until some other process of the run
    takes it: a dead backend once answered 200 in CI that way. The port here stays bound without
    listening, so the kernel refuses every connect and gives it to nobody else.
    """
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    _held.append(holder)
    host, port = holder.getsockname()
    return str(host), int(port)


# The sockets refusing_address() keeps bound until the test process ends.
_held: list[socket.socket] = []


def accept_in_threads(listener: socket.socket, serve: Callable[[socket.socket], None]) -> None:
    """Accept on C{listener} until it is closed, each connection served by C{serve} on a thread of its own."""

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # closed: the test is over
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def refused(port: int, host: str = "127.0.0.1") -> bool:
    """True when a TCP connect to C{host:port} is refused (nothing listens there any more)."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


class ProcessExited(RuntimeError):
    """The process a wait depends on has exited: it will not become ready, so the wait ends at once."""


def alive(process: Optional[subprocess.Popen[bytes]]) -> None:
    """Raise L{ProcessExited} if C{process} has exited (a fatal exception for L{eventually})."""
    if process is not None and process.poll() is not None:
        raise ProcessExited(f"process exited with {process.returncode}")


def wait_for_port(host: str, port: int, process: Optional[subprocess.Popen[bytes]] = None, timeout: float = 15.0) -> None:
    """Until C{host:port} accepts; fails early if the process exits."""

    def accepts() -> bool:
        alive(process)
        socket.create_connection((host, port), timeout=0.5).close()
        return True

    eventually(accepts, f"{host}:{port} to accept", timeout=timeout, fatal=(ProcessExited,))


class EchoBackend:
    """C{python examples/echo.py} on C{host:port}, named C{name} in its answers."""

    def __init__(self, name: str, host: str = "127.0.0.1", port: Optional[int] = None) -> None:
        self.name = name
        self.host = host
        self.port = port or free_port(host)
        self.process = subprocess.Popen(
            # A pod's server queues its connections as a real one does (nginx 511, Go somaxconn), not
            # Twisted's 50: the h2load tests open a thousand upstream connections at once.
            [sys.executable, str(ROOT / "examples" / "echo.py"), "--listen", f"tcp:{self.port}:interface={host}:backlog=1024", "--name", name],
            cwd=ROOT,
        )
        wait_for_port(host, self.port, self.process)

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class Manifests:
    """A manifests directory with helpers that write Services, EndpointSlices and Ingresses."""

    path: Path
    written: list[str] = field(default_factory=list)

    def write(self, name: str, *objects: dict) -> None:
        """Write (or replace) one file atomically: the source never sees half a file."""
        target = self.path / name
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(yaml.safe_dump_all(objects))
        os.replace(tmp, target)
        self.written.append(name)

    def remove(self, name: str) -> None:
        (self.path / name).unlink()

    def service(self, name: str, endpoints: Sequence[tuple[str, int]], namespace: str = "default", ready: bool = True) -> list[dict]:
        """
        A selector-less Service on port 80 ("http") and its EndpointSlices:
        one slice per distinct endpoint port (a slice has one port list for all
        its endpoints), as the EndpointSlice controller would write them.
        """
        target_port = endpoints[0][1] if endpoints else 8080
        by_port: dict[int, list[str]] = {}
        for host, port in endpoints:
            by_port.setdefault(port, []).append(host)
        slices = [
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": f"{name}-{i}", "namespace": namespace, "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": port}],
                "endpoints": [{"addresses": [h], "conditions": {"ready": ready}} for h in hosts],
            }
            for i, (port, hosts) in enumerate(sorted(by_port.items()), start=1)
        ]
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": target_port}]},
        }
        return [service, *slices]

    @staticmethod
    def ingress(name: str, host: str, service: str, path: str = "/", path_type: str = "Prefix", namespace: str = "default", **spec: object) -> dict:
        rule: dict = {"http": {"paths": [{"path": path, "pathType": path_type, "backend": {"service": {"name": service, "port": {"number": 80}}}}]}}
        if host:
            rule["host"] = host
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ingressClassName": "twingress", "rules": [rule], **spec},
        }

    @staticmethod
    def nginx_ingress(name: str, host: str, service: str, annotations: dict[str, str], path: str = "/", path_type: str = "Prefix") -> dict:
        """An Ingress with C{annotations} under the C{nginx.ingress.kubernetes.io/} prefix (keys given without it)."""
        ingress = Manifests.ingress(name, host, service, path=path, path_type=path_type)
        ingress["metadata"]["annotations"] = {"nginx.ingress.kubernetes.io/" + key: value for key, value in annotations.items()}
        return ingress

    NGINX_CONFIGMAP = "default/ingress-nginx-controller"  # what --nginx-configmap names for controller_config_map's object

    @staticmethod
    def controller_config_map(data: dict[str, str]) -> dict:
        """The ingress-nginx controller ConfigMap C{NGINX_CONFIGMAP} with C{data}: give twistd C{--nginx-configmap NGINX_CONFIGMAP}."""
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ingress-nginx-controller", "namespace": "default"}, "data": data}

    def route(self, name: str, host: str, backends: Sequence[tuple[str, int]], path: str = "/") -> None:
        """One file with a Service, its EndpointSlice and an Ingress routing C{host}+C{path} to it."""
        self.write(f"{name}.yaml", *self.service(name, backends), self.ingress(name, host, name, path))


def twistd_command(source: Sequence[str], http_port: int, admin_port: int, args: Sequence[str]) -> list[str]:
    """
    The twistd command line every test process uses: one configuration
    source, HTTP and admin on the given loopback ports, HTTPS off unless
    C{args} (which come last and win) turn it on, and no shutdown delay
    (tests stop their processes with SIGTERM; only the drain tests wait).
    """
    return TWISTD + [
        "--pidfile=",
        "--logfile=-",
        "-n",
        "ingress",
        *source,
        "--http",
        f"tcp:{http_port}:interface=127.0.0.1",
        "--admin",
        f"tcp:{admin_port}:interface=127.0.0.1",
        "--https",
        "",
        "--shutdown-delay",
        "0",
        *args,
    ]


class Twingress:
    """C{twistd -n ingress --manifests DIR} on free loopback ports, ready when /readyz says so."""

    def __init__(self, manifests: Path, *args: str, log_path: Optional[Path] = None, ready_timeout: float = 20.0, env: Optional[dict[str, str]] = None) -> None:
        for attempt in range(3):
            # free_port() releases the port before twistd binds it: another process of the run may take
            # it meanwhile, and then twistd exits with EADDRINUSE. New ports for a new try, then.
            self.http_port = free_port()
            self.admin_port = free_port()
            self.log_path = log_path or manifests.parent / f"twingress-{self.http_port}.log"
            command = twistd_command(
                ["--manifests", str(manifests), "--poll-interval", "0.2"], self.http_port, self.admin_port, args
            )
            self._log = open(self.log_path, "wb")
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
            try:
                self.wait_ready(ready_timeout)
                return
            except Exception as error:
                self.stop()
                if attempt < 2 and "Address already in use" in self.log():
                    continue
                raise RuntimeError(f"twingress did not become ready:\n{self.log()[-4000:]}") from error

    def wait_ready(self, timeout: float = 20.0) -> None:
        def ready() -> bool:
            alive(self.process)
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=1) as r:
                return bool(r.status == 200)

        eventually(ready, "/readyz to answer 200", timeout=timeout, fatal=(ProcessExited,))

    def admin(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the /metrics samples of C{name} that carry all of C{labels} (0 when none do)."""
        total = 0.0
        for line in self.admin("/metrics")[1].decode().splitlines():
            if line.startswith((name + "{", name + " ")) and all(f'{key}="{value}"' in line for key, value in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def routes(self) -> dict:
        return json.loads(self.admin("/debug/routes")[1])

    def generation(self) -> int:
        return int(self.routes()["generation"])

    def wait_generation_above(self, generation: int, timeout: float = 5.0) -> int:
        """Until a table newer than C{generation} is live; returns the new generation."""
        current: int = eventually(lambda: (g := self.generation()) > generation and g, f"a table newer than {generation}", timeout=timeout, interval=0.02)
        return current

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def log(self) -> str:
        if not self._log.closed:  # stop() closes it: the log of a failed start is read after that
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


REQUIRE_ENV = "TWINGRESS_REQUIRE_KUBE"


def unavailable(message: str) -> NoReturn:
    """A test environment that is missing: skip, or fail with TWINGRESS_REQUIRE_KUBE=1 (CI), so it never passes silently."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


def http_status(port: int, host: str, path: str = "/") -> int:
    """The status of one C{GET path} with C{Host: host} to 127.0.0.1:C{port}, on a connection of its own."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": host})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def raw_exchange(port: int, data: bytes, timeout: float = 5.0, host: str = "127.0.0.1") -> bytes:
    """Send raw bytes, half-close nothing, read until the server closes (or timeout)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            chunks.append(b"<timeout>")
        return b"".join(chunks)
