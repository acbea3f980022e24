"""
The Gateway API status a build judges (and the Lease holder writes) for the objects of the
upstream conformance tests whose facts are status (sigs.k8s.io/gateway-api/conformance v1.7.0,
tests/<file>.go, named after each test's ShortName): what a listener supports and refuses,
what a route is told, and which conditions a write keeps.
"""

from __future__ import annotations

from typing import Any

from ingress.controllers.gatewaystatus import GatewayStatusSync
from ingress.controllers.status import PublishedAddresses
from ingress.controllers.writer import LeaderWriter
from ingress.model import ObjectRef
from ingress.model.parse import state_from_objects
from ingress.routing import build
from ingress.routing.build_options import BuildOptions
from ingress.routing.report import Built
from ingress.sources.kube.reflector import Store
from tests.unit.objects import PEM_SHAPED
from tests.unit.test_gateway_routing import (
    GW,
    PORTS,
    backend,
    gateway,
    gateway_class,
    gateway_table,
    http_route,
    listener,
    parent_conditions,
    serve,
    services,
    to,
)

INFRA = "gateway-conformance-infra"
WEB = "gateway-conformance-web-backend"


def listener_status(table: Built, name: str, namespace: str = "default") -> list[tuple[str, tuple[str, ...], int, dict[str, tuple[str, str]]]]:
    """Each listener's (name, supportedKinds, attachedRoutes, {type: (status, reason)})."""
    assert table.report.gateway_status is not None
    status = table.report.gateway_status.gateways[ObjectRef("Gateway", namespace, name)]
    return [(s.name, s.supported_kinds, s.attached_routes, {c.type: (c.status, c.reason) for c in s.conditions}) for s in status.listeners]


def grant(name: str, namespace: str, from_kind: str, to_kind: str, to_name: str = "", *,
          from_group: str = "gateway.networking.k8s.io", from_namespace: str = INFRA, to_group: str = "") -> dict[str, Any]:
    to: dict[str, Any] = {"group": to_group, "kind": to_kind, **({"name": to_name} if to_name else {})}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant", "metadata": {"name": name, "namespace": namespace},
        "spec": {"from": [{"group": from_group, "kind": from_kind, "namespace": from_namespace}], "to": [to]},
    }


def wrong_grants(from_kind: str, to_kind: str, to_name: str, other_kind: str) -> list[dict[str, Any]]:
    """The grants of the *InvalidReferenceGrant tests: each one wrong in exactly one field."""
    return [
        grant("wrong-namespace", "gateway-conformance-app-backend", from_kind, to_kind, to_name),
        grant("wrong-from-group", WEB, from_kind, to_kind, to_name, from_group="not-the-group-youre-looking-for"),
        grant("wrong-from-kind", WEB, other_kind, to_kind, to_name),
        grant("wrong-from-namespace", WEB, from_kind, to_kind, to_name, from_namespace="not-the-namespace-youre-looking-for"),
        grant("wrong-to-group", WEB, from_kind, to_kind, "not-the-one", to_group="not-the-group-youre-looking-for"),
        grant("wrong-to-kind", WEB, from_kind, other_kind if other_kind != from_kind else "Secret", to_name),
        grant("wrong-to-name", WEB, from_kind, to_kind, "not-the-one-youre-looking-for"),
    ]


def test_gateway_class_observed_generation_bump() -> None:
    """GatewayClassObservedGenerationBump (gatewayclass-observed-generation-bump.go): Accepted carries the class's generation, before and after an edit."""
    for generation in (1, 2):
        found = gateway_class("gatewayclass-observed-generation-bump")
        found["metadata"]["generation"] = generation
        found["spec"]["description"] = "old" if generation == 1 else "new"
        table = build(state_from_objects([found]), BuildOptions(reserved_ports=PORTS))
        assert table.report.gateway_status is not None
        (accepted,) = table.report.gateway_status.classes["gatewayclass-observed-generation-bump"]
        assert (accepted.type, accepted.status, accepted.observed_generation) == ("Accepted", "True", generation)


def test_gateway_name_maximum_length() -> None:
    """GatewayNameMaximumLength (gateway-name-maximum-length.go): a Gateway with a 253-character name is judged at its generation, and served."""
    name = "gateway-name-maximum-length-" + "a" * (253 - len("gateway-name-maximum-length-"))
    assert len(name) == 253
    table = gateway_table(gateway(name, listener("http"), generation=3), http_route("r", to(backend("v1")), parents=({"name": name},)), *services("v1"))
    assert table.report.gateway_status is not None
    conditions = table.report.gateway_status.gateways[ObjectRef("Gateway", "default", name)].conditions
    assert {c.type: (c.status, c.observed_generation) for c in conditions} == {"Accepted": ("True", 3), "Programmed": ("True", 3)}
    assert serve(table.table, "any.example", "/") == "default/v1:80"
    assert table.report.problems == ()


def test_gateway_secret_invalid_reference_grant() -> None:
    """
    GatewaySecretInvalidReferenceGrant (gateway-secret-invalid-reference-grant.go): grants that
    each miss in one field (namespace, from group/kind/namespace, to group/kind/name) do not let
    the listener use the Secret: ResolvedRefs False RefNotPermitted, HTTPRoute supported, no route.
    """
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "certificate", "namespace": WEB},
        "stringData": PEM_SHAPED,
    }
    https = listener("https", port=443, protocol="HTTPS", allowedRoutes={"namespaces": {"from": "All"}},
                     tls={"certificateRefs": [{"group": "", "kind": "Secret", "name": "certificate", "namespace": WEB}]})
    table = gateway_table(gateway("gateway-secret-invalid-reference-grant", https, namespace=INFRA), secret, *wrong_grants("Gateway", "Secret", "certificate", "HTTPRoute"))
    ((name, kinds, attached, conditions),) = listener_status(table, "gateway-secret-invalid-reference-grant", INFRA)
    assert (name, attached) == ("https", 0) and "HTTPRoute" in kinds  # the suite allows more kinds (GRPCRoute: h2 by ALPN)
    assert conditions["ResolvedRefs"] == ("False", "RefNotPermitted")
    assert table.table.certificates.secret_for("any.example") is None
    # the same Gateway with the grant that fits: the refusal was the grants'
    fitting = gateway_table(gateway("gateway-secret-invalid-reference-grant", https, namespace=INFRA), secret, grant("fits", WEB, "Gateway", "Secret", "certificate"))
    assert listener_status(fitting, "gateway-secret-invalid-reference-grant", INFRA)[0][3]["ResolvedRefs"] == ("True", "ResolvedRefs")


def test_httproute_invalid_reference_grant() -> None:
    """
    HTTPRouteInvalidReferenceGrant (httproute-invalid-reference-grant.go): a backendRef in another
    namespace whose grants each miss in one field: the route is Accepted, ResolvedRefs False
    RefNotPermitted, and its requests get 500, not the backend.
    """
    route = http_route("reference-grant", to(backend("web-backend", namespace=WEB)), parents=({"name": "same-namespace"},), namespace=INFRA)
    objects = [gateway("same-namespace", listener("http"), namespace=INFRA), route, *services("web-backend", namespace=WEB)]
    table = gateway_table(*objects, *wrong_grants("HTTPRoute", "Service", "web-backend", "Gateway"))
    assert parent_conditions(table, "reference-grant", INFRA) == [{"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "RefNotPermitted")}]
    assert serve(table.table, "any.example", "/") == "500"
    granted = gateway_table(*objects, grant("fits", WEB, "HTTPRoute", "Service", "web-backend"))
    assert serve(granted.table, "any.example", "/") == f"{WEB}/web-backend:80"


def test_httproute_disallowed_kind() -> None:
    """
    HTTPRouteDisallowedKind (httproute-disallowed-kind.go): a Gateway whose only listener allows
    TLSRoutes: the HTTPRoute is not Accepted (NotAllowedByListeners) but its refs resolve, and the
    listener counts no route.
    """
    tls = listener("tls", port=443, protocol="TLS", tls={"mode": "Passthrough"},
                   allowedRoutes={"namespaces": {"from": "Same"}, "kinds": [{"kind": "TLSRoute"}]})
    table = gateway_table(
        gateway("tlsroutes-only", tls, namespace=INFRA),
        http_route("disallowed-kind", to(backend("infra-backend-v1")), parents=({"name": "tlsroutes-only", "namespace": INFRA},), namespace=INFRA),
        *services("infra-backend-v1", namespace=INFRA),
    )
    assert parent_conditions(table, "disallowed-kind", INFRA) == [{"Accepted": ("False", "NotAllowedByListeners"), "ResolvedRefs": ("True", "ResolvedRefs")}]
    ((_, kinds, attached, _),) = listener_status(table, "tlsroutes-only", INFRA)
    assert (kinds, attached) == (("TLSRoute",), 0)
    assert serve(table.table, "any.example", "/") == "404"


def test_tlsroute_listener_passthrough_supported_kinds() -> None:
    """
    TLSRouteListenerPassthroughSupportedKinds (tlsroute-listener-passthrough-supported-kinds.go):
    a Passthrough listener that allows TCPRoute and TLSRoute supports TLSRoute only, and says so
    with ResolvedRefs False InvalidRouteKinds.
    """
    tls = listener("tls-passthrough", port=443, protocol="TLS", tls={"mode": "Passthrough"},
                   allowedRoutes={"namespaces": {"from": "Same"}, "kinds": [{"kind": "TCPRoute"}, {"kind": "TLSRoute"}]})
    table = gateway_table(gateway("gateway-tlsroute-passthrough-supported-kind", tls, namespace=INFRA))
    ((name, kinds, attached, conditions),) = listener_status(table, "gateway-tlsroute-passthrough-supported-kind", INFRA)
    assert (name, kinds, attached) == ("tls-passthrough", ("TLSRoute",), 0)
    assert conditions["ResolvedRefs"] == ("False", "InvalidRouteKinds")


class RecordingWriter(LeaderWriter):
    """The writes the status controller asks for, kept instead of sent (what the patch says is the fact here)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, kind: str, verb: str, body: Any, content_type: str = "application/json",
                timeout: tuple[float, float] = (5.0, 30.0)) -> dict[str, Any]:
        self.requests.append((method, path, body))
        return {}


def test_gateway_preserve_foreign_conditions() -> None:
    """
    GatewayPreserveForeignConditions (gateway-preserve-foreign-conditions.go, provisional): a
    condition type we do not set, seeded on the Gateway and on its listener, is in our status
    patch exactly as it was (a merge patch replaces the lists whole), while our own conditions
    move to the bumped generation.
    """
    seeded = {"type": "conformance.gateway.networking.k8s.io/StaleCondition", "status": "True", "reason": "Seeded", "message": "",
              "observedGeneration": 1, "lastTransitionTime": "2026-01-02T03:04:05Z"}
    ours = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "", "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}
    found = gateway("gateway-preserve-foreign-conditions", listener("http", hostname="second.example.com", allowedRoutes={"namespaces": {"from": "Same"}}),
                    namespace=INFRA, generation=2)
    found["status"] = {
        "conditions": [ours, seeded],
        "listeners": [{"name": "http", "supportedKinds": [{"group": GW.split("/")[0], "kind": "HTTPRoute"}], "attachedRoutes": 0, "conditions": [ours, seeded]}],
    }
    state = state_from_objects([gateway_class(), found])
    table = build(state, BuildOptions(reserved_ports=PORTS))
    store = Store()
    (parsed,) = state.gateways
    store.put((INFRA, "gateway-preserve-foreign-conditions"), parsed)
    writer = RecordingWriter()
    sync = GatewayStatusSync(writer, {"Gateway": store}, "twingress.io/gateway-controller", PublishedAddresses(("192.0.2.1",)))
    ref = ObjectRef("Gateway", INFRA, "gateway-preserve-foreign-conditions")
    assert ref in sync.table_changed(table.report)
    sync(ref)
    ((method, path, body),) = writer.requests
    assert (method, path.rsplit("/", 1)[-1]) == ("PATCH", "status")
    for conditions in (body["status"]["conditions"], body["status"]["listeners"][0]["conditions"]):
        assert seeded in conditions
        by_type = {c["type"]: c for c in conditions}
        assert by_type["Accepted"]["observedGeneration"] == 2
        assert by_type["Accepted"]["lastTransitionTime"] == ours["lastTransitionTime"]  # its status held: the transition time stays
