"""
An apiserver that goes away, as an operator meets it (issue 61): the log says so once per informer
and in one summary, not once per informer per try (before: 19 informers, 216 warnings in 13 s); and
after a crash (SIGKILL) and a restart every watch is back and a change is live within seconds
(before: an Ingress created right after the restart was served 28.1 s later).

These tests have a control plane of their own, without the StreamIngress and Gateway API CRDs: the
kinds that are not installed must neither slow the others nor flood the log, and the apiserver
they kill and restart is nobody else's.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube import cluster
from tests.kube.api import Kube
from tests.kube.relay import TcpRelay, relayed_kubeconfig
from tests.kube.twingress import KubeTwingress, host_for, wait_until
from tests.support import unavailable

pytestmark = pytest.mark.kube

LIVE_DEADLINE = 10.0
"""From the write right after the restart until the proxy serves it."""

OUTAGE_SECONDS = 20.0
LOG_LINE = re.compile(r"list/watch|informers cannot|leader election: .* (not renewed|answers again)|Retrying \(|ConnectionPool")
"""A line about the connection to the apiserver (ours, or urllib3's own retry warnings)."""
STATUS_INFORMERS = 2
"""The informers of the status addresses (Pod, Node), not in /readyz."""


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory) -> Iterator[cluster.KubeCluster]:
    """etcd, kube-apiserver, kube-controller-manager, and no CRDs."""
    try:
        bin_dir = cluster.bin_dir()
    except OSError as error:
        unavailable(f"cannot locate the kube test binaries: {error}")
    missing = cluster.missing_binaries(bin_dir)
    if missing:
        unavailable(f"kube test binaries missing in {bin_dir}: {', '.join(missing)} (make testenv)")
    control_plane = cluster.KubeCluster(bin_dir, tmp_path_factory.mktemp("bare-kube"), crds=())
    try:
        control_plane.start()
    except cluster.ClusterStartError as error:
        pytest.fail(f"the bare kube test cluster did not start: {error}", pytrace=False)
    try:
        yield control_plane
    finally:
        control_plane.stop()


@pytest.fixture
def bare(bare_cluster: cluster.KubeCluster) -> Iterator[tuple[cluster.KubeCluster, Kube, str]]:
    """The cluster (its apiserver running again after the test), a client, and a fresh namespace."""
    kube = Kube(bare_cluster.kubeconfig)
    namespace = f"outage-{uuid.uuid4().hex[:6]}"
    kube.create_namespace(namespace)
    yield bare_cluster, kube, namespace
    if not bare_cluster.apiserver_running:
        bare_cluster.start_apiserver()
    kube.delete_namespace(namespace)
    kube.close()


@pytest.fixture
def proxies(tmp_path: Path) -> Iterator[list[KubeTwingress]]:
    started: list[KubeTwingress] = []
    yield started
    for proxy in started:
        proxy.stop()


def _start(proxies: list[KubeTwingress], kubeconfig: Path, tmp_path: Path, *args: str) -> KubeTwingress:
    proxy = KubeTwingress(kubeconfig, *args, log_path=tmp_path / f"twingress-{len(proxies)}.log")
    proxies.append(proxy)
    return proxy


def _refused(informer: dict) -> bool:
    """An informer of a kind this cluster does not have (its list answered 404)."""
    return not informer["synced"] and informer.get("lastError", "").startswith("404")


def _installed(proxy: KubeTwingress) -> list[str]:
    return [name for name, informer in proxy.informers().items() if not _refused(informer)]


def _all_connected(proxy: KubeTwingress, names: list[str]) -> bool:
    informers = proxy.informers()
    return all(informers[name]["connected"] for name in names)


def _none_connected(proxy: KubeTwingress) -> bool:
    return not any(informer["connected"] for informer in proxy.informers().values())


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if LOG_LINE.search(line)]


def test_an_unreachable_apiserver_is_one_line_per_informer_change_and_one_summary(bare, echo, proxies, tmp_path) -> None:
    kube_cluster, kube, namespace = bare
    relay = TcpRelay(("127.0.0.1", kube_cluster.apiserver_port))
    try:
        proxy = _start(proxies, relayed_kubeconfig(kube_cluster.kubeconfig, relay, tmp_path / "relayed.kubeconfig"), tmp_path)
        pod = echo("pod-a")
        served = host_for(namespace, "served")
        kube.backend(namespace, "web", [pod])
        kube.create_ingress(namespace, "served", served, "web")
        proxy.wait_status(served, 200, backend="pod-a")
        informers = proxy.informers()
        installed = _installed(proxy)
        assert len(installed) < len(informers), informers  # some kinds are not installed here, and are watched
        before = len(proxy.log())

        # The apiserver cannot be reached (every connection reset) for OUTAGE_SECONDS; the last
        # table serves meanwhile.
        relay.block()
        blocked = time.monotonic()
        wait_until(lambda: _none_connected(proxy), 30, "every informer disconnected")
        while time.monotonic() - blocked < OUTAGE_SECONDS:
            response = proxy.get(served)
            assert response.status == 200 and response.backend == "pod-a", response
            status, body = proxy.readyz()
            assert status == 200, body  # the kinds not installed fail otherwise now: still no reason to be unready
            time.sleep(0.5)  # not a wait: the outage lasts OUTAGE_SECONDS, and it keeps serving all along
        outage = _lines(proxy.log()[before:])
        print(f"{len(outage)} lines about list/watch in {time.monotonic() - blocked:.1f} s of outage, {len(informers)} informers")
        names = re.findall(r"\] (.+?): list/watch failed: ", "\n".join(outage))
        assert len(names) == len(set(names)) and set(installed) <= set(names), outage  # each once
        # One line per informer that was connected, at most one summary (every 30 s) and one line of
        # the leader election: before, every informer logged every try (about one a second each).
        assert len(outage) <= len(installed) + STATUS_INFORMERS + 2, outage

        relay.unblock()
        during = len(proxy.log())
        after = host_for(namespace, "after")
        kube.create_ingress(namespace, "after", after, "web")
        wait_until(lambda: _all_connected(proxy, installed), 60, "every installed kind's informer connected again")
        proxy.wait_status(after, 200, backend="pod-a")
        wait_until(lambda: "answers every informer again" in proxy.log()[during:], 30, "the end of the outage logged")
        back = _lines(proxy.log()[during:])
        print(f"{len(back)} lines about list/watch when it came back")
        names = re.findall(r"\] (.+?): list/watch works again after ", "\n".join(back))
        assert len(names) == len(set(names)) and set(installed) <= set(names), back
        assert len(back) <= len(installed) + STATUS_INFORMERS + 1, back
    finally:
        relay.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_change_right_after_an_apiserver_sigkill_and_restart_is_live_within_seconds(bare, echo, proxies, tmp_path, workers) -> None:
    kube_cluster, kube, namespace = bare
    proxy = _start(proxies, kube_cluster.kubeconfig, tmp_path, "--workers", workers)
    pod = echo("pod-a")
    before, after = host_for(namespace, "before"), host_for(namespace, "after")
    kube.backend(namespace, "web", [pod])
    kube.create_ingress(namespace, "before", before, "web")
    proxy.wait_status(before, 200, backend="pod-a")
    installed = _installed(proxy)
    wait_until(lambda: _all_connected(proxy, installed), 30, "every installed kind's informer connected")

    logged = len(proxy.log())
    killed = time.monotonic()
    kube_cluster.stop_apiserver(graceful=False)
    kube_cluster.start_apiserver()  # returns once /readyz is ok (and the controller-manager restarted)
    written = time.monotonic()
    kube.create_ingress(namespace, "after", after, "web")
    try:
        proxy.wait_status(after, 200, backend="pod-a", timeout=LIVE_DEADLINE)
    finally:
        live = time.monotonic()
        print(
            f"--workers {workers}: apiserver down and back in {written - killed:.1f} s; the Ingress written then "
            f"was live {live - written:.1f} s later ({live - killed:.1f} s after the kill)"
        )
        print("\n".join(_lines(proxy.log()[logged:])))
    # Every watch is back: each installed kind's informer is connected, and a change of another
    # kind (the Service goes) shows.
    wait_until(lambda: _all_connected(proxy, installed), LIVE_DEADLINE, "every installed kind's informer connected again")
    kube.delete_service(namespace, "web")
    proxy.wait_status(after, 503, timeout=LIVE_DEADLINE)
