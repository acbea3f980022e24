"""
Tests for L{ingress.model.parse}: API dicts to model values, and what is rejected.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any, Optional

import pytest

from ingress.model import (
    ClusterState,
    Endpoint,
    EndpointPort,
    Ingress,
    IngressBackend,
    IngressRule,
    ObjectRef,
    OpaqueSecret,
    OwnerReference,
    ServiceBackendPort,
    ServicePort,
)
from ingress.model.parse import KINDS, ParseError, collect, merged_state, object_ref, parse_object, parse_objects, state_from_objects

# -- compact builders for API dicts


def meta(name: str, ns: Optional[str] = "default", **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"name": name, **extra}
    if ns is not None:
        result["namespace"] = ns
    return result


def backend(svc: str = "web", port: Any = 80) -> dict[str, Any]:
    key = "number" if isinstance(port, int) else "name"
    return {"service": {"name": svc, "port": {key: port}}}


def http_path(path: Any = "/", path_type: Any = "Prefix", **kw: Any) -> dict[str, Any]:
    result = {"path": path, "pathType": path_type, "backend": backend(**kw)}
    return {k: v for k, v in result.items() if v is not None}


def ingress(*rules: dict[str, Any], name: str = "ing", ns: Optional[str] = "default", **spec: Any) -> dict[str, Any]:
    spec = {**spec, "rules": list(rules)} if rules else spec
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta(name, ns), "spec": spec}


def rule(host: Any = None, *paths: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"http": {"paths": list(paths or [http_path()])}}
    if host is not None:
        result["host"] = host
    return result


def service(ports: Any = ({"name": "http", "port": 80},), name: str = "web", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(name), "spec": {"ports": list(ports), **spec}}


def endpoint_slice(endpoints: Any = (), ports: Any = (), **top: Any) -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": "web"}
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": meta("web-abc", labels=labels),
        "addressType": "IPv4",
        "ports": list(ports),
        "endpoints": list(endpoints),
        **top,
    }


def secret(secret_type: Optional[str] = "kubernetes.io/tls", name: str = "tls", **fields: Any) -> dict[str, Any]:
    result = {"apiVersion": "v1", "kind": "Secret", "metadata": meta(name), **fields}
    if secret_type is not None:
        result["type"] = secret_type
    return result


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def parse_error(obj: dict[str, Any]) -> ParseError:
    with pytest.raises(ParseError) as caught:
        parse_object(obj)
    return caught.value


# -- Ingress


@pytest.mark.parametrize(
    "host, expected",
    [
        ("example.com", "example.com"),
        ("Foo.Example.COM", "foo.example.com"),
        ("example.com.", "example.com"),
        ("*.Example.com.", "*.example.com"),
        ("a-b.c0.example", "a-b.c0.example"),
        (None, ""),
    ],
    ids=["plain", "lower-cased", "trailing-dot", "wildcard-normalised", "dashes-digits", "absent"],
)
def test_rule_host_is_normalised(host: Optional[str], expected: str) -> None:
    parsed = parse_object(ingress(rule(host)))
    assert parsed.rules[0].host == expected


@pytest.mark.parametrize(
    "host",
    ["*", "*.", "*.*.example.com", "a.*.example.com", "foo*.example.com", "*foo.example.com",
     "1.2.3.4", "010.001.1.1", "::1", "foo_bar.example.com", "-foo.example.com", "foo..com",
     "a" * 254, 42],
    ids=["bare-star", "star-dot", "two-wildcards", "inner-wildcard", "partial-wildcard", "star-prefix",
         "ipv4", "ipv4-leading-zeros", "ipv6", "underscore", "leading-dash", "empty-label", "too-long", "not-a-string"],
)
def test_invalid_rule_host(host: Any) -> None:
    error = parse_error(ingress(rule(host)))
    assert error.reason == "Invalid"
    assert "spec.rules[0].host" in error.message


@pytest.mark.parametrize(
    "path, path_type",
    [("/", "Prefix"), ("/foo/", "Prefix"), ("/Foo/bar", "Exact"), ("/a.b/~c", "Exact"),
     ("/impl", "ImplementationSpecific"), ("", "ImplementationSpecific"), ("/a//b", "ImplementationSpecific")],
    ids=["root", "trailing-slash", "exact", "dots-tilde", "impl", "impl-empty", "impl-unchecked-sequences"],
)
def test_valid_paths_are_kept_as_written(path: str, path_type: str) -> None:
    parsed = parse_object(ingress(rule("a.example", http_path(path, path_type))))
    assert (parsed.rules[0].paths[0].path, parsed.rules[0].paths[0].path_type) == (path, path_type)


@pytest.mark.parametrize(
    "path, path_type, reason",
    [
        ("foo", "Prefix", "Invalid"),
        ("", "Exact", "Invalid"),
        (None, "Prefix", "Invalid"),
        ("/a//b", "Prefix", "Invalid"),
        ("/a/./b", "Exact", "Invalid"),
        ("/a/../b", "Prefix", "Invalid"),
        ("/a%2fb", "Prefix", "Invalid"),
        ("/a%2Fb", "Exact", "Invalid"),
        ("/a/..", "Prefix", "Invalid"),
        ("/a/.", "Exact", "Invalid"),
        ("foo", "ImplementationSpecific", "Invalid"),
        ("/", None, "Required"),
        ("/", "Regex", "Invalid"),
        (7, "Prefix", "Invalid"),
    ],
    ids=["relative", "exact-empty", "prefix-absent", "double-slash", "dot", "dot-dot", "encoded-slash",
         "encoded-slash-upper", "dot-dot-suffix", "dot-suffix", "impl-relative", "no-path-type",
         "unknown-path-type", "not-a-string"],
)
def test_invalid_paths(path: Any, path_type: Any, reason: str) -> None:
    error = parse_error(ingress(rule("a.example", http_path(path, path_type))))
    assert error.reason == reason
    assert "spec.rules[0].http.paths[0]" in error.message


@pytest.mark.parametrize(
    "backend_dict, expected",
    [
        (backend("web", 80), IngressBackend("web", ServiceBackendPort(number=80))),
        (backend("web", 65535), IngressBackend("web", ServiceBackendPort(number=65535))),
        (backend("web", "http"), IngressBackend("web", ServiceBackendPort(name="http"))),
        (backend("web", "h2c-1"), IngressBackend("web", ServiceBackendPort(name="h2c-1"))),
        ({"resource": {"kind": "Bucket", "name": "b"}}, IngressBackend("", ServiceBackendPort(name=""))),
    ],
    ids=["number", "max-number", "name", "name-with-dash-digit", "resource-backend-unsupported"],
)
def test_backend(backend_dict: dict[str, Any], expected: IngressBackend) -> None:
    parsed = parse_object(ingress(defaultBackend=backend_dict))
    assert parsed.default_backend == expected
    assert parsed.rules == ()


@pytest.mark.parametrize(
    "backend_dict, reason",
    [
        ({"service": {"name": "web", "port": {"number": 80, "name": "http"}}}, "Invalid"),
        ({"service": {"name": "web", "port": {}}}, "Required"),
        ({"service": {"name": "web"}}, "Required"),
        (backend("web", 0), "Required"),
        (backend("web", 65536), "Invalid"),
        (backend("web", -1), "Invalid"),
        ({"service": {"name": "web", "port": {"number": "80"}}}, "Invalid"),
        ({"service": {"name": "web", "port": {"number": True}}}, "Invalid"),
        (backend("web", "HTTP"), "Invalid"),
        (backend("web", "8080"), "Invalid"),
        (backend("web", "a-very-long-port-name"), "Invalid"),
        (backend("Web", 80), "Invalid"),
        ({"service": {"port": {"number": 80}}}, "Required"),
        ({}, "Invalid"),
        ({**backend(), "resource": {"kind": "Bucket", "name": "b"}}, "Invalid"),
        ({"resource": {"name": "b"}}, "Required"),
    ],
    ids=["number-and-name", "no-port", "port-absent", "port-zero", "port-too-big", "port-negative",
         "port-string", "port-bool", "name-upper", "name-digits-only", "name-too-long", "service-name-upper",
         "service-name-missing", "empty", "service-and-resource", "resource-without-kind"],
)
def test_invalid_backend(backend_dict: dict[str, Any], reason: str) -> None:
    error = parse_error(ingress(rule("a.example", {"path": "/", "pathType": "Prefix", "backend": backend_dict})))
    assert error.reason == reason
    assert "spec.rules[0].http.paths[0].backend" in error.message


def test_ingress_fields() -> None:
    obj = ingress(
        rule("A.example", http_path("/a", "Exact", svc="a", port=8080)),
        rule(None, http_path("/", "Prefix", svc="b", port="http")),
        ingressClassName="twingress",
        defaultBackend=backend("fallback", 80),
        tls=[{"hosts": ["A.example.", "*.b.example", "10.0.0.1"], "secretName": "cert"}, {}],
    )
    parsed = parse_object(obj)
    assert isinstance(parsed, Ingress)
    assert parsed.ref == ObjectRef("Ingress", "default", "ing")
    assert parsed.ingress_class_name == "twingress"
    assert parsed.default_backend == IngressBackend("fallback", ServiceBackendPort(number=80))
    assert [r.host for r in parsed.rules] == ["a.example", ""]
    assert parsed.rules[0].paths[0].backend == IngressBackend("a", ServiceBackendPort(number=8080))
    assert parsed.rules[1].paths[0].backend == IngressBackend("b", ServiceBackendPort(name="http"))
    assert [(t.hosts, t.secret_name) for t in parsed.tls] == [
        (("a.example", "*.b.example", "10.0.0.1"), "cert"),
        ((), ""),
    ]


@pytest.mark.parametrize(
    "obj, expected_rules",
    [
        (ingress(rule("a.example") | {"http": None}), (IngressRule("a.example", ()),)),
        (ingress({"host": "a.example"}), (IngressRule("a.example", ()),)),
    ],
    ids=["http-null", "http-absent"],
)
def test_rule_without_http_has_no_paths(obj: dict[str, Any], expected_rules: tuple[IngressRule, ...]) -> None:
    assert parse_object(obj).rules == expected_rules


@pytest.mark.parametrize(
    "obj, reason, where",
    [
        (ingress(), "Required", "spec"),
        (ingress(rules=[]), "Required", "spec"),
        (ingress({"host": "a.example", "http": {"paths": []}}), "Required", "spec.rules[0].http.paths"),
        (ingress(rules="a.example"), "Invalid", "spec.rules"),
        ({**ingress(rule()), "spec": "nonsense"}, "Invalid", "spec"),
        (ingress(rule(), ingressClassName=3), "Invalid", "spec.ingressClassName"),
        (ingress(rule(), tls=[{"hosts": ["*.*.example"]}]), "Invalid", "spec.tls[0].hosts[0]"),
        (ingress(rule(), tls=[{"hosts": "a.example"}]), "Invalid", "spec.tls[0].hosts"),
    ],
    ids=["no-spec", "no-rules-no-default", "empty-paths", "rules-not-a-list", "spec-not-an-object",
         "class-not-a-string", "bad-tls-host", "tls-hosts-not-a-list"],
)
def test_invalid_ingress(obj: dict[str, Any], reason: str, where: str) -> None:
    error = parse_error(obj)
    assert (error.reason, error.message.split(":")[0]) == (reason, where)


# -- metadata


@pytest.mark.parametrize(
    "metadata, namespace, timestamp",
    [
        (meta("x", None), "default", ""),
        (meta("x", ""), "default", ""),
        (meta("x", "prod", creationTimestamp="2024-05-01T10:00:00Z"), "prod", "2024-05-01T10:00:00Z"),
        (meta("x", creationTimestamp=datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.UTC)),
         "default", "2024-05-01T10:00:00Z"),
        (meta("x", creationTimestamp=datetime.datetime(2024, 5, 1, 12, 0,
                                                       tzinfo=datetime.timezone(datetime.timedelta(hours=2)))),
         "default", "2024-05-01T10:00:00Z"),
        (meta("x", creationTimestamp=datetime.datetime(2024, 5, 1, 10, 0)), "default", "2024-05-01T10:00:00Z"),
    ],
    ids=["no-namespace", "empty-namespace", "rfc3339-text", "yaml-datetime-utc", "yaml-datetime-offset",
         "yaml-datetime-naive"],
)
def test_metadata(metadata: dict[str, Any], namespace: str, timestamp: str) -> None:
    parsed = parse_object({**service(), "metadata": metadata})
    assert (parsed.meta.namespace, parsed.meta.creation_timestamp) == (namespace, timestamp)


def test_metadata_fields_are_kept() -> None:
    metadata = meta("x", "ns", uid="u-1", resourceVersion="42", generation=3, labels={"app": "web"},
                    annotations={"a": "b"})
    parsed = parse_object({**service(), "metadata": metadata}).meta
    assert (parsed.uid, parsed.resource_version, parsed.generation) == ("u-1", "42", 3)
    assert (dict(parsed.labels), dict(parsed.annotations)) == ({"app": "web"}, {"a": "b"})


@pytest.mark.parametrize(
    "metadata, reason",
    [
        ({"namespace": "x"}, "Required"),
        ({"name": ""}, "Required"),
        (None, "Required"),
        ("web", "Invalid"),
        (meta("x", annotations={"ingressclass.kubernetes.io/is-default-class": True}), "Invalid"),
        (meta("x", labels=["app"]), "Invalid"),
        (meta("x", generation="1"), "Invalid"),
    ],
    ids=["no-name", "empty-name", "no-metadata", "metadata-not-an-object", "unquoted-yaml-bool-annotation",
         "labels-not-a-map", "generation-not-an-int"],
)
def test_invalid_metadata(metadata: Any, reason: str) -> None:
    assert parse_error({**service(), "metadata": metadata}).reason == reason


# -- IngressClass


@pytest.mark.parametrize(
    "annotations, is_default",
    [({}, False), ({"ingressclass.kubernetes.io/is-default-class": "true"}, True),
     ({"ingressclass.kubernetes.io/is-default-class": "True"}, False)],
    ids=["plain", "default", "default-needs-exact-true"],
)
def test_ingress_class(annotations: dict[str, str], is_default: bool) -> None:
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
           "metadata": {"name": "tw", "annotations": annotations}, "spec": {"controller": "twingress.io/x"}}
    parsed = parse_object(obj)
    assert (parsed.meta.namespace, parsed.controller, parsed.is_default) == ("", "twingress.io/x", is_default)


def test_ingress_class_needs_controller() -> None:
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "tw"}, "spec": {}}
    assert parse_error(obj).reason == "Required"


# -- Service


@pytest.mark.parametrize(
    "port, expected",
    [
        ({"port": 80}, ServicePort("", 80, 80, "TCP")),
        ({"name": "http", "port": 80, "targetPort": 8080}, ServicePort("http", 80, 8080, "TCP")),
        ({"name": "http", "port": 80, "targetPort": "web"}, ServicePort("http", 80, "web", "TCP")),
        ({"name": "dns", "port": 53, "protocol": "UDP"}, ServicePort("dns", 53, 53, "UDP")),
    ],
    ids=["unnamed-target-defaults-to-port", "numeric-target", "named-target", "udp"],
)
def test_service_port(port: dict[str, Any], expected: ServicePort) -> None:
    parsed = parse_object(service([port]))
    assert (parsed.type, parsed.ports, parsed.external_name) == ("ClusterIP", (expected,), "")


def test_external_name_service() -> None:
    parsed = parse_object(service([], type="ExternalName", externalName="API.Example.com."))
    assert (parsed.type, parsed.ports, parsed.external_name) == ("ExternalName", (), "api.example.com")


@pytest.mark.parametrize(
    "ports, spec, reason",
    [
        ([{"port": 0}], {}, "Invalid"),
        ([{"port": 65536}], {}, "Invalid"),
        ([{"port": "80"}], {}, "Invalid"),
        ([{"name": "http"}], {}, "Required"),
        ([{"port": 80, "targetPort": 0}], {}, "Invalid"),
        ([{"port": 80, "targetPort": ""}], {}, "Required"),
        ([{"port": 80, "protocol": "HTTP"}], {}, "Invalid"),
        ([{"name": "Http", "port": 80}], {}, "Invalid"),
        ([{"name": "a", "port": 80}, {"port": 81}], {}, "Required"),
        ([{"name": "a", "port": 80}, {"name": "a", "port": 81}], {}, "Duplicate"),
        ([], {"type": "Magic"}, "Invalid"),
        ([], {"type": "ExternalName"}, "Required"),
        ([], {"type": "ExternalName", "externalName": "not_a_name"}, "Invalid"),
        ("80", {}, "Invalid"),
    ],
    ids=["port-zero", "port-too-big", "port-string", "port-missing", "target-zero", "target-empty",
         "bad-protocol", "upper-case-name", "unnamed-among-many", "duplicate-names", "unknown-type",
         "external-name-missing", "external-name-invalid", "ports-not-a-list"],
)
def test_invalid_service(ports: Any, spec: dict[str, Any], reason: str) -> None:
    assert parse_error(service(ports, **spec)).reason == reason


# -- EndpointSlice


def test_endpoint_slice_fields() -> None:
    obj = endpoint_slice(
        endpoints=[
            {"addresses": ["10.0.0.1"]},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": None}},
            {"addresses": ["10.0.0.3"], "conditions": {"ready": True}},
            {"addresses": ["10.0.0.4"], "conditions": {"ready": False, "serving": True}},
            {"addresses": ["10.0.0.5"], "conditions": {}},
        ],
        ports=[{"name": "http", "port": 8080}, {"port": 9090, "protocol": "UDP"}, {"name": "all"}],
    )
    parsed = parse_object(obj)
    assert (parsed.service_name, parsed.address_type) == ("web", "IPv4")
    assert parsed.ports == (EndpointPort("http", 8080, "TCP"), EndpointPort("", 9090, "UDP"))
    assert [e.ready for e in parsed.endpoints] == [True, True, True, False, True]


def test_endpoint_slice_without_service_label() -> None:
    obj = endpoint_slice(endpoints=[{"addresses": ["10.0.0.1"]}])
    obj["metadata"] = meta("orphan")
    assert parse_object(obj).service_name == ""


@pytest.mark.parametrize(
    "address_type, address, expected",
    [("IPv4", "10.1.2.3", "10.1.2.3"), ("IPv6", "FD00:0::0001", "fd00::1"), ("FQDN", "db.example", "db.example")],
    ids=["ipv4", "ipv6-canonical", "fqdn-as-is"],
)
def test_endpoint_addresses(address_type: str, address: str, expected: str) -> None:
    obj = endpoint_slice(endpoints=[{"addresses": [address]}], addressType=address_type)
    assert parse_object(obj).endpoints == (Endpoint((expected,), True),)


@pytest.mark.parametrize(
    "top, reason",
    [
        ({"addressType": "IPv5"}, "Invalid"),
        ({"addressType": None}, "Invalid"),
        ({"endpoints": [{"addresses": ["fd00::1"]}]}, "Invalid"),
        ({"endpoints": [{"addresses": ["10.0.0.256"]}]}, "Invalid"),
        ({"endpoints": [{"addresses": []}]}, "Required"),
        ({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": "yes"}}]}, "Invalid"),
        ({"ports": [{"name": "http", "port": 0}]}, "Invalid"),
        ({"ports": [{"name": "http", "port": 80, "protocol": "QUIC"}]}, "Invalid"),
        ({"endpoints": "10.0.0.1"}, "Invalid"),
    ],
    ids=["unknown-address-type", "no-address-type", "ipv6-in-ipv4-slice", "bad-ipv4", "no-addresses",
         "ready-not-bool", "port-zero", "bad-protocol", "endpoints-not-a-list"],
)
def test_invalid_endpoint_slice(top: dict[str, Any], reason: str) -> None:
    assert parse_error(endpoint_slice(**top)).reason == reason


# -- Secret


@pytest.mark.parametrize(
    "fields, cert, key",
    [
        ({"data": {"tls.crt": b64("CERT"), "tls.key": b64("KEY")}}, b"CERT", b"KEY"),
        ({"stringData": {"tls.crt": "CERT", "tls.key": "KEY"}}, b"CERT", b"KEY"),
        ({"data": {"tls.crt": b64("OLD"), "tls.key": b64("KEY")}, "stringData": {"tls.crt": "NEW"}}, b"NEW", b"KEY"),
        ({"data": {"tls.crt": b64("C" * 100)[:40] + "\n" + b64("C" * 100)[40:], "tls.key": ""}}, b"C" * 100, b""),
    ],
    ids=["base64-data", "string-data", "string-data-wins", "base64-with-line-breaks"],
)
def test_tls_secret(fields: dict[str, Any], cert: bytes, key: bytes) -> None:
    parsed = parse_object(secret(**fields))
    assert (parsed.meta.name, parsed.cert_pem, parsed.key_pem) == ("tls", cert, key)


def test_other_secret_types_are_ignored() -> None:
    assert parse_object(secret("kubernetes.io/dockerconfigjson", data={"tls.crt": b64("C"), "tls.key": b64("K")})) is None


@pytest.mark.parametrize("secret_type", ["Opaque", None], ids=["opaque", "no-type"])
def test_opaque_secrets_keep_their_data_for_basic_auth(secret_type: Optional[str]) -> None:
    """An Opaque Secret (the API's default type) is kept whole, decoded: auth-secret names one (auth-file or auth-map)."""
    parsed = parse_object(secret(secret_type, data={"auth": b64("foo:{SHA}x")}, stringData={"bob": "hash"}))
    assert isinstance(parsed, OpaqueSecret)
    assert dict(parsed.data) == {"auth": b"foo:{SHA}x", "bob": b"hash"}
    state = state_from_objects([secret(secret_type, data={"auth": b64("a:b")})])
    assert list(state.opaque_secrets) == [("default", "tls")] and not state.secrets


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"data": {"tls.crt": b64("C")}}, "Required"),
        ({}, "Required"),
        ({"data": {"tls.crt": "not base64!", "tls.key": b64("K")}}, "Invalid"),
        ({"data": {"tls.crt": b64("C"), "tls.key": 5}}, "Invalid"),
    ],
    ids=["no-key", "no-data", "bad-base64", "value-not-a-string"],
)
def test_invalid_tls_secret(fields: dict[str, Any], reason: str) -> None:
    assert parse_error(secret(**fields)).reason == reason


# -- dispatch and the snapshot


@pytest.mark.parametrize(
    "obj",
    [
        {**ingress(rule()), "apiVersion": "extensions/v1beta1"},
        {"apiVersion": "twingress.io/v1beta1", "kind": "StreamIngress", "metadata": meta("s")},
        {"metadata": meta("x")},
        {"apiVersion": ["v1"], "kind": "Service"},
    ],
    ids=["old-ingress-version", "stream-ingress-other-version", "no-kind", "api-version-not-a-string"],
)
def test_unknown_kinds_are_ignored(obj: dict[str, Any]) -> None:
    assert parse_object(obj) is None
    assert state_from_objects([obj]) == ClusterState()


def test_kinds_handled() -> None:
    assert set(KINDS) == {
        ("networking.k8s.io/v1", "Ingress"),
        ("networking.k8s.io/v1", "IngressClass"),
        ("v1", "Service"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("v1", "Secret"),
        ("v1", "Pod"),
        ("v1", "Node"),
        ("twingress.io/v1alpha1", "StreamIngress"),
        ("v1", "ConfigMap"),
        ("v1", "Namespace"),
        ("gateway.networking.k8s.io/v1", "GRPCRoute"),
        *((f"gateway.networking.k8s.io/{version}", kind) for kind in ("TLSRoute", "TCPRoute", "UDPRoute") for version in ("v1", "v1alpha2")),
        *(
            (f"gateway.networking.k8s.io/{version}", kind)
            for version in ("v1", "v1beta1")
            for kind in ("GatewayClass", "Gateway", "HTTPRoute", "ReferenceGrant")
        ),
    }
    assert {k.state_field for k in KINDS.values() if k.state_field} <= set(ClusterState.__dataclass_fields__)


def test_controller_only_kinds_stay_out_of_the_snapshot() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}, "spec": {"nodeName": "a"}}
    assert state_from_objects([pod]) == ClusterState()


def test_owner_references_and_controller_ref() -> None:
    obj = service()
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u1"},
        {"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "u2", "controller": True},
    ]
    meta = parse_object(obj).meta
    assert [o.uid for o in meta.owner_references] == ["u1", "u2"]
    assert meta.controller_ref() == OwnerReference("v1", "Service", "web", "u2", controller=True)


def test_ingress_status_addresses() -> None:
    obj = ingress(rule("a.example"))
    obj["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"hostname": "lb.example.com"}, {}]}}
    assert parse_object(obj).load_balancer == ("192.0.2.1", "lb.example.com")
    assert parse_object(ingress(rule())).load_balancer == ()


def test_pod_ready_and_node_addresses() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {"nodeName": "edge-1"},
        "status": {"hostIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    parsed = parse_object(pod)
    assert (parsed.node_name, parsed.host_ip, parsed.ready) == ("edge-1", "10.0.0.5", True)
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert parse_object(pod).ready is False
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "edge-1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "ExternalIP", "address": "203.0.113.9"}]},
    }
    parsed = parse_object(node)
    assert parsed.meta.namespace == ""
    assert parsed.addresses == (("InternalIP", "10.0.0.5"), ("ExternalIP", "203.0.113.9"))


@pytest.mark.parametrize(
    "obj, expected",
    [
        (service(), ObjectRef("Service", "default", "web")),
        ({**service(), "metadata": {"name": "web"}}, ObjectRef("Service", "default", "web")),
        ({**service(), "metadata": "junk"}, ObjectRef("Service", "default", "")),
        ({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "c", "namespace": "x"}},
         ObjectRef("IngressClass", "", "c")),
    ],
    ids=["namespaced", "default-namespace", "malformed-metadata", "cluster-scoped"],
)
def test_object_ref(obj: dict[str, Any], expected: ObjectRef) -> None:
    assert object_ref(obj) == expected


def test_state_collects_every_kind() -> None:
    ingress_class = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                     "metadata": {"name": "tw"}, "spec": {"controller": "c"}}
    state = state_from_objects([
        ingress(rule()),
        ingress_class,
        service(),
        {**service(), "metadata": meta("web", "other")},
        endpoint_slice(endpoints=[{"addresses": ["10.0.0.1"]}]),
        secret(stringData={"tls.crt": "C", "tls.key": "K"}),
        secret("Opaque", name="plain", data={}),
    ])
    assert [i.meta.name for i in state.ingresses] == ["ing"]
    assert [c.meta.name for c in state.ingress_classes] == ["tw"]
    assert sorted(state.services) == [("default", "web"), ("other", "web")]
    assert [s.meta.name for s in state.endpoint_slices] == ["web-abc"]
    assert list(state.secrets) == [("default", "tls")]
    assert state.problems == ()


def test_state_turns_parse_failures_into_problems() -> None:
    state = state_from_objects([
        ingress(rule("bad_host"), name="bad", ns="prod"),
        ingress(rule("good.example"), name="good", ns="prod"),
        {**service(), "metadata": {"name": "svc"}, "spec": {"ports": [{"port": 0}]}},
    ])
    assert [i.meta.name for i in state.ingresses] == ["good"]
    assert [(p.ref, p.reason) for p in state.problems] == [
        (ObjectRef("Ingress", "prod", "bad"), "Invalid"),
        (ObjectRef("Service", "default", "svc"), "Invalid"),
    ]
    assert "spec.rules[0].host" in state.problems[0].message


def _svc(port: int, ns: Optional[str] = "default", name: str = "web") -> dict[str, Any]:
    return {**service([{"port": port}]), "metadata": meta(name, ns)}


@pytest.mark.parametrize(
    "objects, ports, problems",
    [
        ([_svc(80), _svc(81)], [81], 0),
        ([_svc(80, ns=None), _svc(81, ns="default")], [81], 0),
        ([_svc(80), _svc(0)], [], 1),
        ([_svc(0), _svc(81)], [81], 0),
        ([_svc(80, name="a"), _svc(81, name="b"), _svc(82, name="a")], [82, 81], 0),
    ],
    ids=["valid-replaces-valid", "missing-namespace-is-default", "invalid-replaces-valid",
         "valid-replaces-invalid", "only-same-name-replaced"],
)
def test_later_object_replaces_earlier(objects: list[dict[str, Any]], ports: list[int], problems: int) -> None:
    state = state_from_objects(objects)
    assert [s.ports[0].port for s in state.services.values()] == ports
    assert len(state.problems) == problems


def test_ignored_secret_type_replaces_tls_secret() -> None:
    state = state_from_objects([
        secret(stringData={"tls.crt": "C", "tls.key": "K"}),
        secret("Opaque", data={}),
    ])
    assert state.secrets == {}


def test_state_problems_are_sorted() -> None:
    state = state_from_objects([_svc(0, name="z"), _svc(0, name="a"), ingress(name="m")])
    refs = [p.ref for p in state.problems]
    assert refs == sorted(refs)
    assert [r.name for r in refs] == ["m", "a", "z"]


def test_a_snapshot_merged_from_parts_is_the_snapshot_of_them_all() -> None:
    """What the kube source does with its informers' parts (each made again only when its store changed)."""
    objects = [service(), {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "c"}, "spec": {"controller": "x"}},
               {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad", "namespace": "n"}, "spec": {"ports": "not a list"}},
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "v"}},
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "n"}, "data": {"k": "w"}}]
    outcomes = parse_objects(objects, {})[0]
    parts = [collect([outcome]) for outcome in outcomes]
    whole = collect(outcomes)
    assert merged_state(parts) == whole and merged_state(parts).problems == whole.problems
    assert merged_state([parts[0]]).services is parts[0].services  # one part's value is kept, not copied
