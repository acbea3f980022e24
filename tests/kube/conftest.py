"""Fixtures for tests against a real Kubernetes control plane (see tests/kube/cluster.py).

``kube_cluster`` (session scope) starts etcd, kube-apiserver and kube-controller-manager from
the binaries that ``testenv/build.sh`` builds. When they are missing, tests that use it are
skipped, or fail when TWINGRESS_REQUIRE_KUBE=1 (as ``make test`` should set). Tests that use
it are marked ``kube`` automatically (``-m "not kube"`` deselects them).

Run the tests inside ``testenv/netns-run`` so that the pod-like addresses 10.244.0.N exist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.kube import cluster
from tests.kube import twingress as _fixtures

# The fixtures of tests/kube/twingress.py, for every kube test module without imports.
kube, namespace, echo, twingress = _fixtures.kube, _fixtures.namespace, _fixtures.echo, _fixtures.twingress
ingress_classes, relay, relayed = _fixtures.ingress_classes, _fixtures.relay, _fixtures.relayed

REQUIRE_ENV = "TWINGRESS_REQUIRE_KUBE"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "kube_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kube)


def _unavailable(message: str):
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory):
    """A running control plane: a ``cluster.KubeCluster`` (``kubeconfig``, ``server``,
    ``bin_dir``, ``etcd_endpoint``, ``stop_apiserver()``, ``start_apiserver()``, ...)."""
    try:
        bin_dir = cluster.bin_dir()
    except (OSError, subprocess.CalledProcessError) as e:
        _unavailable(f"cannot locate the kube test binaries with testenv/build.sh: {e}")
    missing = cluster.missing_binaries(bin_dir)
    if missing:
        _unavailable(
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
