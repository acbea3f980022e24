"""The Ingress a Service's annotations ask for (pure: no API)."""

from __future__ import annotations

from typing import Any

import pytest

from ingress.controllers.generated import (
    GeneratorConfig,
    InvalidAnnotation,
    desired_ingress,
    drift,
    is_enabled,
    is_generated_for,
    is_owned_by,
    restore_patch,
)
from ingress.model.parse import parse_object

CONFIG = GeneratorConfig("twingress")


def service(annotations: dict[str, str], ports: Any = ({"name": "http", "port": 80},), name: str = "web", uid: str = "u-1") -> Any:
    return parse_object(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "shop", "uid": uid, "annotations": {"ingress/http": "true", **annotations}},
            "spec": {"ports": list(ports)},
        }
    )


def rule_of(body: dict) -> dict:
    return body["spec"]["rules"][0]


@pytest.mark.parametrize("value, enabled", [("true", True), ("True", False), ("yes", False), ("1", False), ("", False)])
def test_only_the_exact_string_true_enables(value: str, enabled: bool) -> None:
    assert is_enabled(service({"ingress/http": value})) is enabled


def test_no_annotation_means_off() -> None:
    plain = parse_object({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": [{"port": 80}]}})
    assert not is_enabled(plain)


def test_defaults_host_template_prefix_root_and_the_http_port() -> None:
    body = desired_ingress(service({}, ports=[{"name": "admin", "port": 9000}, {"name": "http", "port": 80}]), CONFIG)
    assert body["metadata"]["name"] == "web" and body["metadata"]["namespace"] == "shop"
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "twingress"}
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "u-1", "controller": True, "blockOwnerDeletion": True}
    ]
    assert body["spec"]["ingressClassName"] == "twingress"
    assert rule_of(body)["host"] == "web.shop.example.com"
    assert rule_of(body)["http"]["paths"] == [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]
    assert "tls" not in body["spec"]


@pytest.mark.parametrize(
    "annotations, ports, port",
    [
        ({}, [{"port": 8080}], {"number": 8080}),  # one unnamed port
        ({}, [{"name": "grpc", "port": 9000}, {"name": "web", "port": 80}], {"name": "grpc"}),  # the first
        ({"ingress/port": "80"}, [{"name": "grpc", "port": 9000}, {"name": "web", "port": 80}], {"number": 80}),
        ({"ingress/port": "web"}, [{"name": "grpc", "port": 9000}, {"name": "web", "port": 80}], {"name": "web"}),
    ],
)
def test_backend_port_choice(annotations: dict, ports: list, port: dict) -> None:
    assert rule_of(desired_ingress(service(annotations, ports), CONFIG))["http"]["paths"][0]["backend"]["service"]["port"] == port


def test_host_path_tls_and_template() -> None:
    body = desired_ingress(service({"ingress/host": "WWW.Example.com.", "ingress/path": "/app", "ingress/tls-secret": "www-tls"}), CONFIG)
    assert rule_of(body)["host"] == "www.example.com"
    assert rule_of(body)["http"]["paths"][0]["path"] == "/app"
    assert body["spec"]["tls"] == [{"hosts": ["www.example.com"], "secretName": "www-tls"}]
    templated = desired_ingress(service({}), GeneratorConfig("c", "{namespace}-{name}.apps.internal"))
    assert rule_of(templated)["host"] == "shop-web.apps.internal"


@pytest.mark.parametrize(
    "annotations, ports, words",
    [
        ({"ingress/host": "bad_host"}, None, "ingress/host"),
        ({"ingress/host": "192.0.2.1"}, None, "not an IP"),
        ({"ingress/host": "a.*.example.com"}, None, "wildcard"),
        ({"ingress/port": "81"}, None, "not a port of the Service"),
        ({"ingress/port": "https"}, None, "not a port of the Service"),
        ({"ingress/path": "api"}, None, "ingress/path"),
        ({"ingress/path": "/a/../b"}, None, "ingress/path"),
        ({"ingress/tls-secret": "Bad Name"}, None, "ingress/tls-secret"),
        ({}, [], "no ports"),
    ],
)
def test_invalid_annotations_say_which_and_why(annotations: dict, ports: Any, words: str) -> None:
    svc = service(annotations) if ports is None else service(annotations, ports)
    with pytest.raises(InvalidAnnotation) as raised:
        desired_ingress(svc, CONFIG)
    assert words in str(raised.value)


def generated(svc: Any, **changes: Any) -> Any:
    body = desired_ingress(svc, CONFIG)
    body["metadata"].update(resourceVersion="7", uid="i-1", **changes.pop("metadata", {}))
    body["spec"].update(changes)
    return parse_object(body)


def test_drift_in_our_fields_only() -> None:
    svc = service({})
    desired = desired_ingress(svc, CONFIG)
    assert not drift(generated(svc), desired)
    assert not drift(generated(svc, metadata={"annotations": {"x": "y"}, "labels": {"app.kubernetes.io/managed-by": "twingress", "team": "a"}}), desired)
    assert drift(generated(svc, ingressClassName="other"), desired)
    assert drift(generated(svc, defaultBackend={"service": {"name": "x", "port": {"number": 1}}}), desired)
    assert drift(generated(svc, tls=[{"hosts": ["a.example"], "secretName": "s"}]), desired)
    assert drift(generated(svc, metadata={"labels": {}}), desired)
    assert drift(generated(service({"ingress/path": "/other"})), desired)


def test_ownership_by_name_and_uid() -> None:
    old, new = service({}, uid="u-old"), service({}, uid="u-new")
    ingress = generated(old)
    assert is_generated_for(ingress, new) and not is_owned_by(ingress, new)  # a re-created Service adopts it
    assert is_owned_by(ingress, old)
    assert drift(ingress, desired_ingress(new, CONFIG))  # ... by writing its new uid
    assert not is_generated_for(ingress, service({}, name="other"))
    handwritten = generated(old, metadata={"ownerReferences": []})
    assert not is_generated_for(handwritten, old)


def test_restore_patch_is_guarded_and_removes_what_others_added() -> None:
    svc = service({})
    patch = restore_patch(generated(svc), desired_ingress(svc, CONFIG))
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["spec"]["defaultBackend"] is None and patch["spec"]["tls"] is None
    assert patch["metadata"]["ownerReferences"][0]["uid"] == "u-1"
