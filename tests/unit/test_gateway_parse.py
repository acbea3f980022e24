"""
Tests for L{ingress.model._gateway}: Gateway API JSON to values, with the CRDs' defaults applied
(sigs.k8s.io/gateway-api v1.7.0, apis/v1/*_types.go: the kubebuilder defaults of each field).
"""

from __future__ import annotations

from typing import Any

import pytest

from ingress.model.gateway import FROM_SAME, BackendRef, CorsFilter, ParentRef, RouteMatch, RuleRetry
from ingress.model.parse import state_from_objects

GW = "gateway.networking.k8s.io/v1"


def route(spec: dict[str, Any], namespace: str = "apps") -> dict[str, Any]:
    return {"apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": "r", "namespace": namespace}, "spec": spec}


def test_route_defaults() -> None:
    """A rule without matches matches PathPrefix "/"; a route without rules has one such rule; weight 1; parent namespace the route's."""
    state = state_from_objects([route({"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}]}), route({}, "other")])
    by_namespace = {r.meta.namespace: r for r in state.http_routes}
    first = by_namespace["apps"]
    assert first.parent_refs == (ParentRef("gw", "apps"),)
    assert first.rules[0].matches == (RouteMatch("PathPrefix", "/"),)
    assert first.rules[0].backend_refs == (BackendRef("svc", "apps", 80),)
    assert by_namespace["other"].rules[0].matches == (RouteMatch(),)


def test_listener_defaults() -> None:
    """allowedRoutes defaults to namespaces from Same; an HTTPS listener's tls.mode to Terminate; certificateRefs' namespace to the Gateway's."""
    gateway = {
        "apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "infra"},
        "spec": {"gatewayClassName": "c", "listeners": [{"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "A.Example.com",
                                                          "tls": {"certificateRefs": [{"name": "cert"}]}}]},
    }
    (listener,) = state_from_objects([gateway]).gateways[0].listeners
    assert (listener.allowed_from, listener.tls_mode, listener.hostname) == (FROM_SAME, "Terminate", "a.example.com")
    assert (listener.certificate_refs[0].namespace, listener.certificate_refs[0].kind) == ("infra", "Secret")


@pytest.mark.parametrize(
    "text, seconds",
    [("10s", 10.0), ("1m30s", 90.0), ("1h", 3600.0), ("500ms", 0.5), ("0s", 0.0), ("1h1m1s1ms", 3661.001),
     ("10s30m1h", 5410.0), ("30m1800s", 3600.0), ("0h0m0s", 0.0), ("99999ms", 99.999)],
)
def test_durations(text: str, seconds: float) -> None:
    """GEP-2257 durations, as in HTTPRouteRule.timeouts: any order, repeated units add up (the GEP's table: 10s30m1h is 1h30m10s)."""
    spec = {"rules": [{"timeouts": {"request": text}}]}
    assert state_from_objects([route(spec)]).http_routes[0].rules[0].request_timeout == seconds


def test_a_backend_request_timeout_longer_than_a_disabled_request_timeout_is_valid() -> None:
    """HTTPRouteTimeouts' CEL rule compares the two only when request is not "0s"."""
    spec = {"rules": [{"timeouts": {"request": "0s", "backendRequest": "2s"}}]}
    rule = state_from_objects([route(spec)]).http_routes[0].rules[0]
    assert (rule.request_timeout, rule.backend_request_timeout) == (0.0, 2.0)


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"rules": [{"matches": [{"path": {"type": "Prefix", "value": "/"}}]}]}, "spec.rules[0].matches[0].path.type"),
        ({"rules": [{"matches": [{"path": {"type": "Exact", "value": "relative"}}]}]}, "spec.rules[0].matches[0].path.value"),
        ({"rules": [{"backendRefs": [{"name": "s", "port": 80, "weight": -1}]}]}, "spec.rules[0].backendRefs[0].weight"),
        ({"rules": [{"filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 305}}]}]}, "spec.rules[0].filters[0].requestRedirect.statusCode"),
        ({"rules": [{"timeouts": {"request": "ten seconds"}}]}, "spec.rules[0].timeouts.request"),
        ({"rules": [{"timeouts": {"request": "1h30m10s20ms50h"}}]}, "spec.rules[0].timeouts.request"),  # GEP-2257: five components
        ({"rules": [{"timeouts": {"request": "1.5s"}}]}, "spec.rules[0].timeouts.request"),
        ({"rules": [{"timeouts": {"request": "100000s"}}]}, "spec.rules[0].timeouts.request"),
        ({"rules": [{"timeouts": {"request": "1s", "backendRequest": "2s"}}]}, "spec.rules[0].timeouts.backendRequest"),  # HTTPRouteTimeouts' CEL rule
        ({"parentRefs": [{"namespace": "x"}]}, "spec.parentRefs[0].name"),
        # HTTPCORSFilter's and HTTPRouteRetry's CRD rules
        ({"rules": [{"filters": [{"type": "CORS", "cors": {"allowOrigins": ["*", "https://a.test"]}}]}]}, "spec.rules[0].filters[0].cors.allowOrigins"),
        ({"rules": [{"filters": [{"type": "CORS", "cors": {"maxAge": 0}}]}]}, "spec.rules[0].filters[0].cors.maxAge"),
        ({"rules": [{"retry": {"codes": [200]}}]}, "spec.rules[0].retry.codes"),
        ({"rules": [{"retry": {"attempts": -1}}]}, "spec.rules[0].retry.attempts"),
        ({"rules": [{"retry": {"backoff": "soon"}}]}, "spec.rules[0].retry.backoff"),
    ],
)
def test_invalid_routes_are_problems_naming_the_field(spec: dict[str, Any], field: str) -> None:
    """What the CRD's schema refuses is refused here too (a manifests directory has no API server): a problem, not a route."""
    state = state_from_objects([route(spec)])
    assert state.http_routes == ()
    (problem,) = state.problems
    assert field in problem.message


def test_reference_grants_allow_only_what_they_name() -> None:
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant", "metadata": {"name": "g", "namespace": "backends"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "apps"}], "to": [{"group": "", "kind": "Service"}]},
    }
    (found,) = state_from_objects([grant]).reference_grants
    assert found.allows("gateway.networking.k8s.io", "HTTPRoute", "apps", "", "Service", "any")
    assert not found.allows("gateway.networking.k8s.io", "HTTPRoute", "other", "", "Service", "any")
    assert not found.allows("gateway.networking.k8s.io", "GRPCRoute", "apps", "", "Service", "any")
    assert not found.allows("gateway.networking.k8s.io", "HTTPRoute", "apps", "", "Secret", "any")


def test_cors_and_retry_with_the_api_s_defaults() -> None:
    """HTTPCORSFilter: maxAge 5, allowCredentials false when unset; HTTPRouteRetry: attempts and backoff unset stay unset."""
    spec = {"rules": [{"filters": [{"type": "CORS", "cors": {"allowOrigins": ["https://a.test"]}}], "retry": {"codes": [500, 503]}}]}
    (rule,) = state_from_objects([route(spec)]).http_routes[0].rules
    assert rule.filters[0].cors == CorsFilter(allow_origins=("https://a.test",), max_age=5, allow_credentials=False)
    assert rule.retry == RuleRetry(codes=(500, 503), attempts=None, backoff=None)
