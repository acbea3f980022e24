"""The configuration files of the test node: containerd, the CNI network, kubelet, kube-proxy.

Pure functions from a few values to file contents, each setting commented where it departs from a
production node because of this machine (cgroup v1 hierarchies, no CAP_SYS_RESOURCE, no registry,
a private network namespace shared with the tests) or to keep the node's state in the test run's
work directory instead of the host's /var/lib and /run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

POD_CIDR = "10.244.1.0/24"
POD_GATEWAY = "10.244.1.1"
BRIDGE = "cni-twingress0"
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")  # Debian's containernetworking-plugins, then the usual place
RUNC = "/usr/sbin/runc"
PAUSE_IMAGE = "localhost/twingress-pause:test"
ECHO_IMAGE = "localhost/twingress-echo:test"


@dataclass(frozen=True)
class NodePaths:
    """Where one node run keeps its state: all under its work directory."""

    workdir: Path

    @property
    def containerd_root(self) -> Path:
        return self.workdir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.workdir / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.workdir / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.workdir / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.workdir / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.workdir / "pod-logs"


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def containerd_config(paths: NodePaths, cni_bin_dirs: list[str]) -> str:
    """containerd 2.x (config version 4): the CRI plugin on runc with cgroupfs, our pause image,
    state under the work directory, nothing that raises limits the sandbox may not raise."""
    q = toml_string
    return f"""version = 4
root = {q(str(paths.containerd_root))}
state = {q(str(paths.containerd_state))}
imports = []  # not the host's /etc/containerd/conf.d
# NRI listens on a fixed host path (/var/run/nri); the node needs no plugins.
disabled_plugins = ["io.containerd.nri.v1.nri"]

[plugins."io.containerd.server.v1.grpc"]
  address = {q(str(paths.containerd_socket))}

[plugins."io.containerd.server.v1.ttrpc"]
  address = {q(str(paths.containerd_socket) + ".ttrpc")}

[plugins."io.containerd.internal.v1.opt"]
  path = {q(str(paths.workdir / "containerd" / "opt"))}

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # Never pulled: no registry is reachable. testenv/node.sh builds it, the fixture imports it.
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {q(PAUSE_IMAGE)}

[plugins."io.containerd.cri.v1.runtime"]
  # The process lacks CAP_SYS_RESOURCE: no container may get an oom_score_adj below containerd's.
  restrict_oom_score_adj = true
  # Network namespaces bind-mounted under the state dir, not the host's /var/run/netns.
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        # Debian's runc: crun refuses cgroup v1 hierarchies in hybrid mode.
        BinaryName = {q(RUNC)}
        Root = {q(str(paths.containerd_state / "runc"))}
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = {json.dumps(cni_bin_dirs)}
    conf_dir = {q(str(paths.cni_conf_dir))}
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_conflist(paths: NodePaths) -> dict:
    """The reference plugins: a bridge with host-local addresses from POD_CIDR (the bridge is the
    pods' gateway, so the node's network namespace, the tests', reaches every pod), and portmap
    for hostPort."""
    return {
        "cniVersion": "1.0.0",
        "name": "twingress-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,  # nothing outside the namespace to reach
                "hairpinMode": True,  # a pod reaches itself through a Service
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.cni_ipam_dir),  # not the host's /var/lib/cni/networks
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


@dataclass(frozen=True)
class KubeletSettings:
    name: str
    address: str
    cgroup_root: str
    ca_file: Path
    tls_cert_file: Path
    tls_key_file: Path
    healthz_port: int


def kubelet_config(paths: NodePaths, s: KubeletSettings) -> dict:
    """A KubeletConfiguration (kubelet.config.k8s.io/v1beta1) for this machine."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The machine has cgroup v1 hierarchies; kubelet 1.35+ refuses them unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",  # the same as containerd's runc (SystemdCgroup = false)
        "cgroupRoot": s.cgroup_root,  # one subtree per run (tests/kube/node_host.py)
        "cgroupsPerQOS": True,
        "failSwapOn": False,
        "oomScoreAdj": 0,  # lowering it needs CAP_SYS_RESOURCE
        "address": s.address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": s.healthz_port,
        "tlsCertFile": str(s.tls_cert_file),
        "tlsPrivateKeyFile": str(s.tls_key_file),
        "rotateCertificates": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(s.ca_file)},  # the apiserver's kubelet-client certificate
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "imageServiceEndpoint": f"unix://{paths.containerd_socket}",
        "podLogsDir": str(paths.pod_logs),
        "resolvConf": "",  # no DNS in the test network namespace
        "clusterDomain": "cluster.local",
        "registerNode": True,
        "serializeImagePulls": False,
        # The disk is shared with the whole machine: no evictions or image GC for its fill level
        # (the images are imported, there is nowhere to pull them from again).
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "protectKernelDefaults": False,
        "localStorageCapacityIsolation": True,
    }


def kube_proxy_config(kubeconfig: Path, name: str, healthz_port: int, metrics_port: int) -> dict:
    """A KubeProxyConfiguration: iptables mode in the test network namespace, conntrack left as the
    kernel has it (its sysctls are not writable from a non-initial network namespace)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": name,
        "clusterCIDR": POD_CIDR,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
            "udpTimeout": "0s",
            "udpStreamTimeout": "0s",
        },
        "iptables": {"minSyncPeriod": "0s", "syncPeriod": "30s"},
    }
