"""A real Kubernetes node joined to the test control plane: containerd 2 + runc, the reference CNI
bridge, kubelet, kube-scheduler and kube-proxy, all in the test run's network namespace.

containerd, its shims and our pause/echo images come from ``testenv/node.sh``; kubelet,
kube-scheduler, kube-proxy and kubectl from ``testenv/build.sh`` (the apiserver's module). The
configuration (``node_config.py``) keeps the node's state under a work directory of the test run;
what the node still leaves on the host (mounts, cgroups, processes) is taken back by
``node_host.py`` at stop, and at the next start when a run was killed.

Use (fixture ``kube_node``): ``node.kubectl("apply", "-f", "-", input=yaml_text)``,
``node.load_image("localhost/twingress:dev")`` (a podman image) or ``node.load_image(path)`` (an
image archive), ``node.address`` (the node's InternalIP, where hostNetwork pods listen),
``node.pod_cidr``, ``node.name``.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path
from typing import Optional

from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.kube import node_config as config
from tests.kube import node_host, pki
from tests.kube.cluster import REPO_ROOT, KubeCluster
from tests.kube.processes import ClusterStartError, Component, urlopen
from tests.support import free_port

NODE_SCRIPT = REPO_ROOT / "testenv" / "node.sh"
NODE_DIR_ENV = "TWINGRESS_NODE_DIR"
NODE_IP_ENV = "TWINGRESS_NODE_IP"
NODE_NAME = "twingress-node"
KUBE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy", "kubectl")
RUNTIME_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
IMAGE_ARCHIVES = ("pause.tar", "echo.tar")
HOST_COMMANDS = ("iptables", "ip6tables", "podman")
CONTAINERD_NAMESPACE = "k8s.io"


def node_dir() -> Path:
    """Where testenv/node.sh put containerd and the images: $TWINGRESS_NODE_DIR, else its --print-dir."""
    override = os.environ.get(NODE_DIR_ENV)
    if override:
        return Path(override)
    out = subprocess.run([str(NODE_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def missing(kube_bin_dir: Path, runtime_dir: Path) -> list[str]:
    """What the node needs and this machine lacks, each with the way to get it."""
    lacks = [f"{b} (make testenv)" for b in KUBE_BINARIES if not os.access(kube_bin_dir / b, os.X_OK)]
    lacks += [f"{b} (testenv/node.sh)" for b in RUNTIME_BINARIES if not os.access(runtime_dir / "bin" / b, os.X_OK)]
    lacks += [f"images/{a} (testenv/node.sh)" for a in IMAGE_ARCHIVES if not (runtime_dir / "images" / a).is_file()]
    if not os.access(config.RUNC, os.X_OK):
        lacks.append(f"{config.RUNC} (Debian runc: make system-packages)")
    if not any(os.access(Path(d) / "bridge", os.X_OK) for d in config.CNI_BIN_DIRS):
        lacks.append("the CNI bridge plugin (Debian containernetworking-plugins: make system-packages)")
    lacks += [f"{c} (make system-packages)" for c in HOST_COMMANDS if shutil.which(c) is None]
    if os.geteuid() != 0:
        lacks.append("root (the node mounts, creates cgroups and network devices)")
    if not os.environ.get(NODE_IP_ENV):
        lacks.append(f"${NODE_IP_ENV} (run under testenv/netns-run)")
    if not node_host.hierarchies():
        lacks.append("cgroup hierarchies under /sys/fs/cgroup")
    return lacks


class KubeNode:
    """One node (containerd, kubelet, kube-scheduler, kube-proxy) joined to CLUSTER."""

    def __init__(self, cluster: KubeCluster, runtime_dir: Path, workdir: Path, address: str, *, name: str = NODE_NAME, ready_timeout: float = 90.0):
        self.cluster = cluster
        self.runtime_dir = runtime_dir
        self.workdir = workdir
        self.paths = config.NodePaths(workdir)
        self.address = address
        self.name = name
        self.pod_cidr = config.POD_CIDR
        self.ready_timeout = ready_timeout
        self.log_dir = cluster.log_dir
        self.pki_dir = workdir / "pki"
        self.kubeconfig = cluster.kubeconfig  # admin: what tests apply manifests with
        self.kubectl_binary = cluster.bin_dir / "kubectl"
        self.ctr_binary = runtime_dir / "bin" / "ctr"
        self.pause_image = config.PAUSE_IMAGE
        self.echo_image = config.ECHO_IMAGE
        self.startup_seconds: dict[str, float] = {}
        self.reclaimed: list[str] = []
        self._run: Optional[node_host.NodeRun] = None
        self._components: list[Component] = []

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> KubeNode:
        """Reclaim what killed runs left, then start containerd, kubelet, kube-scheduler and
        kube-proxy and wait until the Node is Ready. On failure everything is stopped again and
        ClusterStartError says why (with the tail of the failing component's log)."""
        t0 = time.monotonic()
        try:
            self.reclaimed = node_host.reclaim_stale()
            self._run = node_host.new_run(self.workdir)
            node_host.make_cgroup(self._run, "runtime")
            self._write_files()
            self._step("files", t0)
            self._start_containerd()
            self._start_kubelet()
            self._start_control()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds["total"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop the components, then kill what they left (containers, shims), unmount and remove
        the cgroups. Idempotent."""
        for component in reversed(self._components):
            component.stop(timeout=5.0)
        self._components.clear()
        if self._run is not None:
            node_host.reclaim(self._run)
            self._run = None

    def _step(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.startup_seconds[name] = now - since
        return now

    def _component(self, name: str, argv: list[str], **kwargs) -> Component:
        component = Component(name, argv, self.log_dir / f"{name}.log", **kwargs)
        self._components.append(component)
        component.start()
        return component

    # -- files --------------------------------------------------------------------------------

    def _write_files(self) -> None:
        p = self.paths
        for d in (self.pki_dir, p.cni_conf_dir, p.cni_ipam_dir, p.kubelet_root, p.pod_logs, p.containerd_root, p.containerd_state):
            d.mkdir(parents=True, exist_ok=True)
        self._write_credentials()
        cni_dirs = [d for d in config.CNI_BIN_DIRS if Path(d).is_dir()]
        (self.workdir / "containerd.toml").write_text(config.containerd_config(p, cni_dirs))
        (p.cni_conf_dir / "10-twingress.conflist").write_text(json.dumps(config.cni_conflist(p), indent=2))
        assert self._run is not None
        settings = config.KubeletSettings(
            name=self.name, address=self.address, cgroup_root=self._run.cgroup_path, ca_file=self.cluster.ca_file,
            tls_cert_file=self.pki_dir / "kubelet-serving.crt", tls_key_file=self.pki_dir / "kubelet-serving.key",
            healthz_port=free_port(),
        )
        self.kubelet_healthz_port = settings.healthz_port
        (self.workdir / "kubelet.json").write_text(json.dumps(config.kubelet_config(p, settings), indent=2))
        self.proxy_healthz_port = free_port()
        proxy = config.kube_proxy_config(self.workdir / "kube-proxy.kubeconfig", self.name, self.proxy_healthz_port, free_port())
        (self.workdir / "kube-proxy.json").write_text(json.dumps(proxy, indent=2))

    def _write_credentials(self) -> None:
        """Client certificates signed by the cluster's CA, each for the identity the bootstrap RBAC
        expects (the Node authorizer for the kubelet), and the kubelet's serving certificate."""
        ca = self.cluster.ca
        assert ca is not None, "the cluster was not started"
        client = ExtendedKeyUsageOID.CLIENT_AUTH
        identities = {
            "kubelet": pki.name(f"system:node:{self.name}", "system:nodes"),
            "kube-scheduler": pki.name("system:kube-scheduler"),
            "kube-proxy": pki.name("system:kube-proxy"),
        }
        for stem, subject in identities.items():
            key, cert = pki.certificate(subject, ca, usage=client)
            pki.write(self.pki_dir / f"{stem}.crt", pki.pem_cert(cert))
            pki.write(self.pki_dir / f"{stem}.key", pki.pem_key(key), private=True)
            self.cluster._write_kubeconfig(self.workdir / f"{stem}.kubeconfig", stem, self.pki_dir / f"{stem}.crt", self.pki_dir / f"{stem}.key")
        key, cert = pki.certificate(pki.name(self.name), ca, usage=ExtendedKeyUsageOID.SERVER_AUTH, names=[self.name], ips=[self.address])
        pki.write(self.pki_dir / "kubelet-serving.crt", pki.pem_cert(cert))
        pki.write(self.pki_dir / "kubelet-serving.key", pki.pem_key(key), private=True)

    # -- containerd ---------------------------------------------------------------------------

    def _start_containerd(self) -> None:
        t = time.monotonic()
        run = self._run
        assert run is not None
        argv = [str(self.runtime_dir / "bin" / "containerd"), f"--config={self.workdir / 'containerd.toml'}", "--log-level=info"]
        # The shims find containerd-shim-runc-v2 on PATH; they and the containers stay in the
        # run's cgroup, which is how stop() and the next run find them.
        env = {**os.environ, "PATH": f"{self.runtime_dir / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        containerd = self._component("containerd", argv, env=env, preexec=lambda: node_host.join_cgroup(run, "runtime"))
        containerd.wait_until(lambda: self.ctr("version").returncode == 0, "ready", 30.0)
        for archive in IMAGE_ARCHIVES:
            self.load_image(self.runtime_dir / "images" / archive)
        self._step("containerd", t)

    def ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """containerd's ctr in the CRI namespace (k8s.io); never raises for its exit status."""
        argv = [str(self.ctr_binary), f"--address={self.paths.containerd_socket}", f"--namespace={CONTAINERD_NAMESPACE}", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def load_image(self, image: str | Path) -> None:
        """Make IMAGE available to the node's pods (use imagePullPolicy IfNotPresent or Never: no
        registry is reachable). IMAGE is an image archive (docker-archive or OCI, e.g. from
        ``podman save``), or the name of an image in podman's store (``localhost/twingress:dev``),
        which is saved to an archive first."""
        archive = Path(image)
        if archive.is_file():
            self._import(archive)
            return
        with tempfile.TemporaryDirectory(dir=self.workdir) as scratch:
            archive = Path(scratch) / "image.tar"
            env = {**os.environ, "CONTAINERS_CONF": str(self.runtime_dir / "containers.conf")}
            saved = subprocess.run(["podman", "save", "--quiet", "--format", "docker-archive", "-o", str(archive), str(image)], capture_output=True, text=True, env=env, timeout=300)
            if saved.returncode != 0:
                raise ClusterStartError(f"podman save {image} failed: {saved.stderr.strip()}")
            self._import(archive)

    def _import(self, archive: Path) -> None:
        done = self.ctr("images", "import", "--local", str(archive))
        if done.returncode != 0:
            raise ClusterStartError(f"ctr images import {archive} failed: {done.stderr.strip() or done.stdout.strip()}")

    # -- kubelet, scheduler, proxy --------------------------------------------------------------

    def _start_kubelet(self) -> None:
        t = time.monotonic()
        argv = [
            str(self.cluster.bin_dir / "kubelet"),
            f"--config={self.workdir / 'kubelet.json'}",
            f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
            f"--root-dir={self.paths.kubelet_root}",
            f"--cert-dir={self.pki_dir}",
            f"--node-ip={self.address}",
            f"--hostname-override={self.name}",
            "--v=1",
        ]
        kubelet = self._component("kubelet", argv)
        kubelet.wait_until(lambda: self._healthy(f"http://127.0.0.1:{self.kubelet_healthz_port}/healthz"), "healthy", 60.0)
        self._step("kubelet", t)

    def _start_control(self) -> None:
        t = time.monotonic()
        scheduler_port = free_port()
        scheduler = self._component("kube-scheduler", [
            str(self.cluster.bin_dir / "kube-scheduler"),
            f"--kubeconfig={self.workdir / 'kube-scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={scheduler_port}",
            f"--cert-dir={self.workdir / 'scheduler-certs'}",
            "--profiling=false",
        ])
        proxy = self._component("kube-proxy", [str(self.cluster.bin_dir / "kube-proxy"), f"--config={self.workdir / 'kube-proxy.json'}"])
        scheduler.wait_until(lambda: self._healthy(f"https://127.0.0.1:{scheduler_port}/healthz", insecure=True), "healthy", 60.0)
        proxy.wait_until(lambda: self._healthy(f"http://127.0.0.1:{self.proxy_healthz_port}/healthz"), "healthy", 60.0)
        self._step("scheduler+proxy", t)

    @staticmethod
    def _healthy(url: str, insecure: bool = False) -> bool:
        context = None
        if insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        try:
            with urlopen(url, context=context, timeout=2) as response:
                return response.status == 200
        except urllib.error.HTTPError:
            return False

    def node_object(self) -> dict:
        with urlopen(f"{self.cluster.server}/api/v1/nodes/{self.name}", context=self.cluster.admin_ssl_context()) as response:
            return json.load(response)

    def ready(self) -> bool:
        """Ready, and schedulable: the node-lifecycle controller has lifted the not-ready taint
        that kubelet registers the Node with."""
        node = self.node_object()
        conditions = node.get("status", {}).get("conditions") or []
        taints = node.get("spec", {}).get("taints") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints)

    def _wait_ready(self) -> None:
        t = time.monotonic()
        kubelet = next(c for c in self._components if c.name == "kubelet")
        kubelet.wait_until(self._ready_or_missing, "Ready", self.ready_timeout)
        self._step("ready", t)

    def _ready_or_missing(self) -> bool:
        try:
            return self.ready()
        except urllib.error.HTTPError as error:
            if error.code == 404:  # not registered yet
                return False
            raise

    # -- kubectl --------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: Optional[str] = None, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """kubectl (built from the apiserver's module) with the admin kubeconfig; with CHECK a
        failure raises AssertionError carrying kubectl's output."""
        argv = [str(self.kubectl_binary), f"--kubeconfig={self.kubeconfig}", *args]
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def apply(self, manifest: str) -> str:
        """kubectl apply -f - of MANIFEST (YAML or JSON text); kubectl's output."""
        return self.kubectl("apply", "-f", "-", input=manifest).stdout

    def describe_startup(self) -> str:
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in self.startup_seconds.items())
        return f"kube_node: {self.name} at {self.address} Ready ({steps})"


def print_startup(node: KubeNode) -> None:
    print(node.describe_startup(), file=sys.stderr)


ECHO_PORT = 8080


def echo_deployment(name: str, namespace: str, image: str, replicas: int) -> dict:
    env = [{"name": "PORT", "value": str(ECHO_PORT)}] + [
        {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for var, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"), ("POD_IP", "status.podIP"))
    ]
    container = {
        "name": "echo",
        "image": image,
        "imagePullPolicy": "Never",  # imported into the node's containerd; there is no registry
        "env": env,
        "ports": [{"containerPort": ECHO_PORT, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
    }
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container], "terminationGracePeriodSeconds": 1}},
        },
    }
