"""
twingress against the real test control plane: the process, the objects it reads, and waits.

- L{KubeTwingress}: C{twistd -n ingress --kubeconfig PATH} as a subprocess on free loopback
  ports, ready when /readyz says 200; its log is attached to the report of a failing test.
- L{Kube}: create, update and delete Namespaces, selector-less Services, EndpointSlices,
  IngressClasses and Ingresses with the C{kubernetes} client (bodies are plain dicts, as a
  manifest would be written).
- L{TcpRelay}: a byte relay in front of kube-apiserver, so a test can cut the proxy's watch
  connections or cut the proxy off the API while the API itself keeps working.
- L{wait_until}, L{get}, L{metric}: polling, real HTTP requests through the proxy, and
  Prometheus samples from /metrics.

Test modules import the fixtures they use from here (C{kube}, C{namespace}, C{echo},
C{twingress}, C{ingress_classes}); every test gets its own namespace and hosts named after it,
so the tests of a session never see each other's routes.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.support import ROOT, EchoBackend, Twingress, free_port, twistd_command

SHIPPED_INGRESS_CLASS = ROOT / "k8s" / "ingressclass.yaml"
"""The IngressClass an operator installs: the tests' classes are built from it (one source of truth)."""

_shipped_class = yaml.safe_load(SHIPPED_INGRESS_CLASS.read_text())
INGRESS_CLASS: str = _shipped_class["metadata"]["name"]
CONTROLLER: str = _shipped_class["spec"]["controller"]
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

READY_TIMEOUT = 60.0
"""Until /readyz: a fresh process lists five kinds from an apiserver that may be busy."""

CONVERGE_TIMEOUT = 30.0
"""An API write until it shows in routing, with a connected watch."""

RECONNECT_TIMEOUT = 90.0
"""An API write until it shows in routing, when the proxy must first reconnect (capped backoff)."""

LOG_TAIL_CHARS = 12000

_no_proxy_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --- waiting -------------------------------------------------------------------------------------


def wait_until(predicate: Callable[[], Any], timeout: float = CONVERGE_TIMEOUT, what: str = "", interval: float = 0.1) -> Any:
    """
    Poll C{predicate()} until it returns something truthy, and return that.

    An exception from the predicate counts as "not yet" (the proxy may be restarting, the
    apiserver may be down). On timeout the AssertionError says what was awaited and the last
    value or exception seen, so a failure explains itself.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            result = predicate()
        except Exception as error:  # noqa: BLE001 - "not yet", reported on timeout
            result, last = None, f"{type(error).__name__}: {error}"
        else:
            if result:
                return result
            last = result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or predicate!r}; last: {last!r}")
        time.sleep(interval)


# --- HTTP through the proxy ------------------------------------------------------------------------


class Response:
    """A response from the proxy: status, headers, raw body, and the echo backend's JSON if any."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self) -> Optional[dict]:
        try:
            value = json.loads(self.body)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @property
    def backend(self) -> Optional[str]:
        """The name of the echo backend that answered (None when the proxy answered itself)."""
        body = self.json
        return body.get("name") if body else None

    def __repr__(self) -> str:
        return f"<Response {self.status} backend={self.backend!r} body={self.body[:200]!r}>"


def get(port: int, host: str, path: str = "/", timeout: float = 10.0) -> Response:
    """One GET through the proxy on its own connection, with C{Host: host}."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Host": host, "Connection": "close"})
        response = connection.getresponse()
        return Response(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


# --- the process -----------------------------------------------------------------------------------


class KubeTwingress(Twingress):
    """
    C{twistd -n ingress --kubeconfig PATH} on free loopback ports, ready when /readyz says so.

    Everything but the source is L{tests.support.Twingress}: admin(), routes(), generation(),
    log(), stop(). Raises (with the log) when it does not become ready.
    """

    def __init__(self, kubeconfig: Path, *args: str, log_path: Path, ready_timeout: float = READY_TIMEOUT) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.http_port = free_port()
        self.admin_port = free_port()
        self.log_path = log_path
        self.args = args
        command = twistd_command(["--kubeconfig", str(self.kubeconfig)], self.http_port, self.admin_port, args)
        self.command = command
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self.wait_ready(ready_timeout)
        except Exception as error:
            self.stop()
            raise RuntimeError(
                f"twingress did not become ready ({type(error).__name__}: {error}); "
                f"last /readyz: {self._last_readyz!r}\n{self.log()[-LOG_TAIL_CHARS:]}"
            ) from None

    _last_readyz: object = None

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"exited with status {self.process.returncode}")
            try:
                status, body = self.admin("/readyz")
                self._last_readyz = (status, body[:2000])
                if status == 200:
                    return
            except OSError as error:
                self._last_readyz = repr(error)
            time.sleep(0.1)
        raise TimeoutError(f"/readyz not 200 within {timeout:.0f}s")

    def admin(self, path: str) -> tuple[int, bytes]:
        try:
            with _no_proxy_opener.open(f"http://127.0.0.1:{self.admin_port}{path}", timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def readyz(self) -> tuple[int, dict]:
        status, body = self.admin("/readyz")
        return status, json.loads(body)

    def informers(self) -> dict[str, dict]:
        """The informers part of the /readyz detail: {kind: {"synced": .., "connected": ..}}."""
        return self.readyz()[1]["informers"]

    def metrics_text(self) -> str:
        status, body = self.admin("/metrics")
        assert status == 200, (status, body[:500])
        return body.decode()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of C{name} whose labels include C{labels} (0 when none)."""
        return metric(self.metrics_text(), name, **labels)

    def get(self, host: str, path: str = "/", timeout: float = 10.0) -> Response:
        return get(self.http_port, host, path, timeout)

    def route(self, host: str, path: str = "/") -> Optional[dict]:
        """The /debug/routes entry for a host's Prefix path (None when the table has none)."""
        hosts = self.routes().get("hosts", {})
        return hosts.get(host, {}).get("prefix", {}).get(path)

    def has_host(self, host: str) -> bool:
        return host in self.routes().get("hosts", {})

    def wait_status(self, host: str, status: int, path: str = "/", backend: Optional[str] = None, timeout: float = CONVERGE_TIMEOUT) -> Response:
        """Until a request for C{host}C{path} answers C{status} (from C{backend}, if given)."""

        def check() -> Optional[Response]:
            response = self.get(host, path)
            if response.status == status and (backend is None or response.backend == backend):
                return response
            raise AssertionError(f"got {response!r}")

        what = f"GET http://{host}{path} -> {status}" + (f" from {backend}" if backend else "")
        return wait_until(check, timeout, what)

    def backends_hit(self, host: str, count: int, path: str = "/") -> dict[str, int]:
        """C{count} requests; how many each backend answered (the status must be 200 every time)."""
        hits: dict[str, int] = {}
        for _ in range(count):
            response = self.get(host, path)
            assert response.status == 200, response
            name = response.backend
            assert name, response
            hits[name] = hits.get(name, 0) + 1
        return hits


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the Prometheus text-format samples named C{name} that carry C{labels}."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match.group(1) != name:
            continue
        found = dict(_LABEL.findall(match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(3))
    return total


# --- the objects -------------------------------------------------------------------------------------


class Kube:
    """The objects tests create, with the C{kubernetes} client and plain dict bodies."""

    def __init__(self, kubeconfig: Path) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.discovery = client.DiscoveryV1Api(self.api)

    def close(self) -> None:
        self.api.close()

    # namespaces

    def create_namespace(self, name: str, labels: Optional[dict[str, str]] = None) -> dict:
        return self._dict(self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}}))

    def delete_namespace(self, name: str) -> None:
        _ignore_404(lambda: self.core.delete_namespace(name))

    # Services

    def create_service(self, namespace: str, name: str, port: int = 80, port_name: str = "http", target_port: Optional[int] = None) -> dict:
        """A selector-less ClusterIP Service: its EndpointSlices are the test's to write."""
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": port_name, "port": port, "targetPort": target_port or port, "protocol": "TCP"}]},
        }
        return self._dict(self.core.create_namespaced_service(namespace, body))

    def delete_service(self, namespace: str, name: str) -> None:
        self.core.delete_namespaced_service(name, namespace)

    # EndpointSlices

    @staticmethod
    def endpoint_slice_body(
        namespace: str,
        name: str,
        service: str,
        endpoints: Sequence[str | tuple[str, bool]],
        port: int,
        port_name: str = "http",
    ) -> dict:
        """C{endpoints}: addresses (ready) or (address, ready) pairs; one port for all of them."""
        items = []
        for endpoint in endpoints:
            address, ready = (endpoint, True) if isinstance(endpoint, str) else endpoint
            items.append({"addresses": [address], "conditions": {"ready": ready, "serving": ready, "terminating": False}})
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": namespace, "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4",
            "endpoints": items,
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        }

    def put_endpoint_slice(
        self,
        namespace: str,
        name: str,
        service: str,
        endpoints: Sequence[str | tuple[str, bool]],
        port: int,
        port_name: str = "http",
    ) -> dict:
        """Create the EndpointSlice, or replace its endpoints and ports when it exists."""
        body = self.endpoint_slice_body(namespace, name, service, endpoints, port, port_name)
        try:
            return self._dict(self.discovery.create_namespaced_endpoint_slice(namespace, body))
        except ApiException as e:
            if e.status != 409:
                raise
        current = self.discovery.read_namespaced_endpoint_slice(name, namespace)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        return self._dict(self.discovery.replace_namespaced_endpoint_slice(name, namespace, body))

    def delete_endpoint_slice(self, namespace: str, name: str) -> None:
        self.discovery.delete_namespaced_endpoint_slice(name, namespace)

    def backend(self, namespace: str, name: str, backends: Sequence[EchoBackend], port: int = 80) -> None:
        """A Service C{name} and one EndpointSlice C{name}-1 with the (ready) echo backends,
        which must all listen on one port number."""
        ports = {b.port for b in backends}
        assert len(ports) == 1, f"one EndpointSlice has one port list: {ports}"
        self.create_service(namespace, name, port=port, target_port=ports.pop())
        self.put_endpoint_slice(namespace, f"{name}-1", name, [b.host for b in backends], backends[0].port)

    # IngressClasses (cluster-scoped)

    @staticmethod
    def ingress_class_body(name: str, controller: str = CONTROLLER, default: Optional[bool] = None) -> dict:
        """The shipped IngressClass (k8s/ingressclass.yaml); another name or controller for the
        tests of other classes, the default-class annotation when C{default} is given."""
        body = yaml.safe_load(SHIPPED_INGRESS_CLASS.read_text())
        body["metadata"]["name"] = name
        body["metadata"]["annotations"] = {} if default is None else {DEFAULT_CLASS_ANNOTATION: "true" if default else "false"}
        body["spec"]["controller"] = controller
        return body

    def put_ingress_class(self, name: str, controller: str = CONTROLLER, default: Optional[bool] = None) -> dict:
        """Create the IngressClass, or replace it (controller is immutable: a different one is
        deleted and created anew)."""
        body = self.ingress_class_body(name, controller, default)
        try:
            return self._dict(self.networking.create_ingress_class(body))
        except ApiException as e:
            if e.status != 409:
                raise
        current = self.networking.read_ingress_class(name)
        if current.spec.controller != controller:
            self.delete_ingress_class(name)
            wait_until(lambda: gone(lambda: self.networking.read_ingress_class(name)), 30, f"IngressClass {name} deleted")
            return self._dict(self.networking.create_ingress_class(body))
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        return self._dict(self.networking.replace_ingress_class(name, body))

    def set_default_class(self, name: str, default: bool) -> dict:
        """Set the is-default-class annotation to "true" or "false" (a merge patch)."""
        patch = {"metadata": {"annotations": {DEFAULT_CLASS_ANNOTATION: "true" if default else "false"}}}
        return self._dict(self.networking.patch_ingress_class(name, patch))

    def delete_ingress_class(self, name: str) -> None:
        _ignore_404(lambda: self.networking.delete_ingress_class(name))

    # Ingresses

    @staticmethod
    def ingress_body(
        namespace: str,
        name: str,
        host: Optional[str],
        service: str,
        path: str = "/",
        path_type: str = "Prefix",
        class_name: Optional[str] = INGRESS_CLASS,
        port: int = 80,
    ) -> dict:
        rule: dict[str, Any] = {
            "http": {
                "paths": [
                    {"path": path, "pathType": path_type, "backend": {"service": {"name": service, "port": {"number": port}}}}
                ]
            }
        }
        if host:
            rule["host"] = host
        spec: dict[str, Any] = {"rules": [rule]}
        if class_name:
            spec["ingressClassName"] = class_name
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }

    def create_ingress(self, namespace: str, name: str, host: Optional[str], service: str, **kwargs: Any) -> dict:
        body = self.ingress_body(namespace, name, host, service, **kwargs)
        return self._dict(self.networking.create_namespaced_ingress(namespace, body))

    def replace_ingress(self, namespace: str, name: str, host: Optional[str], service: str, **kwargs: Any) -> dict:
        """Replace the whole spec (read-modify-write with the current resourceVersion)."""
        body = self.ingress_body(namespace, name, host, service, **kwargs)
        current = self.networking.read_namespaced_ingress(name, namespace)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        return self._dict(self.networking.replace_namespaced_ingress(name, namespace, body))

    def delete_ingress(self, namespace: str, name: str) -> None:
        self.networking.delete_namespaced_ingress(name, namespace)

    def read_ingress(self, namespace: str, name: str) -> dict:
        return self._dict(self.networking.read_namespaced_ingress(name, namespace))

    def ingress_exists(self, namespace: str, name: str) -> bool:
        return not gone(lambda: self.networking.read_namespaced_ingress(name, namespace))

    # ConfigMaps (churn that moves resourceVersions on)

    def churn(self, namespace: str, count: int = 5) -> None:
        """Create and delete C{count} ConfigMaps: etcd's revision moves on by 2 * count."""
        for _ in range(count):
            name = f"churn-{uuid.uuid4().hex[:8]}"
            self.core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"k": "v"}})
            self.core.delete_namespaced_config_map(name, namespace)

    # internals

    def _dict(self, obj: Any) -> dict:
        return self.api.sanitize_for_serialization(obj)



def gone(read: Callable[[], Any]) -> bool:
    """True when reading the object answers 404; any other error is raised."""
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def _ignore_404(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as e:
        if e.status != 404:
            raise


# --- a relay in front of the apiserver -----------------------------------------------------------------


class TcpRelay:
    """
    A TCP relay on 127.0.0.1 to C{target}: what twingress talks to when a test must cut its
    connections to the apiserver (TLS passes through untouched; the apiserver's certificate
    names 127.0.0.1, whatever the port).

    - L{cut}: reset every open connection (both sides see it end at once, mid-stream);
    - L{block}: accept and reset new connections too (the API is unreachable for the proxy
      while other clients, the test's, still reach it); L{unblock} heals that.
    """

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.bind((host, 0))
        self.listener.listen(64)
        self.host = host
        self.port = int(self.listener.getsockname()[1])
        self.blocked = False
        self.accepted = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._half_closed: dict[tuple[socket.socket, socket.socket], int] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name=f"relay-{self.port}", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self.blocked:
                self.refused += 1
                _reset(downstream)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(downstream)
                continue
            pair = (downstream, upstream)
            with self._lock:
                self._pairs.add(pair)
                self.accepted += 1
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(pair, source, sink), daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket], source: socket.socket, sink: socket.socket) -> None:
        """Copy one direction; an orderly end is passed on as a half-close, an error resets both."""
        clean = False
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            clean = True
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            clean = False
        with self._lock:
            known = pair in self._pairs
            done = self._half_closed.get(pair, 0) + 1
            if known:
                self._half_closed[pair] = done
            finished = known and (not clean or done == 2)
            if finished:
                self._pairs.discard(pair)
                self._half_closed.pop(pair, None)
        if finished:
            for sock in pair:
                if clean:
                    with contextlib.suppress(OSError):
                        sock.close()
                else:
                    _reset(sock)

    def cut(self) -> int:
        """Reset every open connection; returns how many there were."""
        with self._lock:
            pairs = list(self._pairs)
            self._pairs.clear()
            self._half_closed.clear()
        for pair in pairs:
            for sock in pair:
                _reset(sock)
        return len(pairs)

    def block(self) -> None:
        self.blocked = True
        self.cut()

    def unblock(self) -> None:
        self.blocked = False

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.cut()


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), waking any thread blocked reading it."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def relayed_kubeconfig(kubeconfig: Path, relay: TcpRelay, path: Path) -> Path:
    """A copy of C{kubeconfig} whose server is the relay (same CA and client credentials)."""
    document = json.loads(Path(kubeconfig).read_text())  # cluster.py writes JSON
    for entry in document["clusters"]:
        entry["cluster"]["server"] = f"https://{relay.host}:{relay.port}"
    path.write_text(json.dumps(document, indent=2))
    path.chmod(0o600)
    return path


# --- fixtures ---------------------------------------------------------------------------------------------


def pod_ips() -> list[str]:
    """The pod-like addresses of the test network namespace, except the apiserver's."""
    found = os.environ.get("TWINGRESS_POD_IPS", "").split()
    return [ip for ip in found if ip != "10.244.0.1"]


_pod_ip_cycle: Optional[Iterator[str]] = None


def next_pod_ip() -> str:
    global _pod_ip_cycle
    if _pod_ip_cycle is None:
        addresses = pod_ips()
        if not addresses:
            pytest.fail(
                "TWINGRESS_POD_IPS is empty: run the kube tests inside testenv/netns-run "
                "(the apiserver rejects loopback EndpointSlice addresses)",
                pytrace=False,
            )
        _pod_ip_cycle = itertools.cycle(addresses)
    return next(_pod_ip_cycle)


@pytest.fixture
def kube(kube_cluster) -> Iterator[Kube]:
    api = Kube(kube_cluster.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def namespace(kube: Kube, request) -> Iterator[str]:
    """A fresh namespace for this test, deleted afterwards."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(name)
    yield name
    kube.delete_namespace(name)


@pytest.fixture
def echo() -> Iterator[Callable[..., EchoBackend]]:
    """A factory of echo backends, each on the next pod-like address: C{echo("pod-a")}.
    C{port} puts it on a given port (an EndpointSlice has one port for all its endpoints)."""
    started: list[EchoBackend] = []

    def start(name: str, port: Optional[int] = None) -> EchoBackend:
        host = next_pod_ip()
        if port is None:
            port = free_port(host)
        backend = EchoBackend(name, host, port)
        started.append(backend)
        return backend

    yield start
    for backend in started:
        backend.stop()


class _LogSections:
    """Attaches the logs of the twingress processes a test started to its report if it fails."""

    def __init__(self) -> None:
        self.by_item: dict[str, list[KubeTwingress]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed:
            for index, process in enumerate(self.by_item.get(item.nodeid, ())):
                with contextlib.suppress(Exception):
                    tail = process.log()[-LOG_TAIL_CHARS:]
                    report.sections.append((f"twingress log #{index} ({process.log_path})", tail))
        if report.when == "teardown":
            self.by_item.pop(item.nodeid, None)


def _log_sections(config_: pytest.Config) -> _LogSections:
    plugin = config_.pluginmanager.get_plugin("twingress-kube-logs")
    if plugin is None:
        plugin = _LogSections()
        config_.pluginmanager.register(plugin, "twingress-kube-logs")
    return plugin


@pytest.fixture
def twingress(kube_cluster, request, tmp_path) -> Iterator[Callable[..., KubeTwingress]]:
    """
    A factory: C{twingress(*args, kubeconfig=None)} starts twingress against the test cluster
    (or through another kubeconfig, e.g. a relay's) and waits until it is ready. Every process
    is stopped at the end; a failing test's report carries their logs.
    """
    sections = _log_sections(request.config)
    started: list[KubeTwingress] = []
    sections.by_item[request.node.nodeid] = started
    counter = itertools.count()

    def start(*args: str, kubeconfig: Optional[Path] = None, ready_timeout: float = READY_TIMEOUT) -> KubeTwingress:
        log_path = tmp_path / f"twingress-{next(counter)}.log"
        process = KubeTwingress(kubeconfig or kube_cluster.kubeconfig, *args, log_path=log_path, ready_timeout=ready_timeout)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def ingress_classes(kube: Kube) -> Iterator[Callable[..., dict]]:
    """C{ingress_classes(name, controller=..., default=None)} creates or replaces a
    (cluster-scoped) IngressClass; every one is deleted at the end of the test."""
    names: list[str] = []

    def put(name: str, controller: str = CONTROLLER, default: Optional[bool] = None) -> dict:
        names.append(name)
        return kube.put_ingress_class(name, controller, default)

    yield put
    for name in dict.fromkeys(names):
        kube.delete_ingress_class(name)


@pytest.fixture
def relay(kube_cluster) -> Iterator[TcpRelay]:
    """A L{TcpRelay} to the apiserver's secure port."""
    relay = TcpRelay(("127.0.0.1", kube_cluster.apiserver_port))
    yield relay
    relay.close()


@pytest.fixture
def relayed(kube_cluster, relay: TcpRelay, tmp_path: Path) -> Path:
    """A kubeconfig that reaches the apiserver through L{relay}."""
    return relayed_kubeconfig(kube_cluster.kubeconfig, relay, tmp_path / "relayed.kubeconfig")


def host_for(namespace: str, name: str) -> str:
    """A host name no other test uses."""
    return f"{name}.{namespace}.test"


def all_informers(informers: dict[str, dict], key: str, value: bool, kinds: Iterable[str] = ("Ingress", "IngressClass", "Service", "EndpointSlice", "Secret")) -> bool:
    """True when every one of C{kinds} is in C{informers} with C{key} equal to C{value}."""
    return all(kind in informers and informers[kind].get(key) is value for kind in kinds)
