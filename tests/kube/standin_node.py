"""
A stand-in node for the Gateway API conformance suite: it plays kube-scheduler and kubelet for
the suite's pods, on the test's real apiserver, without a container runtime.

The suite deploys its backends as Deployments of images (echo-basic, CoreDNS) that cannot be
pulled here. The real kube-controller-manager turns the Deployments into pods and the pods into
EndpointSlices; this node does the rest, as a node would:

- registers a Node (Ready, InternalIP 10.244.0.1) and binds every pending pod of the suite's
  namespaces (C{gateway-conformance-*}) to it, through the C{binding} subresource;
- runs each pod's container as the process its image would start: the upstream echo server
  (C{conformance/echo-basic}, built from the suite's own module by testenv/gateway-conformance.sh)
  for the echo-basic image, a DNS stand-in for CoreDNS; with the container's environment
  (C{fieldRef}s resolved), its secret and ConfigMap volumes written to a directory (environment
  values under a mount path point there: there is no mount namespace);
- gives each pod a network namespace of its own with its address (from 10.244.1.0/24, a range
  the other kube tests do not use) on a veth pair, routed from the test's namespace, so every pod
  listens on its own ports as in a cluster;
- writes the pod's status (Running, Ready, podIP) once its process listens, and finishes a pod's
  deletion (kills the process, deletes with grace period 0), as the kubelet confirms it;
- serves the containers' output on the kubelet's C{/containerLogs/} endpoint (HTTPS on the Node's
  address, named in its C{daemonEndpoints}): the apiserver's C{pods/log} reads it there (the
  suite's mirror tests look for the mirrored request in the mirror backend's log).

testenv/README.md lists what it fakes that a real node does differently.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import ipaddress
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.kube import pki

NODE_NAME = "conformance-node"
NODE_ADDRESS = "10.244.0.1"
POD_NETWORK = ipaddress.ip_network("10.244.1.0/24")
NAMESPACE_PREFIX = "gateway-conformance-"
POLL_INTERVAL = 0.2
READY_TIMEOUT = 30.0

ECHO_IMAGE = "gateway-api/echo-basic"
DNS_IMAGE = "coredns/coredns"


@dataclass
class RunningPod:
    """One pod's process and network plumbing."""

    uid: str
    namespace: str
    name: str
    address: str
    process: subprocess.Popen[bytes]
    host_link: str
    started: float = field(default_factory=time.monotonic)
    ready_written: bool = False


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


class StandInNode:
    """
    The node's loop on a thread of its own: C{start()} registers the Node and starts the loop,
    C{stop()} ends it and every pod process. C{binaries}: {"echo": path, "dns": path}.
    """

    def __init__(self, kubeconfig: Path, workdir: Path, binaries: dict[str, Path]) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.workdir = Path(workdir)
        self.binaries = binaries
        self.pods: dict[str, RunningPod] = {}
        self.problems: list[str] = []
        self._addresses: Iterator[ipaddress.IPv4Address | ipaddress.IPv6Address] = POD_NETWORK.hosts()
        self._links = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="standin-node", daemon=True)
        self._own_netns = os.readlink("/proc/self/ns/net")

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> StandInNode:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._logs = self._serve_logs()
        self._register()
        self._thread.start()
        return self

    def _serve_logs(self) -> http.server.ThreadingHTTPServer:
        """The kubelet's /containerLogs/<namespace>/<pod>/<container> (the whole log: sinceTime is not kept)."""
        key, cert = pki.certificate(pki.name(NODE_NAME), None, usage=ExtendedKeyUsageOID.SERVER_AUTH, ips=(NODE_ADDRESS,))
        cert_file = pki.write(self.workdir / "kubelet.crt", pki.pem_cert(cert))
        key_file = pki.write(self.workdir / "kubelet.key", pki.pem_key(key), private=True)
        node = self

        class Logs(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parts = self.path.split("?", 1)[0].strip("/").split("/")
                found = [p for p in list(node.pods.values()) if parts[:1] == ["containerLogs"] and parts[1:3] == [p.namespace, p.name]]
                if not found:
                    self.send_error(404)
                    return
                body = (node.workdir / found[0].uid / "log").read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
                pass

        server = http.server.ThreadingHTTPServer((NODE_ADDRESS, 0), Logs)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert_file), str(key_file))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, name="standin-kubelet-logs", daemon=True).start()
        return server

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for pod in list(self.pods.values()):
            self._kill(pod)
        self.pods.clear()
        self._logs.shutdown()
        self._logs.server_close()
        with contextlib.suppress(ApiException):
            self.core.delete_node(NODE_NAME)
        self.api.close()

    def _register(self) -> None:
        body = {"metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}}, "spec": {"podCIDR": str(POD_NETWORK)}}
        try:
            self.core.create_node(body)
        except ApiException as error:
            if error.status != 409:
                raise
        now = _now()
        status = {
            "conditions": [{"type": "Ready", "status": "True", "reason": "StandInNode", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": NODE_ADDRESS}],  # no Hostname: the apiserver would try that name first
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self._logs.server_address[1]}},
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "250"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "250"},
        }
        self.core.patch_node_status(NODE_NAME, {"status": status})

    # -- the loop ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(POLL_INTERVAL):
            try:
                self._sync()
            except Exception as error:  # noqa: BLE001 - a node keeps going; the problem is reported
                self.problems.append(f"{type(error).__name__}: {error}")

    def _sync(self) -> None:
        pods = [p for p in self.core.list_pod_for_all_namespaces().items if p.metadata.namespace.startswith(NAMESPACE_PREFIX)]
        seen = set()
        for pod in pods:
            uid = pod.metadata.uid
            seen.add(uid)
            if pod.metadata.deletion_timestamp is not None:
                self._finish_deletion(pod)
            elif not pod.spec.node_name:
                self._bind(pod)
            elif pod.spec.node_name == NODE_NAME:
                running = self.pods.get(uid)
                if running is None:
                    self._start_pod(pod)
                elif not running.ready_written:
                    self._write_ready(pod, running)
        for uid in [uid for uid in self.pods if uid not in seen]:  # deleted behind our back
            self._kill(self.pods.pop(uid))

    def _bind(self, pod: Any) -> None:
        body = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
        }
        try:
            self.core.create_namespaced_binding(pod.metadata.namespace, body, _preload_content=False)
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _finish_deletion(self, pod: Any) -> None:
        running = self.pods.pop(pod.metadata.uid, None)
        if running is not None:
            self._kill(running)
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0,
                body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.metadata.uid)),
            )

    # -- a pod's process --------------------------------------------------------------------------

    def _command(self, container: Any) -> Optional[list[str]]:
        image = container.image.rsplit(":", 1)[0]
        if image.endswith(ECHO_IMAGE):
            return [str(self.binaries["echo"])]
        if image.endswith(DNS_IMAGE):
            return [str(self.binaries["dns"])]
        return None

    def _start_pod(self, pod: Any) -> None:
        uid = pod.metadata.uid
        container = pod.spec.containers[0]
        command = self._command(container)
        if command is None:
            message = f"{pod.metadata.namespace}/{pod.metadata.name}: no stand-in for image {container.image}"
            if message not in self.problems:
                self.problems.append(message)
            return
        address = str(next(self._addresses))
        pod_dir = self.workdir / uid
        mounts = self._volumes(pod, container, pod_dir)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for variable in container.env or ():
            env[variable.name] = self._env_value(pod, variable, address, mounts)
        log = open(pod_dir / "log", "ab")  # noqa: SIM115 - the process owns it
        process = subprocess.Popen(
            ["unshare", "--net", "--", *command], env=env, cwd=pod_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        self._links += 1
        running = RunningPod(uid, pod.metadata.namespace, pod.metadata.name, address, process, f"sin{self._links}")
        self.pods[uid] = running
        try:
            self._plumb(running)
        except (subprocess.CalledProcessError, TimeoutError) as error:
            detail = getattr(error, "stderr", "") or ""
            self.problems.append(f"{pod.metadata.namespace}/{pod.metadata.name}: network setup failed: {error} {detail}")
            self._kill(self.pods.pop(uid))

    def _volumes(self, pod: Any, container: Any, pod_dir: Path) -> dict[str, Path]:
        """Write the pod's secret and ConfigMap volumes; {mountPath: directory}."""
        pod_dir.mkdir(parents=True, exist_ok=True)
        directories: dict[str, Path] = {}
        for volume in pod.spec.volumes or ():
            data: dict[str, str] = {}
            items = None
            if volume.secret is not None:
                secret = self.core.read_namespaced_secret(volume.secret.secret_name, pod.metadata.namespace)
                data = {k: base64.b64decode(v).decode("latin-1") for k, v in (secret.data or {}).items()}
                items = volume.secret.items
            elif volume.config_map is not None:
                data = dict(self.core.read_namespaced_config_map(volume.config_map.name, pod.metadata.namespace).data or {})
                items = volume.config_map.items
            else:
                continue
            directory = pod_dir / "volumes" / volume.name
            directory.mkdir(parents=True, exist_ok=True)
            pairs = [(item.key, item.path) for item in items] if items else [(key, key) for key in data]
            for key, path in pairs:
                (directory / path).write_bytes(data[key].encode("latin-1"))
            directories[volume.name] = directory
        mounts = {}
        for mount in container.volume_mounts or ():
            if mount.name in directories:
                mounts[mount.mount_path.rstrip("/")] = directories[mount.name]
        return mounts

    def _env_value(self, pod: Any, variable: Any, address: str, mounts: dict[str, Path]) -> str:
        if variable.value_from is None:
            value = variable.value or ""
            for mount_path, directory in mounts.items():
                if value == mount_path or value.startswith(mount_path + "/"):
                    return str(directory) + value[len(mount_path):]
            return value
        field_ref = variable.value_from.field_ref
        if field_ref is None:
            raise ValueError(f"{pod.metadata.name}: env {variable.name}: only fieldRef is supported")
        return {
            "metadata.name": pod.metadata.name,
            "metadata.namespace": pod.metadata.namespace,
            "metadata.uid": pod.metadata.uid,
            "spec.nodeName": NODE_NAME,
            "spec.serviceAccountName": pod.spec.service_account_name or "default",
            "status.podIP": address,
            "status.hostIP": NODE_ADDRESS,
        }[field_ref.field_path]

    def _plumb(self, pod: RunningPod) -> None:
        """The pod's network namespace (made by unshare): a veth pair, its address, routes both ways."""
        pid = str(pod.process.pid)
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{pid}/ns/net") == self._own_netns:  # unshare has not unshared yet
            if time.monotonic() > deadline or pod.process.poll() is not None:
                raise TimeoutError("the pod's process did not enter a network namespace of its own")
            time.sleep(0.01)
        _run("ip", "link", "add", pod.host_link, "type", "veth", "peer", "name", "eth0", "netns", pid)
        _run("ip", "link", "set", pod.host_link, "up")
        _run("ip", "route", "add", f"{pod.address}/32", "dev", pod.host_link, "src", NODE_ADDRESS)
        inside = ("nsenter", "-t", pid, "-n")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{pod.address}/32", "dev", "eth0")
        _run(*inside, "ip", "link", "set", "eth0", "up")
        _run(*inside, "ip", "route", "add", "default", "dev", "eth0")

    def _listening(self, pod: RunningPod) -> bool:
        """True once the pod's process listens on a TCP port or has bound a UDP port."""
        pid = pod.process.pid
        for table, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
            try:
                rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                return False
            if any(row.split()[3] == state for row in rows):
                return True
        return False

    def _write_ready(self, pod: Any, running: RunningPod) -> None:
        if running.process.poll() is not None:
            self.problems.append(f"{running.namespace}/{running.name}: exited with {running.process.returncode}")
            self.pods.pop(running.uid)
            return  # started again on the next pass, as the kubelet restarts a container
        if not self._listening(running):
            return
        now = _now()
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]
        statuses = [
            {
                "name": c.name, "image": c.image, "imageID": c.image, "ready": True, "started": True, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in pod.spec.containers
        ]
        status = {
            "phase": "Running", "hostIP": NODE_ADDRESS, "hostIPs": [{"ip": NODE_ADDRESS}], "podIP": running.address,
            "podIPs": [{"ip": running.address}], "startTime": now, "conditions": conditions, "containerStatuses": statuses,
        }
        self.core.patch_namespaced_pod_status(running.name, running.namespace, {"status": status})
        running.ready_written = True

    def _kill(self, pod: RunningPod) -> None:
        if pod.process.poll() is None:
            pod.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            pod.process.wait(5)
        with contextlib.suppress(subprocess.CalledProcessError):  # gone with the namespace, usually
            _run("ip", "link", "del", pod.host_link)
