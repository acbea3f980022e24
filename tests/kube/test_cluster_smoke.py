"""The test control plane works: objects round-trip, and garbage collection runs."""

from __future__ import annotations

import ipaddress
import uuid

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.kube.api import gone
from tests.waiting import eventually

pytestmark = pytest.mark.kube

POLL_TIMEOUT = 60.0


def wait_for(predicate, what: str, timeout: float = POLL_TIMEOUT, interval: float = 0.2):
    """L{eventually} at this module's pace: the apiserver's controllers act within a minute."""
    return eventually(predicate, what, timeout=timeout, interval=interval)


@pytest.fixture
def api(kube_cluster):
    api_client = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def namespace(api):
    core = client.CoreV1Api(api)
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise


def test_service_and_endpointslice_round_trip_and_gc(api, namespace):
    core = client.CoreV1Api(api)
    discovery = client.DiscoveryV1Api(api)

    service = core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(  # no selector: endpoints are ours to write
                ports=[client.V1ServicePort(name="http", port=80, target_port=8080)],
            ),
        ),
    )
    assert ipaddress.ip_address(service.spec.cluster_ip) in ipaddress.ip_network("10.96.0.0/16")

    discovery.create_namespaced_endpoint_slice(
        namespace,
        client.V1EndpointSlice(
            metadata=client.V1ObjectMeta(
                name="web-1", labels={"kubernetes.io/service-name": "web"}
            ),
            address_type="IPv4",
            endpoints=[
                client.V1Endpoint(
                    addresses=["10.244.0.5"], conditions=client.V1EndpointConditions(ready=True)
                )
            ],
            ports=[client.DiscoveryV1EndpointPort(name="http", port=8080, protocol="TCP")],
        ),
    )

    read = core.read_namespaced_service("web", namespace)
    assert read.metadata.uid == service.metadata.uid
    assert read.spec.selector is None
    assert [(p.name, p.port, p.target_port) for p in read.spec.ports] == [("http", 80, 8080)]

    slices = discovery.list_namespaced_endpoint_slice(
        namespace, label_selector="kubernetes.io/service-name=web"
    ).items
    assert [s.metadata.name for s in slices] == ["web-1"]
    assert [e.addresses for e in slices[0].endpoints] == [["10.244.0.5"]]
    assert slices[0].endpoints[0].conditions.ready is True
    assert [(p.name, p.port) for p in slices[0].ports] == [("http", 8080)]

    # Garbage collection (kube-controller-manager): a dependent goes with its owner.
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name="owned-by-web",
                owner_references=[
                    client.V1OwnerReference(
                        api_version="v1", kind="Service", name="web", uid=service.metadata.uid
                    )
                ],
            ),
            data={"k": "v"},
        ),
    )
    core.delete_namespaced_service("web", namespace)
    wait_for(
        lambda: gone(lambda: core.read_namespaced_config_map("owned-by-web", namespace)),
        "the garbage collector to delete the ConfigMap owned by the deleted Service",
    )


def test_namespace_deletion_finishes(api):
    """The namespace controller empties and removes deleted namespaces."""
    core = client.CoreV1Api(api)
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(
        name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"), data={"a": "b"})
    )
    core.delete_namespace(name)
    wait_for(lambda: gone(lambda: core.read_namespace(name)), f"namespace {name} to go away")


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
def test_apiserver_restart_keeps_port_and_data(kube_cluster, api, namespace, graceful):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"), data={"a": "1"})
    )

    kube_cluster.stop_apiserver(graceful=graceful)
    try:
        assert not kube_cluster.apiserver_running
        with pytest.raises(urllib3.exceptions.HTTPError):  # refused or timed out: no API answered
            core.read_namespaced_config_map("kept", namespace, _request_timeout=2)
    finally:
        kube_cluster.start_apiserver()

    assert kube_cluster.apiserver_running
    assert core.read_namespaced_config_map("kept", namespace).data == {"a": "1"}


def test_etcd_compaction(kube_cluster, api, namespace):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"a": "1"})
    )
    revision = kube_cluster.compact_etcd()
    assert revision > 0
    # Reads still work after compaction.
    assert core.read_namespaced_config_map("c", namespace).data == {"a": "1"}
