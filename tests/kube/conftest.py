"""Fixtures for tests against a real Kubernetes control plane (see tests/kube/cluster.py).

``kube_cluster`` (session scope) starts etcd, kube-apiserver and kube-controller-manager from
the binaries that ``testenv/build.sh`` builds. When they are missing, tests that use it are
skipped, or fail when TWINGRESS_REQUIRE_KUBE=1 (as ``make test`` should set). Tests that use
it are marked ``kube`` automatically (``-m "not kube"`` deselects them).

``kube_node`` (session scope) joins a real node to it (tests/kube/node.py: containerd, kubelet,
kube-scheduler, kube-proxy, CNI bridge); tests that use it are marked ``node`` too.

Run the tests inside ``testenv/netns-run`` so that the pod-like addresses 10.244.0.N exist.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

import pytest

from tests.deploy.conftest import REPORT_KEY
from tests.kube import cluster
from tests.kube import node as kube_node_module
from tests.kube.api import Kube
from tests.kube.gateway_support import CONTROLLER as GATEWAY_CONTROLLER
from tests.kube.gateway_support import GROUP, VERSION, GatewayAPI
from tests.kube.relay import TcpRelay, relayed_kubeconfig
from tests.kube.streams_support import StreamEchoes, Streams
from tests.kube.twingress import CONTROLLER, READY_TIMEOUT, KubeTwingress, log_sections, next_pod_ip
from tests.support import EchoBackend, free_port, unavailable


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "kube_cluster" in names:
            item.add_marker(pytest.mark.kube)
        if "kube_node" in names:
            item.add_marker(pytest.mark.node)




@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Lines for the run's "deploy" summary (tests/deploy/conftest.py prints it), shown whether the case passes or not."""
    return request.config.stash.setdefault(REPORT_KEY, []).append


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory):
    """A running control plane: a ``cluster.KubeCluster`` (``kubeconfig``, ``server``,
    ``bin_dir``, ``etcd_endpoint``, ``stop_apiserver()``, ``start_apiserver()``, ...)."""
    try:
        bin_dir = cluster.bin_dir()
    except (OSError, subprocess.CalledProcessError) as e:
        unavailable(f"cannot locate the kube test binaries with testenv/build.sh: {e}")
    missing = cluster.missing_binaries(bin_dir)
    if missing:
        unavailable(
            f"kube test binaries missing in {bin_dir}: {', '.join(missing)}. "
            "Build them with `make testenv` or `testenv/build.sh` (needs Go >= 1.26; "
            "the first build takes a while)"
        )

    control_plane = cluster.KubeCluster(bin_dir, tmp_path_factory.mktemp("kube"))
    try:
        control_plane.start()
    except cluster.ClusterStartError as e:
        print(e, file=sys.stderr)
        pytest.fail(f"the kube test cluster did not start: {e}", pytrace=False)
    if not control_plane.in_netns:
        print(
            f"kube_cluster: {cluster.POD_NETWORK_ADDRESS} does not exist here, so the apiserver "
            "advertises 127.0.0.1; run the tests under testenv/netns-run for pod addresses",
            file=sys.stderr,
        )
    try:
        yield control_plane
    finally:
        control_plane.stop()
        shutil.rmtree(control_plane.etcd_data_dir, ignore_errors=True)  # logs and pki stay


@pytest.fixture(scope="session")
def kube_node(kube_cluster, tmp_path_factory) -> Iterator[kube_node_module.KubeNode]:
    """A real node joined to ``kube_cluster`` and Ready: a ``node.KubeNode`` (``kubectl()``,
    ``apply()``, ``load_image()``, ``address``, ``name``, ``pod_cidr``, ``echo_image``, ...).
    Containerd, kubelet, kube-scheduler and kube-proxy run in the test network namespace; see
    tests/kube/node.py and testenv/README.md for what the machine must have."""
    try:
        runtime_dir = kube_node_module.node_dir()
    except (OSError, subprocess.CalledProcessError) as e:
        unavailable(f"cannot locate the test node's runtime with testenv/node.sh: {e}")
    lacking = kube_node_module.missing(kube_cluster.bin_dir, runtime_dir)
    if lacking:
        unavailable(f"the test node cannot start here, it lacks: {'; '.join(lacking)}")
    node = kube_node_module.KubeNode(kube_cluster, runtime_dir, tmp_path_factory.mktemp("node"), os.environ[kube_node_module.NODE_IP_ENV])
    try:
        node.start()
    except (cluster.ClusterStartError, OSError) as e:
        # The machine has what the node needs on paper, and still it did not come up (a kernel
        # or cgroup setup it was not made for): a skip that says why, a failure in CI.
        print(e, file=sys.stderr)
        unavailable(f"the test node did not start (logs in {kube_cluster.log_dir}): {e}")
    kube_node_module.print_startup(node)
    try:
        yield node
    finally:
        node.stop()


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


@pytest.fixture
def twingress(kube_cluster, request, tmp_path) -> Iterator[Callable[..., KubeTwingress]]:
    """
    A factory: C{twingress(*args, kubeconfig=None)} starts twingress against the test cluster
    (or through another kubeconfig, e.g. a relay's) and waits until it is ready. Every process
    is stopped at the end; a failing test's report carries their logs.
    """
    sections = log_sections(request.config)
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


@pytest.fixture
def streams(kube_cluster) -> Iterator[Streams]:
    api = Streams(kube_cluster.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def stream_echoes() -> Iterator[StreamEchoes]:
    echoes = StreamEchoes()
    yield echoes
    echoes.close()


@pytest.fixture
def gateway_api(kube: Kube) -> GatewayAPI:
    return GatewayAPI(kube)


@pytest.fixture
def gateway_class(gateway_api: GatewayAPI) -> Iterator[str]:
    """A GatewayClass of our controller, named for the test (cluster-scoped), deleted after it."""
    name = f"twingress-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GatewayClass", "metadata": {"name": name}, "spec": {"controllerName": GATEWAY_CONTROLLER}}
    gateway_api.create("gatewayclasses", body)
    yield name
    gateway_api.delete_class(name)
