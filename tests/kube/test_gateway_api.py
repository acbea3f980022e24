"""
The Gateway API against a real kube-apiserver with the release's CRDs (testenv/gateway-api.sh,
v1.6.3): their schema and CEL validation judge every object here, twingress's informers read
them, its Lease holder writes their status, and real requests go through the proxy.

Each test restates a Gateway API conformance test (sigs.k8s.io/gateway-api/conformance v1.6.3,
tests/*.go; the name is its ShortName) as far as one twingress on loopback can: the Gateway's
HTTP listener is twingress's own --http port.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pytest

from tests.kube.api import Kube
from tests.kube.gateway_support import GROUP, GatewayAPI, conditions, gateway_body, ours, route_body, start
from tests.kube.twingress import host_for, wait_until

pytestmark = pytest.mark.kube


def test_gateway_and_routes_are_accepted_and_served(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """HTTPRouteSimpleSameNamespace, GatewayWithAttachedRoutes and HTTPRouteInvalidNonExistentBackendRef: status and traffic."""
    proxy = start(twingress, namespace)
    pod = echo("pod-gw")
    kube.backend(namespace, "web", [pod])
    host = host_for(namespace, "gw")
    gateway_api.create("gateways", gateway_body("gw", gateway_class, proxy.http_port), namespace)
    gateway_api.create("httproutes", route_body("web", [host], [{"backendRefs": [{"name": "web", "port": 80}]}]), namespace)
    gateway_api.create("httproutes", route_body("broken", [host], [{"matches": [{"path": {"type": "PathPrefix", "value": "/missing"}}],
                                                                   "backendRefs": [{"name": "missing", "port": 80}]}]), namespace)

    proxy.wait_status(host, 200, "/hello", backend="pod-gw")
    proxy.wait_status(host, 500, "/missing/x")

    def accepted_class() -> Optional[dict[str, Any]]:
        found = conditions((gateway_api.read("gatewayclasses", gateway_class).get("status") or {}).get("conditions", []))
        return found if found.get("Accepted", ("",))[0] == "True" else None

    assert wait_until(accepted_class, what="the GatewayClass Accepted")["Accepted"] == ("True", "Accepted", 1)

    def programmed() -> Optional[dict[str, Any]]:
        status = gateway_api.read("gateways", "gw", namespace).get("status") or {}
        listeners = status.get("listeners") or []
        done = conditions(status.get("conditions", [])).get("Programmed", ("",))[0] == "True" and listeners and listeners[0]["attachedRoutes"] == 2
        return status if done else None

    status = wait_until(programmed, what="the Gateway Programmed with 2 attached routes")
    assert conditions(status["conditions"])["Accepted"] == ("True", "Accepted", 1)
    (listener,) = status["listeners"]
    assert listener["supportedKinds"] == [{"group": GROUP, "kind": "HTTPRoute"}]
    assert conditions(listener["conditions"]) == {
        "Accepted": ("True", "Accepted", 1), "Programmed": ("True", "Programmed", 1), "ResolvedRefs": ("True", "ResolvedRefs", 1),
        "Conflicted": ("False", "NoConflicts", 1),
    }
    assert status["addresses"] == [{"type": "IPAddress", "value": "192.0.2.80"}]

    web = wait_until(lambda: ours(gateway_api.read("httproutes", "web", namespace)), what="the route's status")
    assert web[0]["parentRef"] == {"group": GROUP, "kind": "Gateway", "namespace": namespace, "name": "gw"}
    assert conditions(web[0]["conditions"]) == {"Accepted": ("True", "Accepted", 1), "ResolvedRefs": ("True", "ResolvedRefs", 1)}
    broken = wait_until(lambda: ours(gateway_api.read("httproutes", "broken", namespace)), what="the broken route's status")
    assert conditions(broken[0]["conditions"])["ResolvedRefs"] == ("False", "BackendNotFound", 1)


def test_observed_generation_follows_spec_changes(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """GatewayObservedGenerationBump and HTTPRouteObservedGenerationBump; a new host is live after the change."""
    proxy = start(twingress, namespace)
    pod = echo("pod-bump")
    kube.backend(namespace, "web", [pod])
    first, second = host_for(namespace, "first"), host_for(namespace, "second")
    gateway_api.create("gateways", gateway_body("gw", gateway_class, proxy.http_port), namespace)
    gateway_api.create("httproutes", route_body("web", [first], [{"backendRefs": [{"name": "web", "port": 80}]}]), namespace)
    proxy.wait_status(first, 200, backend="pod-bump")

    gateway_api.patch("httproutes", "web", namespace, {"spec": {"hostnames": [second]}})
    proxy.wait_status(second, 200, backend="pod-bump")
    proxy.wait_status(first, 404)

    def bumped() -> bool:
        parents = ours(gateway_api.read("httproutes", "web", namespace))
        return bool(parents) and all(c["observedGeneration"] == 2 for c in parents[0]["conditions"])

    wait_until(bumped, what="the route's conditions at generation 2")
    listeners = [{"name": "http", "port": proxy.http_port, "protocol": "HTTP"}, {"name": "other", "port": proxy.admin_port, "protocol": "HTTP", "hostname": "other.example"}]
    gateway_api.patch("gateways", "gw", namespace, {"spec": {"listeners": listeners}})

    def gateway_bumped() -> Optional[dict[str, Any]]:
        status = gateway_api.read("gateways", "gw", namespace).get("status") or {}
        found = conditions(status.get("conditions", []))
        return status if found and all(g == 2 for _, _, g in found.values()) and len(status.get("listeners", [])) == 2 else None

    status = wait_until(gateway_bumped, what="the Gateway's conditions at generation 2")
    other = next(entry for entry in status["listeners"] if entry["name"] == "other")
    assert conditions(other["conditions"])["Accepted"] == ("False", "PortUnavailable", 2)
    assert conditions(status["conditions"])["Accepted"] == ("True", "ListenersNotValid", 2)


def test_another_controllers_status_entries_are_kept(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """HTTPRoutePreserveForeignStatus: a parents entry of another controller stays as it was."""
    gateway_api.create("httproutes", route_body("web", [host_for(namespace, "foreign")], [{"backendRefs": [{"name": "web", "port": 80}]}],
                                                parents=[{"name": "gw"}, {"name": "theirs"}]), namespace)
    foreign = {
        "parentRef": {"group": GROUP, "kind": "Gateway", "name": "theirs"}, "controllerName": "example.com/other-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "theirs", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }
    gateway_api.patch_status("httproutes", "web", namespace, {"status": {"parents": [foreign]}})
    proxy = start(twingress, namespace)
    pod = echo("pod-foreign")
    kube.backend(namespace, "web", [pod])
    gateway_api.create("gateways", gateway_body("gw", gateway_class, proxy.http_port), namespace)
    wait_until(lambda: ours(gateway_api.read("httproutes", "web", namespace)), what="our parents entry")
    parents = gateway_api.read("httproutes", "web", namespace)["status"]["parents"]
    assert foreign in parents, json.dumps(parents)
    assert len(parents) == 2


def test_service_types(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """HTTPRouteServiceTypes: a headless Service with manual EndpointSlices, as a ClusterIP one, reached through its slices."""
    proxy = start(twingress, namespace)
    pod = echo("pod-headless")
    headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "headless", "namespace": namespace},
                "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 8080, "targetPort": pod.port, "protocol": "TCP"}]}}
    kube.core.create_namespaced_service(namespace, headless)
    kube.put_endpoint_slice(namespace, "headless-1", "headless", [pod.host], pod.port)
    kube.backend(namespace, "plain", [pod])
    hosts = {name: host_for(namespace, name) for name in ("headless", "plain")}
    gateway_api.create("gateways", gateway_body("gw", gateway_class, proxy.http_port), namespace)
    gateway_api.create("httproutes", route_body("headless", [hosts["headless"]], [{"backendRefs": [{"name": "headless", "port": 8080}]}]), namespace)
    gateway_api.create("httproutes", route_body("plain", [hosts["plain"]], [{"backendRefs": [{"name": "plain", "port": 80}]}]), namespace)
    for host in hosts.values():
        proxy.wait_status(host, 200, backend="pod-headless")


def test_retry_is_kept_by_the_crd_and_applied(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """
    HTTPRouteRetry (GEP-1731; conformance tests/httproute-retry.go): the experimental-channel
    HTTPRoute CRD the tests install keeps C{rules[].retry} (v1.6.3's standard one prunes it, and
    the suite's retries never reached twingress), twingress reads it, and a 500 from one endpoint
    is retried on the other (echo's C{on=pod-a} keeps C{status=500} to pod-a).
    """
    proxy = start(twingress, namespace)
    first = echo("pod-a")
    second = echo("pod-b", first.port)
    kube.backend(namespace, "web", [first, second])
    host = host_for(namespace, "retry")
    retry = {"codes": [500, 503], "attempts": 2, "backoff": "10ms"}
    gateway_api.create("gateways", gateway_body("gw", gateway_class, proxy.http_port), namespace)
    backends = [{"name": "web", "port": 80}]
    rules = [{"retry": retry, "backendRefs": backends}, {"matches": [{"path": {"type": "PathPrefix", "value": "/plain"}}], "backendRefs": backends}]
    gateway_api.create("httproutes", route_body("retried", [host], rules), namespace)
    assert gateway_api.read("httproutes", "retried", namespace)["spec"]["rules"][0]["retry"] == retry

    proxy.wait_status(host, 200)
    route = wait_until(lambda: proxy.route(host, "/"), what=f"{host} in /debug/routes")
    policy = {"on": ["error"], "nonIdempotent": False, "tries": 3, "timeout": 0.0, "sameEndpoint": True, "backoff": 0.01}  # attempts 2: 3 tries
    assert [choice.get("policies", {}).get("retry") for choice in route["choices"]] == [policy]
    answers = [proxy.get(host, "/?status=500&on=pod-a") for _ in range(20)]
    assert [(r.status, r.backend) for r in answers] == [(200, "pod-b")] * 20
    # the rule without retry: pod-a's 500s reach the client (so the round robin did send requests to pod-a above)
    plain = [proxy.get(host, "/plain?status=500&on=pod-a").status for _ in range(20)]
    assert 500 in plain and 200 in plain, plain
