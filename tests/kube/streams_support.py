"""
StreamIngresses and the ingress-nginx stream ConfigMaps in the test cluster, for the stream tests.

- L{Streams}: create, replace, delete and read StreamIngresses (plain dict bodies, through the
  C{kubernetes} client's custom objects API) and the tcp/udp-services ConfigMaps.
- L{stream_entry}, L{wait_stream}: the C{streams} part of /debug/routes, and waiting on it.
- L{StreamEchoes}: TCP and UDP echo servers (threads, stdlib sockets) on pod-like addresses,
  each answering with its name first, so a test sees which endpoint a stream reached.
- L{streams}, L{stream_echoes} (fixtures).
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Callable
from typing import Any, Optional

from kubernetes import client, config

from tests.kube.api import retry_conflicts
from tests.kube.twingress import CONVERGE_TIMEOUT, KubeTwingress, wait_until

GROUP, VERSION, PLURAL = "twingress.io", "v1alpha1", "streamingresses"


def stream_body(
    namespace: str,
    name: str,
    listen: int,
    *,
    service: Optional[str] = None,
    port: Any = 80,
    protocol: Optional[str] = None,
    **spec: Any,
) -> dict:
    """A StreamIngress; C{spec} adds or overrides fields (C{upstream}, C{external}, ...)."""
    upstream: dict[str, Any] = {"port": port}
    if service is not None:
        upstream["service"] = service
    body_spec: dict[str, Any] = {"listen": listen, "upstream": upstream}
    if protocol is not None:
        body_spec["protocol"] = protocol
    body_spec.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamIngress",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body_spec,
    }


class Streams:
    """StreamIngresses and ConfigMaps through the C{kubernetes} client."""

    def __init__(self, kubeconfig: Any) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def close(self) -> None:
        self.api.close()

    def create(self, body: dict) -> dict:
        namespace = body["metadata"]["namespace"]
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def read(self, namespace: str, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def replace(self, body: dict) -> dict:
        """Replace the spec of an existing StreamIngress (its resourceVersion is read first)."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]

        def write() -> dict:
            current = self.read(namespace, name)
            current["spec"] = body["spec"]
            return self.custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, current)

        return retry_conflicts(write)

    def delete(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def table(self, namespace: str) -> dict:
        """The server-side table `kubectl get sing` prints (printer columns)."""
        url = f"{self.api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
        self.api.update_params_for_auth(headers, None, ["BearerToken"], "GET", url, None)
        response = self.api.call_api("GET", url, header_params=headers)
        response.read()
        return json.loads(response.data)

    def put_config_map(self, namespace: str, name: str, data: dict[str, str]) -> dict:
        """Create or replace a ConfigMap with C{data}."""
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}
        try:
            return self.core.replace_namespaced_config_map(name, namespace, body).to_dict()
        except client.ApiException as error:
            if error.status != 404:
                raise
            return self.core.create_namespaced_config_map(namespace, body).to_dict()


def stream_entries(proxy: KubeTwingress) -> dict[str, dict]:
    """/debug/routes "streams": {"TCP/5432": {...}, ...}."""
    return proxy.routes().get("streams", {})


def stream_conditions(proxy: KubeTwingress, namespace: str, name: str) -> dict[str, dict]:
    """The conditions /debug/routes shows for one StreamIngress, by type."""
    found = proxy.routes().get("streamConditions", {}).get(f"{namespace}/{name}", [])
    return {c["type"]: c for c in found}


def wait_stream(
    proxy: KubeTwingress, key: str, check: Callable[[Optional[dict]], bool], what: str, timeout: float = CONVERGE_TIMEOUT
) -> Optional[dict]:
    """Until the /debug/routes stream C{key} ("TCP/5432") satisfies C{check} (None when absent)."""

    def probe() -> Any:
        entry = stream_entries(proxy).get(key)
        if not check(entry):
            raise AssertionError(f"{key}: {entry!r}")
        return entry or True

    return wait_until(probe, timeout, what)


def wait_conditions(
    proxy: KubeTwingress, namespace: str, name: str, expected: dict[str, tuple[str, str]], timeout: float = CONVERGE_TIMEOUT
) -> dict[str, dict]:
    """Until the StreamIngress's conditions include C{expected}: {type: (status, reason)}."""

    def probe() -> dict[str, dict]:
        conditions = stream_conditions(proxy, namespace, name)
        got = {t: (c["status"], c["reason"]) for t, c in conditions.items()}
        if any(got.get(t) != v for t, v in expected.items()):
            raise AssertionError(f"{namespace}/{name}: {got!r}")
        return conditions

    return wait_until(probe, timeout, f"{namespace}/{name} conditions {expected}")


class _TCPEchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(self.server.name + b":")  # type: ignore[attr-defined]
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _UDPEchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, sock = self.request
        sock.sendto(self.server.name + b":" + data, self.client_address)  # type: ignore[attr-defined]


class _TCPEchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = allow_reuse_address = True


class _UDPEchoServer(socketserver.ThreadingUDPServer):
    daemon_threads = allow_reuse_address = True


class StreamEchoes:
    """Echo servers named by the caller, on C{host:port}; all stopped by L{close}."""

    def __init__(self) -> None:
        self.servers: list[socketserver.BaseServer] = []

    def start(self, protocol: str, name: str, host: str, port: int) -> None:
        server: socketserver.BaseServer
        if protocol == "TCP":
            server = _TCPEchoServer((host, port), _TCPEchoHandler)
        else:
            server = _UDPEchoServer((host, port), _UDPEchoHandler)
        server.name = name.encode()  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        self.servers.append(server)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def tcp_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Connect to the proxy's TCP stream port, send C{data}, half-close, read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def udp_exchange(port: int, data: bytes, timeout: float = 2.0) -> bytes:
    """One datagram to the proxy's UDP stream port and the one reply (socket.timeout if none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        sock.send(data)
        return sock.recv(65535)
