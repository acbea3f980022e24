"""
What the Gateway API release's CRDs refuse, refused by the real kube-apiserver (testenv/gateway-api.sh,
v1.6.3, experimental channel): their OpenAPI schema and CEL rules judge every write, so twingress
never sees these objects and need not judge them itself (its parser trusts, for instance, that a
ReplacePrefixMatch rewrite has exactly one PathPrefix match). Each case names the schema fact it
restates and the CRD's own message; the upstream suite checks the same with its CEL tests
(sigs.k8s.io/gateway-api v1.6.3, pkg/test/cel/*_test.go), not with conformance tests.

No twingress runs here: only the apiserver answers, 422 Unprocessable Entity with the message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tests.kube.gateway_support import GatewayAPI, gateway_body, listener, route_body

pytestmark = pytest.mark.kube

BACKEND = {"name": "web", "port": 80}


def rule(**fields: Any) -> dict[str, Any]:
    return {"backendRefs": [BACKEND], **fields}


def prefix(value: str) -> dict[str, Any]:
    return {"path": {"type": "PathPrefix", "value": value}}


def route(rules: list[dict[str, Any]], parents: Any = None) -> tuple[str, dict[str, Any]]:
    return "httproutes", route_body("bad", ["bad.example"], rules, parents)


def gateway(listeners: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    return "gateways", gateway_body("bad", "any-class", 80, listeners)


TLS = {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}

CASES: dict[str, tuple[tuple[str, dict[str, Any]], str]] = {
    # HTTPPathMatch: "value must be an absolute path" (CEL on the match)
    "path not starting with /": (route([rule(matches=[prefix("foo")])]), "value must be an absolute path and start with '/'"),
    # HTTPPathMatch: no "//" in a path (CEL)
    "path with //": (route([rule(matches=[prefix("/a//b")])]), "must not contain '//'"),
    # HTTPHeaderName: the RFC 7230 token pattern
    "invalid header name": (
        route([rule(matches=[{"headers": [{"name": "bad header", "value": "x"}]}])]),
        "headers[0].name in body should match",
    ),
    # HTTPRouteTimeouts: backendRequest <= request (CEL)
    "backendRequest timeout longer than request": (
        route([rule(timeouts={"request": "1s", "backendRequest": "2s"})]),
        "backendRequest timeout cannot be longer than request timeout",
    ),
    # HTTPRouteRule: ReplacePrefixMatch needs exactly one PathPrefix match (CEL)
    "ReplacePrefixMatch with an Exact match": (
        route([rule(
            matches=[{"path": {"type": "Exact", "value": "/a"}}],
            filters=[{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/b"}}}],
        )]),
        "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified",
    ),
    # HTTPRouteFilter: one field per type (CEL)
    "URLRewrite without urlRewrite": (route([rule(filters=[{"type": "URLRewrite"}])]), "filter.urlRewrite must be specified for URLRewrite filter.type"),
    # HTTPRouteRule.filters: a redirect and a rewrite exclude each other (CEL)
    "RequestRedirect with URLRewrite": (
        route([rule(filters=[
            {"type": "RequestRedirect", "requestRedirect": {"hostname": "a.example"}},
            {"type": "URLRewrite", "urlRewrite": {"hostname": "b.example"}},
        ])]),
        "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both",
    ),
    # BackendObjectReference: a Service backendRef needs a port (CEL)
    "Service backendRef without a port": (route([{"backendRefs": [{"name": "web"}]}]), "Must have port for Service reference"),
    # BackendRef.weight: 0..1,000,000
    "weight above 1000000": (route([{"backendRefs": [{**BACKEND, "weight": 1000001}]}]), "should be less than or equal to 1000000"),
    # HTTPRequestRedirectFilter.statusCode: 301, 302, 303, 307 or 308 (a 304 is no redirect)
    "redirect status 304": (
        route([{"filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 304}}]}]),
        'Unsupported value: 304: supported values: "301", "302", "303", "307", "308"',
    ),
    # HTTPRouteRetry.codes: 400..599 (GEP-1731; experimental channel in v1.6.3, whose CRDs the tests install)
    "retry code 600": (route([rule(retry={"codes": [600], "attempts": 1})]), "should be less than or equal to 599"),
    # HTTPRouteSpec.parentRefs: at most 32
    "33 parentRefs": (route([rule()], [{"name": f"gw-{i}"} for i in range(33)]), "must have at most 32 items"),
    # HTTPRouteSpec.parentRefs: one Gateway twice needs distinct sectionNames (CEL; the experimental
    # channel's rule says "sectionName or port must be unique", the standard one "sectionName must be unique")
    "one parent twice without sectionName": (
        route([rule()], [{"name": "gw"}, {"name": "gw"}]),
        "must be unique when parentRefs includes 2 or more references to the same parent",
    ),
    # HTTPRouteSpec.rules: at most 16
    "17 rules": (route([rule(matches=[prefix(f"/r{i}")]) for i in range(17)]), "must have at most 16 items"),
    # Hostname: a DNS name, no IP address pattern checks beyond it, no trailing dot
    "hostname with a trailing dot": (("httproutes", route_body("bad", ["bad.example."], [rule()])), "in body should match"),
    # GatewaySpec.listeners: port, protocol and hostname unique together (CEL)
    "two listeners with one port, protocol and hostname": (
        gateway([listener("a", 80, hostname="a.example"), listener("b", 80, hostname="a.example")]),
        "Combination of port, protocol and hostname must be unique for each listener",
    ),
    # GatewaySpec.listeners: names unique (CEL)
    "two listeners with one name": (
        gateway([listener("a", 80, hostname="a.example"), listener("a", 81, hostname="b.example")]),
        "Listener name must be unique within the Gateway",
    ),
    # Listener: tls for HTTPS and TLS only (CEL)
    "HTTP listener with tls": (gateway([listener("a", 80, tls=TLS)]), "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"),
    # Listener: HTTPS terminates (CEL)
    "HTTPS listener passing through": (
        gateway([listener("a", 443, "HTTPS", tls={"mode": "Passthrough"})]),
        "tls mode must be Terminate for protocol HTTPS",
    ),
    # Listener: a terminating listener names its certificate (CEL)
    "HTTPS listener without certificateRefs": (
        gateway([listener("a", 443, "HTTPS", tls={"mode": "Terminate"})]),
        "certificateRefs or options must be specified when mode is Terminate",
    ),
    # Listener: TCP and UDP have no hostname (CEL)
    "TCP listener with a hostname": (gateway([listener("a", 9000, "TCP", hostname="a.example")]), "hostname must not be specified for protocols ['TCP', 'UDP']"),
    # PortNumber: 1..65535
    "listener port 0": (gateway([listener("a", 0)]), "should be greater than or equal to 1"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_crd_validation_refuses(case: str, namespace: str, gateway_api: GatewayAPI) -> None:
    """Each object is refused with 422 and the CRD's message; none is stored."""
    (plural, body), message = CASES[case]
    with pytest.raises(ApiException) as raised:
        gateway_api.create(plural, body, namespace)
    error = raised.value
    assert error.status == 422, (error.status, error.body)
    details = json.loads(error.body)
    assert details["reason"] == "Invalid", details
    assert message in details["message"], details["message"]
    assert not gateway_api.exists(plural, body["metadata"]["name"], namespace)


def test_the_same_objects_without_their_fault_are_stored(namespace: str, gateway_api: GatewayAPI) -> None:
    """The bodies the cases start from are valid: a refusal above is its case's fault, not the helpers'."""
    plural, body = route([rule(matches=[prefix("/a")], timeouts={"request": "2s", "backendRequest": "1s"}, retry={"codes": [599], "attempts": 1})],
                         [{"name": f"gw-{i}"} for i in range(32)])
    gateway_api.create(plural, body, namespace)
    plural, body = gateway([listener("a", 80, hostname="a.example"), listener("b", 80, hostname="b.example"), listener("c", 443, "HTTPS", tls=TLS)])
    gateway_api.create(plural, body, namespace)
    assert gateway_api.exists("httproutes", "bad", namespace) and gateway_api.exists("gateways", "bad", namespace)
