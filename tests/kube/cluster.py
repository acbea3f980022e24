"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager.

The binaries come from ``testenv/build.sh`` (a cache directory keyed by version). Everything a
run needs (certificates, keys, kubeconfigs, etcd data, logs) is generated into a work directory
at start; nothing secret is committed.

Inside ``testenv/netns-run`` the pod-like address 10.244.0.1 exists on ``lo``: the apiserver then
listens on all addresses of the private namespace and advertises 10.244.0.1. Outside it, the
apiserver listens on and advertises 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.kube import pki
from tests.kube.processes import ClusterStartError, Component, urlopen
from tests.support import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "testenv" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
BIN_DIR_ENV = "TWINGRESS_KUBE_BIN_DIR"

POD_NETWORK_ADDRESS = "10.244.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The workload controllers, root-ca-cert-publisher (the kube-root-ca.crt ConfigMap that every
# pod's ServiceAccount volume projects) and nodelifecycle (it lifts the not-ready taint a kubelet
# registers with) serve the node (tests/kube/node.py); the tests' own
# Services have no selector, so the endpointslice controller leaves their slices alone.
CONTROLLERS = (
    "garbagecollector,namespace,serviceaccount-token,serviceaccount,"
    "deployment,replicaset,daemonset,endpointslice,root-ca-cert-publisher,nodelifecycle"
)

LOG_TAIL_LINES = 40

CRDS = (REPO_ROOT / "k8s" / "base" / "streamingress-crd.yaml",)
"""Installed at start, from the files we ship (one source of truth for the schema)."""

GATEWAY_API_SCRIPT = REPO_ROOT / "testenv" / "gateway-api.sh"
GATEWAY_API_KINDS = ("gatewayclasses", "gateways", "httproutes", "grpcroutes", "tlsroutes", "tcproutes", "udproutes", "referencegrants")


def gateway_api_crds() -> tuple[Path, ...]:
    """
    The Gateway API release's CRDs that testenv/gateway-api.sh fetched (make testenv): theirs, not a
    copy, of the experimental channel (v1.6.3's standard HTTPRoute has no rules[].retry), all eight
    of one channel as the conformance suite requires.
    """
    out = subprocess.run([str(GATEWAY_API_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True)
    directory = Path(out.stdout.strip().splitlines()[-1])
    files = tuple(directory / f"gateway.networking.k8s.io_{kind}.yaml" for kind in GATEWAY_API_KINDS)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ClusterStartError(f"Gateway API CRDs missing (run make testenv): {', '.join(missing)}")
    return files


# --- where the binaries are -----------------------------------------------------------------


def bin_dir() -> Path:
    """The directory with the binaries: $TWINGRESS_KUBE_BIN_DIR, else what build.sh names."""
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        return Path(override)
    out = subprocess.run(
        [str(BUILD_SCRIPT), "--print-bin-dir"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Path(out.strip().splitlines()[-1])


def missing_binaries(directory: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(directory / b, os.X_OK)]


def address_exists(address: str) -> bool:
    """True if ADDRESS is assigned to an interface here (we can bind to it)."""
    try:
        with socket.socket() as s:
            s.bind((address, 0))
    except OSError:
        return False
    return True


# --- the cluster --------------------------------------------------------------------------------


class KubeCluster:
    """etcd + kube-apiserver + kube-controller-manager, all in WORKDIR.

    Attributes for tests: ``kubeconfig`` (admin, system:masters), ``server`` (https URL),
    ``bin_dir``, ``etcd_endpoint`` (http URL), ``ca_file``, ``admin_cert_file``,
    ``admin_key_file``, ``advertise_address``, ``in_netns``, ``workdir``, ``log_dir``.
    Methods: ``start()``, ``stop()``, ``stop_apiserver()``, ``start_apiserver()``,
    ``compact_etcd()``.
    """

    def __init__(
        self,
        bin_dir: Path,
        workdir: Path,
        *,
        extra_apiserver_args: list[str] | tuple[str, ...] = (),
        extra_controller_manager_args: list[str] | tuple[str, ...] = (),
        start_timeout: float = 90.0,
        crds: tuple[Path, ...] | None = None,
    ):
        self.bin_dir = Path(bin_dir)
        self.workdir = Path(workdir)
        self.start_timeout = start_timeout
        self.crds = crds  # None: ours and the Gateway API's; () for a cluster without any
        self.pki_dir = self.workdir / "pki"
        self.log_dir = self.workdir / "logs"
        self.etcd_data_dir = self.workdir / "etcd-data"

        self.in_netns = address_exists(POD_NETWORK_ADDRESS)
        self.advertise_address = POD_NETWORK_ADDRESS if self.in_netns else "127.0.0.1"
        # In the private namespace nothing else can reach it, so listen on all its addresses
        # (the advertised one included); outside it, only on loopback.
        self.bind_address = "0.0.0.0" if self.in_netns else "127.0.0.1"

        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.apiserver_port = free_port()
        self.controller_manager_port = free_port()
        self.etcd_endpoint = f"http://127.0.0.1:{self.etcd_port}"
        self.server = f"https://127.0.0.1:{self.apiserver_port}"

        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.controller_manager_kubeconfig = self.workdir / "controller-manager.kubeconfig"
        self.ca_file = self.pki_dir / "ca.crt"
        self.admin_cert_file = self.pki_dir / "admin.crt"
        self.admin_key_file = self.pki_dir / "admin.key"

        self._extra_apiserver_args = list(extra_apiserver_args)
        self._extra_controller_manager_args = list(extra_controller_manager_args)
        self._etcd: Component | None = None
        self._apiserver: Component | None = None
        self._controller_manager: Component | None = None
        self.startup_seconds: dict[str, float] = {}
        # The CA's (key, certificate), kept in memory only: tests/kube/node.py signs the node's
        # credentials with it.
        self.ca: tuple | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> KubeCluster:
        """Generate credentials, start all three components and wait for them. On failure,
        everything already started is stopped and ClusterStartError says why."""
        t0 = time.monotonic()
        try:
            for d in (self.pki_dir, self.log_dir, self.etcd_data_dir):
                d.mkdir(parents=True, exist_ok=True)
            self._generate_credentials()
            self.startup_seconds["credentials"] = time.monotonic() - t0

            t = time.monotonic()
            self._etcd = Component("etcd", self._etcd_argv(), self.log_dir / "etcd.log")
            self._etcd.start()
            self._etcd.wait_until(self._etcd_healthy, "healthy", self.start_timeout)
            self.startup_seconds["etcd"] = time.monotonic() - t

            t = time.monotonic()
            self._apiserver = Component(
                "kube-apiserver", self._apiserver_argv(), self.log_dir / "kube-apiserver.log"
            )
            self.start_apiserver()
            self.startup_seconds["kube-apiserver"] = time.monotonic() - t

            t = time.monotonic()
            self._controller_manager = Component(
                "kube-controller-manager",
                self._controller_manager_argv(),
                self.log_dir / "kube-controller-manager.log",
            )
            self._controller_manager.start()
            self._controller_manager.wait_until(
                self._controller_manager_healthy, "healthy", self.start_timeout
            )
            self.startup_seconds["kube-controller-manager"] = time.monotonic() - t

            t = time.monotonic()
            for crd in CRDS + gateway_api_crds() if self.crds is None else self.crds:
                self.install_crd(crd)
            self.startup_seconds["crds"] = time.monotonic() - t
        except BaseException:
            self.stop()
            raise
        self.startup_seconds["total"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop everything (terminate, then kill after a grace period); idempotent."""
        for component in (self._controller_manager, self._apiserver, self._etcd):
            if component is not None:
                component.stop()

    def stop_apiserver(self, graceful: bool = True) -> None:
        """Stop kube-apiserver only (etcd and its data stay); new connections are refused.
        graceful=False kills it (SIGKILL) like a crash: open connections break at once."""
        assert self._apiserver is not None, "the cluster was not started"
        self._apiserver.stop(timeout=10.0 if graceful else 0.0)

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on the same port, with the same etcd data, and wait until
        /readyz answers ok; on a restart, kube-controller-manager starts afresh too."""
        assert self._apiserver is not None, "the cluster was not started"
        self._apiserver.start()
        self._apiserver.wait_until(self._apiserver_ready, "ready", self.start_timeout)
        if self._controller_manager is not None:
            self._restart_controller_manager()

    def _restart_controller_manager(self) -> None:
        """Start kube-controller-manager afresh after an apiserver restart, so the next test
        meets a control plane as quick as a new one. While the apiserver was down, its reflectors
        backed off (up to 30 s each) and every failed sync grew a per-object retry delay; after a
        run of restarts (tests/kube/test_faults.py) its EndpointSlice informer lagged its own writes
        ("EndpointSlice informer cache is out of date", six times per Service) and the retries
        put the conformance suite's gRPC backends in their EndpointSlices 64 s after their
        Deployments: GRPCExactMethodMatching met "no endpoint" for its whole 30 s."""
        assert self._controller_manager is not None
        self._controller_manager.stop()
        self._controller_manager.start()
        self._controller_manager.wait_until(self._controller_manager_healthy, "healthy", self.start_timeout)

    @property
    def apiserver_running(self) -> bool:
        return self._apiserver is not None and self._apiserver.running

    def __enter__(self) -> KubeCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def install_crd(self, path: Path) -> None:
        """Create the CustomResourceDefinition in C{path} and wait until it is Established
        (before that, its resource answers 404)."""
        body = yaml.safe_load(path.read_text())
        request = urllib.request.Request(
            self.server + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urlopen(request, context=self.admin_ssl_context(), timeout=10):
                pass
        except urllib.error.HTTPError as error:
            raise ClusterStartError(f"CRD {path.name} rejected: {error.code} {error.read()[:2000]!r}") from None
        url = f"{self.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{body['metadata']['name']}"

        def established() -> bool:
            with urlopen(url, context=self.admin_ssl_context()) as response:
                conditions = (json.load(response).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        assert self._apiserver is not None
        self._apiserver.wait_until(established, f"CRD {body['metadata']['name']} established", self.start_timeout)

    # -- etcd ---------------------------------------------------------------------------------

    def _etcd_post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            self.etcd_endpoint + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urlopen(request, timeout=10) as response:
            return json.load(response)

    def etcd_revision(self) -> int:
        status = self._etcd_post("/v3/maintenance/status", {})
        return int(status["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (so that older resourceVersions
        are gone: watches from them get 410 Gone once the apiserver's watch cache has moved
        on). Returns the revision compacted to."""
        revision = self.etcd_revision()
        self._etcd_post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    # -- internals ----------------------------------------------------------------------------

    def _generate_credentials(self) -> None:
        directory = self.pki_dir
        ca = self.ca = pki.certificate(pki.name("twingress-test-ca"))
        server = ExtendedKeyUsageOID.SERVER_AUTH
        client = ExtendedKeyUsageOID.CLIENT_AUTH
        # With --use-service-account-credentials=false every controller acts as the
        # controller-manager user, and the bootstrap role system:kube-controller-manager does
        # not cover what they do (the garbage collector deletes anything): make it an admin.
        for stem, (key, cert) in {
            "ca": ca,
            "apiserver": pki.certificate(
                pki.name("kube-apiserver"), ca, usage=server,
                names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                       "kubernetes.default.svc.cluster.local"],
                ips=sorted({"127.0.0.1", self.advertise_address, "10.96.0.1"}),
            ),
            "admin": pki.certificate(pki.name("twingress-test-admin", "system:masters"), ca, usage=client),
            "controller-manager": pki.certificate(
                pki.name("system:kube-controller-manager", "system:masters"), ca, usage=client
            ),
            # The apiserver's client identity towards kubelets (logs, exec, port-forward).
            "apiserver-kubelet-client": pki.certificate(
                pki.name("kube-apiserver-kubelet-client", "system:masters"), ca, usage=client
            ),
        }.items():
            pki.write(directory / f"{stem}.crt", pki.pem_cert(cert))
            if stem != "ca":
                pki.write(directory / f"{stem}.key", pki.pem_key(key), private=True)

        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pki.write(directory / "sa.key", pki.pem_key(sa_key), private=True)
        pki.write(
            directory / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

        self._write_kubeconfig(self.kubeconfig, "admin", self.admin_cert_file, self.admin_key_file)
        self._write_kubeconfig(
            self.controller_manager_kubeconfig,
            "kube-controller-manager",
            directory / "controller-manager.crt",
            directory / "controller-manager.key",
        )

    def _write_kubeconfig(self, path: Path, user: str, cert: Path, key: Path) -> None:
        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "twingress-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self.ca_file),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(cert),
                        "client-key-data": b64(key),
                    },
                }
            ],
            "contexts": [
                {"name": user, "context": {"cluster": "twingress-test", "user": user}}
            ],
            "current-context": user,
            "preferences": {},
        }
        # JSON is YAML; every kubeconfig reader accepts it.
        pki.write(path, json.dumps(config, indent=2).encode(), private=True)

    def _etcd_argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self.bin_dir / "etcd"),
            "--name=test",
            f"--data-dir={self.etcd_data_dir}",
            f"--listen-client-urls={self.etcd_endpoint}",
            f"--advertise-client-urls={self.etcd_endpoint}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # test data: speed over durability
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        directory = self.pki_dir
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_endpoint}",
            f"--bind-address={self.bind_address}",
            f"--secure-port={self.apiserver_port}",
            f"--advertise-address={self.advertise_address}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={directory / 'apiserver.crt'}",
            f"--tls-private-key-file={directory / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            f"--kubelet-client-certificate={directory / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={directory / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={directory / 'sa.pub'}",
            f"--service-account-signing-key-file={directory / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # On SIGTERM, end open watches within 2s instead of waiting (up to a minute) for
            # the clients to close them: stop_apiserver() then takes about a second.
            "--shutdown-watch-termination-grace-period=2s",
            "--profiling=false",
            *self._extra_apiserver_args,
        ]

    def _controller_manager_argv(self) -> list[str]:
        directory = self.pki_dir
        kubeconfig = self.controller_manager_kubeconfig
        return [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.controller_manager_port}",
            f"--cert-dir={self.workdir / 'controller-manager-certs'}",
            f"--controllers={CONTROLLERS}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            f"--service-account-private-key-file={directory / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            # nodelifecycle is there to lift the not-ready taint of the test node; the Nodes other
            # tests create without a kubelet must never turn Unknown (their pods NotReady) mid-test.
            "--node-monitor-grace-period=24h",
            "--node-startup-grace-period=24h",
            "--profiling=false",
            *self._extra_controller_manager_args,
        ]

    def _etcd_healthy(self) -> bool:
        with urlopen(self.etcd_endpoint + "/health", timeout=2) as response:
            return json.load(response).get("health") == "true"

    def admin_ssl_context(self) -> ssl.SSLContext:
        """An SSL context that trusts the test CA and presents the admin certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin_cert_file), str(self.admin_key_file))
        return context

    def _apiserver_ready(self) -> bool:
        try:
            with urlopen(self.server + "/readyz", context=self.admin_ssl_context()) as response:
                return response.status == 200
        except urllib.error.HTTPError:  # 500 while post-start hooks are still running
            return False

    def _controller_manager_healthy(self) -> bool:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # self-signed serving cert
        url = f"https://127.0.0.1:{self.controller_manager_port}/healthz"
        try:
            with urlopen(url, context=context) as response:
                return response.status == 200
        except urllib.error.HTTPError:
            return False
