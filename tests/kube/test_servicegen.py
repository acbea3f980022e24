"""
Service → Ingress generation against the real apiserver and kube-controller-manager.

One twingress per test, holding a Lease of the test's own, with a fixed status address so
the status controller's writes are predictable.
"""

from __future__ import annotations

import pytest

from ingress.controllers.events import EventRecorder
from ingress.controllers.generated import GeneratorConfig
from ingress.controllers.servicegen import ServiceIngressSync
from ingress.controllers.writer import LeaderWriter
from ingress.model.parse import parse_object
from ingress.sources.kube.client import APIError, KubeClient
from ingress.sources.kube.reflector import Store
from tests.kube.api import Kube
from tests.kube.controller_support import (
    GENERATE,
    MANAGED_BY,
    backend_port,
    create_annotated_service,
    events_about,
    host_of,
    is_owned_by,
    read_ingress,
    service_body,
    set_annotations,
    start_controller,
    wait_event,
    wait_ingress,
    wait_no_ingress,
)

STATUS_ADDRESS = ("--publish-status-address", "192.0.2.10")


def test_annotated_service_gets_a_routed_ingress_recreated_deleted_and_collected(kube: Kube, namespace: str, twingress, echo) -> None:
    proxy = start_controller(twingress, namespace, *STATUS_ADDRESS)
    backend = echo("gen-a", port=8080)
    service = create_annotated_service(kube, namespace, "web")
    kube.put_endpoint_slice(namespace, "web-1", "web", [backend.host], 8080)

    # 1. annotated Service → an Ingress owned by it, of our class, that routes traffic
    ingress = wait_ingress(kube, namespace, "web")
    host = f"web.{namespace}.example.com"
    assert host_of(ingress) == host
    assert ingress["spec"]["ingressClassName"] == "twingress"
    assert ingress["metadata"]["labels"][MANAGED_BY[0]] == MANAGED_BY[1]
    assert is_owned_by(ingress, service)
    assert backend_port(ingress) == {"name": "http"}
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["pathType"] == "Prefix"
    assert proxy.wait_status(host, 200, backend="gen-a").backend == "gen-a"
    wait_event(kube, namespace, "web", "IngressCreated")

    # 2. the Ingress deleted by someone → re-created (a new object)
    kube.networking.delete_namespaced_ingress("web", namespace)
    recreated = wait_ingress(kube, namespace, "web", lambda i: i["metadata"]["uid"] != ingress["metadata"]["uid"], "re-created Ingress")
    assert is_owned_by(recreated, service)

    # 3. annotation removed → the Ingress is deleted, and traffic stops
    set_annotations(kube, namespace, "web", {GENERATE: None})
    wait_no_ingress(kube, namespace, "web", what="Ingress deleted after the annotation went")
    proxy.wait_status(host, 404)
    wait_event(kube, namespace, "web", "IngressDeleted")

    # 4. annotation back, then the Service deleted → garbage collection removes the Ingress
    set_annotations(kube, namespace, "web", {GENERATE: "true"})
    wait_ingress(kube, namespace, "web", what="Ingress generated again")
    kube.delete_service(namespace, "web")
    wait_no_ingress(kube, namespace, "web", timeout=60, what="Ingress garbage-collected with its Service")


def test_other_annotation_values_mean_off(kube: Kube, namespace: str, twingress) -> None:
    start_controller(twingress, namespace, *STATUS_ADDRESS)
    for name, value in (("yes", "yes"), ("upper", "True"), ("one", "1")):
        kube.core.create_namespaced_service(namespace, service_body(namespace, name, {GENERATE: value}))
    create_annotated_service(kube, namespace, "on")
    wait_ingress(kube, namespace, "on")
    for name in ("yes", "upper", "one"):  # the "on" Service was synced after them: they had their chance
        assert read_ingress(kube, namespace, name) is None, name


def test_annotations_shape_the_ingress_and_changes_update_it(kube: Kube, namespace: str, twingress) -> None:
    start_controller(twingress, namespace, *STATUS_ADDRESS)
    ports = [{"name": "metrics", "port": 9090}, {"name": "web", "port": 8080}, {"name": "http", "port": 80}]
    kube.core.create_namespaced_service(
        namespace,
        service_body(namespace, "shop", {GENERATE: "true", "ingress/host": "Shop.Example.COM", "ingress/path": "/api", "ingress/tls-secret": "shop-tls"}, ports),
    )
    ingress = wait_ingress(kube, namespace, "shop")
    assert host_of(ingress) == "shop.example.com"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["path"] == "/api"
    assert backend_port(ingress) == {"name": "http"}  # the port named http, not the first
    assert ingress["spec"]["tls"] == [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}]

    set_annotations(kube, namespace, "shop", {"ingress/port": "8080", "ingress/tls-secret": None})
    updated = wait_ingress(kube, namespace, "shop", lambda i: backend_port(i) == {"number": 8080}, "port by number")
    assert "tls" not in updated["spec"]
    set_annotations(kube, namespace, "shop", {"ingress/port": "web"})
    wait_ingress(kube, namespace, "shop", lambda i: backend_port(i) == {"name": "web"}, "port by name")
    wait_event(kube, namespace, "shop", "IngressUpdated")

    # a Service without an http port and no annotation: the first port
    kube.core.create_namespaced_service(namespace, service_body(namespace, "first", {GENERATE: "true"}, ports[:2]))
    assert backend_port(wait_ingress(kube, namespace, "first")) == {"name": "metrics"}


def test_drift_is_restored_but_foreign_metadata_is_kept(kube: Kube, namespace: str, twingress) -> None:
    start_controller(twingress, namespace, *STATUS_ADDRESS)
    create_annotated_service(kube, namespace, "api", host="api.example.com")
    wait_ingress(kube, namespace, "api")
    kube.networking.patch_namespaced_ingress(
        "api",
        namespace,
        {
            "metadata": {"annotations": {"example.com/note": "kept"}, "labels": {"team": "a"}},
            "spec": {"rules": [{"host": "evil.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "other", "port": {"number": 1}}}}]}}]},
        },
    )
    restored = wait_ingress(kube, namespace, "api", lambda i: host_of(i) == "api.example.com", "spec restored")
    assert restored["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "api"
    assert restored["metadata"]["annotations"]["example.com/note"] == "kept"
    assert restored["metadata"]["labels"]["team"] == "a"

    kube.networking.patch_namespaced_ingress("api", namespace, {"metadata": {"labels": {MANAGED_BY[0]: "someone"}}})
    wait_ingress(kube, namespace, "api", lambda i: i["metadata"]["labels"][MANAGED_BY[0]] == MANAGED_BY[1], "our label restored")

    # Removing the controller ownerReference is how a person takes an Ingress over: it is theirs now.
    kube.networking.patch_namespaced_ingress("api", namespace, {"metadata": {"ownerReferences": None}})
    wait_event(kube, namespace, "api", "IngressExists")
    taken = read_ingress(kube, namespace, "api")
    assert taken is not None and not taken["metadata"].get("ownerReferences")


def test_same_name_handwritten_ingress_is_left_alone_with_a_warning(kube: Kube, namespace: str, twingress) -> None:
    start_controller(twingress, namespace, *STATUS_ADDRESS)
    kube.create_service(namespace, "other", port=80)
    handwritten = kube.create_ingress(namespace, "blog", "blog.example.com", "other")
    create_annotated_service(kube, namespace, "blog")
    event = wait_event(kube, namespace, "blog", "IngressExists")
    assert event["type"] == "Warning" and event["regarding"]["kind"] == "Service"
    assert "left alone" in event["note"]
    current = read_ingress(kube, namespace, "blog")
    assert current is not None and current["spec"] == handwritten["spec"]  # (its status is ours to write: it is of our class)
    assert current["metadata"].get("labels") == handwritten["metadata"].get("labels")
    assert not current["metadata"].get("ownerReferences")

    set_annotations(kube, namespace, "blog", {GENERATE: "false"})
    create_annotated_service(kube, namespace, "marker")  # a later sync that proves the "false" was seen
    wait_ingress(kube, namespace, "marker")
    current = read_ingress(kube, namespace, "blog")
    assert current is not None and current["metadata"]["uid"] == handwritten["metadata"]["uid"]
    assert len(events_about(kube, namespace, "blog", "IngressExists")) == 1  # not repeated per sync


def test_invalid_annotations_give_a_warning_and_no_ingress(kube: Kube, namespace: str, twingress) -> None:
    proxy = start_controller(twingress, namespace, *STATUS_ADDRESS)
    cases = {
        "badhost": {"host": "not_a_host!"},
        "iphost": {"host": "10.0.0.1"},
        "badport": {"port": "9999"},
        "badportname": {"port": "nope"},
        "badpath": {"path": "relative"},
        "badsecret": {"tls_secret": "Not A Name"},
    }
    for name, values in cases.items():
        create_annotated_service(kube, namespace, name, **values)
    for name in cases:
        event = wait_event(kube, namespace, name, "InvalidAnnotation")
        assert event["type"] == "Warning"
        assert "ingress/" in event["note"], event["note"]
    for name in cases:
        assert read_ingress(kube, namespace, name) is None, name
    assert "badport" in str(events_about(kube, namespace, "badport")[0]["note"]) or "9999" in events_about(kube, namespace, "badport")[0]["note"]

    # fixing the annotation generates the Ingress; the process never crashed
    set_annotations(kube, namespace, "badport", {"ingress/port": "80"})
    assert backend_port(wait_ingress(kube, namespace, "badport")) == {"number": 80}
    assert proxy.process.poll() is None


def test_generate_ingresses_false_turns_the_generator_off(kube: Kube, namespace: str, twingress) -> None:
    start_controller(twingress, namespace, *STATUS_ADDRESS, "--generate-ingresses", "false")
    create_annotated_service(kube, namespace, "quiet")
    # the status controller still runs: once it has written a later Ingress's status, the
    # annotated Service (created before) has long been seen, and nothing was generated for it
    kube.create_service(namespace, "plain")
    kube.create_ingress(namespace, "marker", f"marker.{namespace}.example.com", "plain")
    wait_ingress(kube, namespace, "marker", lambda i: (i.get("status") or {}).get("loadBalancer", {}).get("ingress"), "marker status")
    assert read_ingress(kube, namespace, "quiet") is None


def test_a_restore_from_a_stale_store_is_refused_with_409_and_succeeds_on_fresh_data(kube_cluster, kube: Kube, namespace: str) -> None:
    """The optimistic-concurrency guard, in-process against the real apiserver (no twingress process)."""
    service = create_annotated_service(kube, namespace, "cas")
    config = GeneratorConfig("twingress")
    api = KubeClient(str(kube_cluster.kubeconfig))
    services, ingresses = Store(), Store()
    services.put((namespace, "cas"), parse_object({"apiVersion": "v1", "kind": "Service", **service}))
    writer = LeaderWriter(api, lambda: None, lambda kind, verb: None)
    sync = ServiceIngressSync(writer, services, ingresses, config, EventRecorder(writer, "test"))
    sync((namespace, "cas"))  # creates it
    created = kube._dict(kube.networking.read_namespaced_ingress("cas", namespace))
    kube.networking.patch_namespaced_ingress("cas", namespace, {"spec": {"ingressClassName": "other"}})  # drift, rv moves on

    stale = {**created, "apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}
    stale["spec"] = {**stale["spec"], "ingressClassName": "other"}  # the drift, but at the old resourceVersion
    ingresses.put((namespace, "cas"), parse_object(stale))
    with pytest.raises(APIError) as refused:
        sync((namespace, "cas"))
    assert refused.value.status == 409

    fresh = {**kube._dict(kube.networking.read_namespaced_ingress("cas", namespace)), "apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}
    ingresses.put((namespace, "cas"), parse_object(fresh))
    sync((namespace, "cas"))
    assert read_ingress(kube, namespace, "cas")["spec"]["ingressClassName"] == "twingress"
    api.close()
