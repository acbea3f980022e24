"""
twingress against the real test control plane: the process, the objects it reads, and waits.

- L{KubeTwingress}: C{twistd -n ingress --kubeconfig PATH} as a subprocess on free loopback
  ports, ready when /readyz says 200; its log is attached to the report of a failing test.
- The objects a test writes are in L{tests.kube.api}; the relay that cuts the proxy off the API
  is in L{tests.kube.relay}; the fixtures are in C{tests/kube/conftest.py}.
- L{wait_until}, L{get}, L{metric}: polling, real HTTP requests through the proxy, and
  Prometheus samples from /metrics.

Every test gets its own namespace and hosts named after it (the C{namespace} fixture and
L{host_for}), so the tests of a session never see each other's routes.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from tests.support import ROOT, ProcessExited, Twingress, alive, free_port, twistd_command
from tests.waiting import eventually

SHIPPED_INGRESS_CLASS = ROOT / "k8s" / "base" / "ingressclass.yaml"
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

WORKERS_ENV = "TWINGRESS_TEST_WORKERS"
"""When set (e.g. 2), every twingress of the kube tests runs with that many worker processes."""

_no_proxy_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --- waiting -------------------------------------------------------------------------------------


def wait_until(predicate: Callable[[], Any], timeout: float = CONVERGE_TIMEOUT, what: str = "", interval: float = 0.1) -> Any:
    """
    L{tests.waiting.eventually} with the kube tests' defaults: an API write until it shows
    (C{CONVERGE_TIMEOUT}), polled every 0.1 s. Returns the predicate's first truthy value; an
    exception from it counts as "not yet" (the proxy may be restarting, the apiserver down).
    """
    return eventually(predicate, what or repr(predicate), timeout=timeout, interval=interval)


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
        workers = os.environ.get(WORKERS_ENV)
        extra = ("--workers", workers) if workers else ()  # first: a test's own --workers wins
        command = twistd_command(["--kubeconfig", str(self.kubeconfig)], self.http_port, self.admin_port, (*extra, *args))
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
        def ready() -> bool:
            alive(self.process)
            try:
                status, body = self.admin("/readyz")
            except OSError as error:
                self._last_readyz = repr(error)
                raise
            self._last_readyz = (status, body[:2000])
            return status == 200

        eventually(ready, "/readyz to answer 200", timeout=timeout, interval=0.1, fatal=(ProcessExited,))

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


# --- pod addresses and hosts -------------------------------------------------------------------------


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


def host_for(namespace: str, name: str) -> str:
    """A host name no other test uses."""
    return f"{name}.{namespace}.test"


def all_informers(informers: dict[str, dict], key: str, value: bool, kinds: Iterable[str] = ("Ingress", "IngressClass", "Service", "EndpointSlice", "Secret")) -> bool:
    """True when every one of C{kinds} is in C{informers} with C{key} equal to C{value}."""
    return all(kind in informers and informers[kind].get(key) is value for kind in kinds)



class LogSections:
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


def log_sections(config_: pytest.Config) -> LogSections:
    plugin = config_.pluginmanager.get_plugin("twingress-kube-logs")
    if plugin is None:
        plugin = LogSections()
        config_.pluginmanager.register(plugin, "twingress-kube-logs")
    return plugin

