"""
HTTPRouteBackendProtocolH2C (sigs.k8s.io/gateway-api conformance v1.6.3,
tests/httproute-backend-protocol-h2c.go; Gateway API "Backend Protocol", GEP-1911): a backendRef
to a Service port whose appProtocol is kubernetes.io/h2c is spoken to with HTTP/2 prior knowledge,
as backend-protocol H2C does for an Ingress; the other ports of the same Service keep HTTP/1.1.
"""

from __future__ import annotations

from typing import Any, Optional

from ingress.routing.table import Route
from tests.unit.objects import endpoints
from tests.unit.test_gateway_routing import backend, gateway, gateway_table, http_route, listener, to


def _objects(*rules: dict[str, Any]) -> list[dict[str, Any]]:
    ports = [{"name": "http", "port": 8080, "targetPort": 3000}, {"name": "h2c", "port": 8081, "targetPort": 3001, "appProtocol": "kubernetes.io/h2c"}]
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": "default"}, "spec": {"ports": ports}}
    return [svc, endpoints("echo", "10.0.0.1", ports=(("http", 3000), ("h2c", 3001))), gateway("gw", listener("http", 80)), http_route("r", *rules)]


def _route(table: Any) -> Route:
    found: Optional[Route] = table.match("any.example", "/")
    assert found is not None
    return found.choices[0][1] if found.choices else found  # the listener's scheme is a condition of the slot


def test_an_h2c_port_gets_http2_and_another_port_http1() -> None:
    h2c = _route(gateway_table(*_objects(to(backend("echo", 8081)))).table)
    assert h2c.policies is not None and h2c.policies.backend_http2
    assert h2c.upstream.targets == (("10.0.0.1", 3001),)
    plain = _route(gateway_table(*_objects(to(backend("echo", 8080)))).table)
    assert plain.policies is None or not plain.policies.backend_http2


def test_each_weighted_backend_keeps_its_own_protocol() -> None:
    split = _route(gateway_table(*_objects(to(backend("echo", 8081, weight=1), backend("echo", 8080, weight=1)))).table)
    assert split.policies is not None and split.policies.backends is not None
    chosen = [route for route in split.policies.backends.routes if route is not None]
    assert [bool(r.policies and r.policies.backend_http2) for r in chosen] == [True, False]
