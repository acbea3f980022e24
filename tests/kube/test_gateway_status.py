"""
Gateway API status through the real kube-apiserver (the v1.6.3 CRDs' status subresources),
written by twingress's Lease holder, and what it serves as the objects change under it.

- Every condition reason twingress writes (ingress/routing/gateway/listeners.py, rules.py and
  __init__.py), table-driven: one twingress, one namespace of objects, each awaited until it shows
  its (type, status, reason, observedGeneration).
- ReferenceGrants created and deleted while twingress runs: a cross-namespace backendRef and
  certificateRef refused, allowed, refused again, in status and on the wire.
- A route moved between Gateways: its parents entries, the listeners' attachedRoutes and the
  traffic follow.

Each docstring names the upstream conformance tests (sigs.k8s.io/gateway-api v1.6.3,
conformance/tests/<file>.go ShortName) or spec facts it restates.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest
from cryptography.hazmat.primitives import serialization

from tests.kube.api import Kube
from tests.kube.gateway_support import (
    GROUP,
    GatewayAPI,
    conditions,
    gateway_body,
    grant_body,
    listener,
    ours,
    route_body,
    start,
)
from tests.kube.twingress import host_for, wait_until
from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.support import free_port

pytestmark = pytest.mark.kube

OK = {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
NO_CONFLICT = {"Conflicted": ("False", "NoConflicts")}  # every listener's, unless it wants a port another protocol holds
LISTENER_OK = {"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed"), "ResolvedRefs": ("True", "ResolvedRefs"), **NO_CONFLICT}


def refused_listener(reason: str, resolved: tuple[str, str] = ("True", "ResolvedRefs")) -> dict[str, tuple[str, str]]:
    """A listener twingress does not serve: Accepted False for C{reason}, not Programmed."""
    return {"Accepted": ("False", reason), "Programmed": ("False", "Invalid"), "ResolvedRefs": resolved, **NO_CONFLICT}


def unresolved_listener(reason: str) -> dict[str, tuple[str, str]]:
    """A listener whose certificateRef cannot be used: Accepted, not Programmed, ResolvedRefs False for C{reason}."""
    return {"Accepted": ("True", "Accepted"), "Programmed": ("False", "Invalid"), "ResolvedRefs": ("False", reason), **NO_CONFLICT}


def backend(name: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"backendRefs": [{"name": name, "port": 80, **extra}]}]


def https_args() -> tuple[int, tuple[str, ...]]:
    port = free_port()
    return port, ("--https", f"tcp:{port}:interface=127.0.0.1")


# --- reading status back --------------------------------------------------------------------------


class Expect:
    """What one object's status must show: conditions by type, and for listeners kinds and counts."""

    def __init__(self, what: str, read: Callable[[], tuple[int, Optional[dict[str, Any]]]], conditions: dict[str, tuple[str, str]], **fields: Any) -> None:
        self.what = what
        self.read = read  # -> (the object's generation, the status part, or None when absent)
        self.conditions = conditions
        self.fields = fields

    def mismatch(self) -> Optional[str]:
        generation, found = self.read()
        if found is None:
            return f"{self.what}: no status entry"
        want = {t: (s, r, generation) for t, (s, r) in self.conditions.items()}
        have = conditions(found.get("conditions") or [])
        if have != want:
            return f"{self.what}: {have} != {want}"
        for key, value in self.fields.items():
            if found.get(key) != value:
                return f"{self.what}: {key} {found.get(key)!r} != {value!r}"
        return None


def wait_all(expectations: list[Expect], what: str) -> None:
    """Until every expectation holds at once; a timeout names the ones that did not."""

    def check() -> bool:
        wrong = [m for m in (e.mismatch() for e in expectations) if m]
        if wrong:
            raise AssertionError("; ".join(wrong))
        return True

    wait_until(check, what=what)


class Status:
    """Readers of the status parts of one namespace's Gateway API objects."""

    def __init__(self, gateway_api: GatewayAPI, namespace: str) -> None:
        self.api = gateway_api
        self.namespace = namespace

    def gateway_class(self, name: str) -> Callable[[], tuple[int, Optional[dict[str, Any]]]]:
        def read() -> tuple[int, Optional[dict[str, Any]]]:
            found = self.api.read("gatewayclasses", name)
            return found["metadata"]["generation"], found.get("status")
        return read

    def gateway(self, name: str) -> Callable[[], tuple[int, Optional[dict[str, Any]]]]:
        def read() -> tuple[int, Optional[dict[str, Any]]]:
            found = self.api.read("gateways", name, self.namespace)
            return found["metadata"]["generation"], found.get("status")
        return read

    def listener(self, gateway: str, name: str) -> Callable[[], tuple[int, Optional[dict[str, Any]]]]:
        def read() -> tuple[int, Optional[dict[str, Any]]]:
            found = self.api.read("gateways", gateway, self.namespace)
            entries = (found.get("status") or {}).get("listeners") or []
            return found["metadata"]["generation"], next((e for e in entries if e["name"] == name), None)
        return read

    def parent(self, route: str, gateway: str, section: Optional[str] = None) -> Callable[[], tuple[int, Optional[dict[str, Any]]]]:
        """The route's parents entry of ours for C{gateway} (and C{section}); there must be at most one."""
        def read() -> tuple[int, Optional[dict[str, Any]]]:
            found = self.api.read("httproutes", route, self.namespace)
            entries = [e for e in ours(found) if e["parentRef"]["name"] == gateway and e["parentRef"].get("sectionName") == section]
            assert len(entries) <= 1, entries
            return found["metadata"]["generation"], entries[0] if entries else None
        return read

    def parent_names(self, route: str) -> list[str]:
        """The Gateways the route's parents entries of ours name, in order."""
        return [e["parentRef"]["name"] for e in ours(self.api.read("httproutes", route, self.namespace))]


def served_certificate(port: int, servername: str) -> str:
    """SHA-256 of the leaf twingress presents for SNI C{servername} (unverified: the default is self-signed)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw, server_hostname=servername) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der
    return hashlib.sha256(der).hexdigest()


@pytest.fixture
def other_namespace(kube: Kube) -> Iterator[str]:
    """A second namespace, for references across namespaces; deleted after the test."""
    name = f"other-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name)
    yield name
    kube.delete_namespace(name)


# --- every reason ----------------------------------------------------------------------------------


def test_every_condition_reason(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """
    Every (type, status, reason) twingress writes, at the generation it judged, through the real
    apiserver: GatewayClassObservedGenerationBump's Accepted; GatewayWithAttachedRoutes (attachedRoutes,
    a route that does not intersect not counted); GatewayModifyListeners (Accepted with
    ListenersNotValid while some listener is refused); GatewayListenerUnsupportedProtocol (as
    UnsupportedProtocol; PortUnavailable for twingress's admin port); GatewayInvalidRouteKind (InvalidRouteKinds,
    empty supportedKinds); GatewayInvalidTLSConfiguration (InvalidCertificateRef); GatewaySecretMissingReferenceGrant
    (RefNotPermitted); a TLS listener that terminates with a missing certificate (InvalidCertificateRef);
    HTTPRouteInvalidParentRefNotMatchingSectionName (NoMatchingParent); HTTPRouteInvalidCrossNamespaceParentRef's
    reason on an allowedRoutes selector (NotAllowedByListeners); HTTPRouteHostnameIntersection's
    NoMatchingListenerHostname; HTTPRouteInvalidNonExistentBackendRef (BackendNotFound),
    HTTPRouteInvalidBackendRefUnknownKind (InvalidKind), HTTPRouteInvalidCrossNamespaceBackendRef
    (RefNotPermitted), each rule answering 500.
    """
    https_port, https = https_args()
    proxy = start(twingress, namespace, *https)
    pod = echo("pod-reasons")
    kube.backend(namespace, "web", [pod])
    http = proxy.http_port
    host = {name: host_for(namespace, name) for name in ("ok", "missing", "kind", "cross", "section", "named", "selector", "kinds", "elsewhere")}
    tls = {"mode": "Terminate", "certificateRefs": [{"name": "no-such-secret"}]}
    create = lambda body: gateway_api.create("gateways" if body["kind"] == "Gateway" else "httproutes", body, namespace)  # noqa: E731
    create(gateway_body("gw-ok", gateway_class, http))
    create(gateway_body("gw-mixed", gateway_class, http, [
        listener("http", http),
        listener("wrong-port", proxy.admin_port),  # a port twingress holds for its admin listener
        listener("custom", http, "example.com/custom"),
        listener("kinds", http, hostname=host["kinds"], allowedRoutes={"kinds": [{"kind": "TLSRoute"}]}),
        listener("selector", http, hostname=host["selector"], allowedRoutes={"namespaces": {"from": "Selector", "selector": {"matchLabels": {"no-such": "label"}}}}),
        listener("named", http, hostname=host["named"]),
    ]))
    create(gateway_body("gw-tls", gateway_class, http, [
        listener("missing-cert", https_port, "HTTPS", hostname="missing-cert.example", tls=tls),
        listener("other-kind", https_port, "HTTPS", hostname="other-kind.example", tls={"mode": "Terminate", "certificateRefs": [{"kind": "ConfigMap", "name": "x"}]}),
        listener("foreign-cert", https_port, "HTTPS", hostname="foreign-cert.example",
                 tls={"mode": "Terminate", "certificateRefs": [{"name": "cert", "namespace": "elsewhere"}]}),
        listener("terminate", https_port, "TLS", hostname="terminate.example", tls=tls),
    ]))
    create(route_body("r-ok", [host["elsewhere"]], backend("web"), [{"name": "gw-ok"}]))
    gateway_api.patch("httproutes", "r-ok", namespace, {"spec": {"hostnames": [host["ok"]]}})  # generation 2
    create(route_body("r-missing", [host["missing"]], backend("missing"), [{"name": "gw-ok"}]))
    create(route_body("r-kind", [host["kind"]], [{"backendRefs": [{"group": "example.com", "kind": "Widget", "name": "w"}]}], [{"name": "gw-ok"}]))
    create(route_body("r-cross", [host["cross"]], backend("web", namespace="elsewhere"), [{"name": "gw-ok"}]))
    create(route_body("r-section", [host["section"]], backend("web"), [{"name": "gw-ok", "sectionName": "nope"}]))
    create(route_body("r-named", [host["named"]], backend("web"), [{"name": "gw-mixed", "sectionName": "named"}]))
    create(route_body("r-selector", [host["selector"]], backend("web"), [{"name": "gw-mixed", "sectionName": "selector"}]))
    create(route_body("r-hostname", [host["elsewhere"]], backend("web"), [{"name": "gw-mixed", "sectionName": "named"}]))

    status = Status(gateway_api, namespace)
    http_route = [{"group": GROUP, "kind": "HTTPRoute"}]
    wait_all([
        Expect("GatewayClass", status.gateway_class(gateway_class), {"Accepted": ("True", "Accepted")}),
        Expect("gw-ok", status.gateway("gw-ok"), {"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed")}),
        Expect("gw-ok/http", status.listener("gw-ok", "http"), LISTENER_OK, supportedKinds=http_route, attachedRoutes=4),
        Expect("gw-mixed", status.gateway("gw-mixed"), {"Accepted": ("True", "ListenersNotValid"), "Programmed": ("True", "Programmed")}),
        Expect("gw-mixed/http", status.listener("gw-mixed", "http"), LISTENER_OK, supportedKinds=http_route, attachedRoutes=0),
        Expect("gw-mixed/wrong-port", status.listener("gw-mixed", "wrong-port"), refused_listener("PortUnavailable"), supportedKinds=http_route),
        Expect("gw-mixed/custom", status.listener("gw-mixed", "custom"), refused_listener("UnsupportedProtocol"), supportedKinds=[]),
        Expect("gw-mixed/kinds", status.listener("gw-mixed", "kinds"),
               {**LISTENER_OK, "ResolvedRefs": ("False", "InvalidRouteKinds")}, supportedKinds=[], attachedRoutes=0),
        Expect("gw-mixed/selector", status.listener("gw-mixed", "selector"), LISTENER_OK, attachedRoutes=0),
        Expect("gw-mixed/named", status.listener("gw-mixed", "named"), LISTENER_OK, attachedRoutes=1),
        Expect("gw-tls", status.gateway("gw-tls"), {"Accepted": ("False", "ListenersNotValid"), "Programmed": ("False", "Invalid")}),
        Expect("gw-tls/missing-cert", status.listener("gw-tls", "missing-cert"), unresolved_listener("InvalidCertificateRef"),
               supportedKinds=[*http_route, {"group": GROUP, "kind": "GRPCRoute"}]),  # HTTPS listeners serve HTTP/2
        Expect("gw-tls/other-kind", status.listener("gw-tls", "other-kind"), unresolved_listener("InvalidCertificateRef")),
        Expect("gw-tls/foreign-cert", status.listener("gw-tls", "foreign-cert"), unresolved_listener("RefNotPermitted")),
        Expect("gw-tls/terminate", status.listener("gw-tls", "terminate"), unresolved_listener("InvalidCertificateRef"),
               supportedKinds=[{"group": GROUP, "kind": "TLSRoute"}]),
        Expect("r-ok", status.parent("r-ok", "gw-ok"), OK),
        Expect("r-missing", status.parent("r-missing", "gw-ok"), {**OK, "ResolvedRefs": ("False", "BackendNotFound")}),
        Expect("r-kind", status.parent("r-kind", "gw-ok"), {**OK, "ResolvedRefs": ("False", "InvalidKind")}),
        Expect("r-cross", status.parent("r-cross", "gw-ok"), {**OK, "ResolvedRefs": ("False", "RefNotPermitted")}),
        Expect("r-section", status.parent("r-section", "gw-ok", "nope"), {**OK, "Accepted": ("False", "NoMatchingParent")}),
        Expect("r-named", status.parent("r-named", "gw-mixed", "named"), OK),
        Expect("r-selector", status.parent("r-selector", "gw-mixed", "selector"), {**OK, "Accepted": ("False", "NotAllowedByListeners")}),
        Expect("r-hostname", status.parent("r-hostname", "gw-mixed", "named"), {**OK, "Accepted": ("False", "NoMatchingListenerHostname")}),
    ], "every object's status")
    assert gateway_api.read("httproutes", "r-ok", namespace)["metadata"]["generation"] == 2  # the generation awaited above
    for name in ("ok", "named"):
        proxy.wait_status(host[name], 200, backend="pod-reasons")
    for name in ("missing", "kind", "cross"):
        assert proxy.get(host[name]).status == 500, name
    for name in ("section", "selector", "kinds", "elsewhere"):
        assert proxy.get(host[name]).status == 404, name


# --- ReferenceGrants, live -------------------------------------------------------------------------


def test_malformed_certificate_and_backends_behind_an_unresolved_listener(
    kube: Kube, namespace: str, twingress: Any, gateway_api: GatewayAPI, gateway_class: str
) -> None:
    """
    GatewayInvalidTLSConfiguration's "Malformed secret" (conformance tests/gateway-invalid-tls-configuration.go):
    a kubernetes.io/tls Secret whose tls.crt and tls.key are not PEM ("Hello world") is an
    InvalidCertificateRef, as a missing one is. GatewayWithAttachedRoutes' "AttachedRoutes set even when
    Gateway has unresolved refs" (tests/gateway-with-attached-routes.go): a route on a listener whose
    certificate Secret does not exist is attached (attachedRoutes 1) and its backendRef to a Service that
    does not exist is still judged: ResolvedRefs False, BackendNotFound, for that parent.
    """
    https_port, https = https_args()
    start(twingress, namespace, *https)
    hello = {"tls.crt": "SGVsbG8gd29ybGQK", "tls.key": "SGVsbG8gd29ybGQK"}  # base64 of "Hello world\n", as upstream's
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "malformed"}, "type": "kubernetes.io/tls", "data": hello})
    listeners = [
        listener("malformed", https_port, "HTTPS", hostname="malformed.example", tls={"mode": "Terminate", "certificateRefs": [{"name": "malformed"}]}),
        listener("missing", https_port, "HTTPS", hostname="missing.example", tls={"mode": "Terminate", "certificateRefs": [{"name": "does-not-exist"}]}),
    ]
    gateway_api.create("gateways", gateway_body("gw", gateway_class, https_port, listeners), namespace)
    gateway_api.create("httproutes", route_body("r", [], backend("does-not-exist"), [{"name": "gw", "sectionName": "missing"}]), namespace)
    status = Status(gateway_api, namespace)
    wait_all([
        Expect("gw/malformed", status.listener("gw", "malformed"), unresolved_listener("InvalidCertificateRef"), attachedRoutes=0),
        Expect("gw/missing", status.listener("gw", "missing"), unresolved_listener("InvalidCertificateRef"), attachedRoutes=1),
        Expect("r", status.parent("r", "gw", "missing"), {**OK, "ResolvedRefs": ("False", "BackendNotFound")}),
    ], "the malformed certificate and the unresolved backend in status")


def test_reference_grants_added_and_removed_live(
    kube: Kube, namespace: str, other_namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str
) -> None:
    """
    HTTPRouteReferenceGrant and HTTPRouteInvalidCrossNamespaceBackendRef, then the grant taken back:
    a backendRef to a Service of another namespace is RefNotPermitted and its rule answers 500 until a
    ReferenceGrant there allows it, then ResolvedRefs and the backend answers; deleted, refused again.
    GatewaySecretReferenceGrantSpecific and GatewaySecretMissingReferenceGrant likewise for a listener's
    certificateRef: the Secret is served by SNI only while a grant allows it (the default certificate
    otherwise). twingress watches every namespace here: the grant and the Service live in another.
    """
    https_port, https = https_args()
    proxy = start(twingress, namespace, *https, "--watch-namespace", "")
    pod = echo("pod-granted")
    kube.backend(other_namespace, "web", [pod])
    host, tls_host = host_for(namespace, "cross"), host_for(namespace, "tls")
    leaf = CertificateAuthority("grants").issue([tls_host], "ec")
    kube.core.create_namespaced_secret(other_namespace, tls_secret("cert", leaf, other_namespace))
    ours_sha = hashlib.sha256(leaf.cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    listeners = [
        listener("http", proxy.http_port),
        listener("https", https_port, "HTTPS", hostname=tls_host, tls={"mode": "Terminate", "certificateRefs": [{"name": "cert", "namespace": other_namespace}]}),
    ]
    gateway_api.create("gateways", gateway_body("gw", gateway_class, proxy.http_port, listeners), namespace)
    gateway_api.create("httproutes", route_body("cross", [host], backend("web", namespace=other_namespace)), namespace)
    status = Status(gateway_api, namespace)
    refused = [
        Expect("route", status.parent("cross", "gw"), {**OK, "ResolvedRefs": ("False", "RefNotPermitted")}),
        Expect("listener", status.listener("gw", "https"), unresolved_listener("RefNotPermitted")),
    ]
    allowed = [
        Expect("route", status.parent("cross", "gw"), OK),
        Expect("listener", status.listener("gw", "https"), LISTENER_OK),
    ]

    def refused_on_the_wire() -> None:
        proxy.wait_status(host, 500)
        assert served_certificate(https_port, tls_host) != ours_sha

    wait_all(refused, "RefNotPermitted without a grant")
    refused_on_the_wire()

    gateway_api.create("referencegrants", grant_body("routes", "HTTPRoute", namespace, "Service", "web"), other_namespace)
    gateway_api.create("referencegrants", grant_body("gateways", "Gateway", namespace, "Secret", "cert"), other_namespace)
    wait_all(allowed, "ResolvedRefs with the grants")
    proxy.wait_status(host, 200, backend="pod-granted")
    wait_until(lambda: served_certificate(https_port, tls_host) == ours_sha, what="the granted certificate served by SNI")

    gateway_api.delete("referencegrants", "routes", other_namespace)
    gateway_api.delete("referencegrants", "gateways", other_namespace)
    wait_all(refused, "RefNotPermitted once the grants are gone")
    refused_on_the_wire()


# --- a route moving between Gateways ---------------------------------------------------------------


def test_a_route_moves_between_gateways(kube: Kube, namespace: str, echo: Any, twingress: Any, gateway_api: GatewayAPI, gateway_class: str) -> None:
    """
    A route's parentRefs changed while twingress runs. GatewayWithAttachedRoutes: each listener
    counts the routes attached now. RouteParentStatus ("when this route attaches to a parent, the
    controller that manages the parent must add an entry ... An empty list means the route has not
    been attached to any Gateway"): the entry of the Gateway left is removed, both are listed while
    both are referenced, and none of ours is left once no Gateway of ours is. The route's hosts (the
    listeners' hostnames, the route has none of its own) are served only where it is attached.
    """
    proxy = start(twingress, namespace)
    pod = echo("pod-mover")
    kube.backend(namespace, "web", [pod])
    host_a, host_b = host_for(namespace, "a"), host_for(namespace, "b")
    for name, host in (("gw-a", host_a), ("gw-b", host_b)):
        gateway_api.create("gateways", gateway_body(name, gateway_class, proxy.http_port, [listener("http", proxy.http_port, hostname=host)]), namespace)
    gateway_api.create("httproutes", route_body("mover", [], backend("web"), [{"name": "gw-a"}]), namespace)
    status = Status(gateway_api, namespace)

    def attached(a: int, b: int) -> list[Expect]:
        return [
            Expect("gw-a/http", status.listener("gw-a", "http"), LISTENER_OK, attachedRoutes=a),
            Expect("gw-b/http", status.listener("gw-b", "http"), LISTENER_OK, attachedRoutes=b),
        ]

    def parents(*names: str) -> None:
        wait_until(lambda: status.parent_names("mover") == list(names), what=f"our parents entries {names}")

    def served(*hosts: str) -> None:
        for host in (host_a, host_b):
            proxy.wait_status(host, 200 if host in hosts else 404, backend="pod-mover" if host in hosts else None)

    wait_all([Expect("mover@gw-a", status.parent("mover", "gw-a"), OK), *attached(1, 0)], "attached to gw-a")
    parents("gw-a")
    served(host_a)

    gateway_api.patch("httproutes", "mover", namespace, {"spec": {"parentRefs": [{"name": "gw-b"}]}})
    wait_all([Expect("mover@gw-b", status.parent("mover", "gw-b"), OK), *attached(0, 1)], "moved to gw-b")
    parents("gw-b")
    served(host_b)

    gateway_api.patch("httproutes", "mover", namespace, {"spec": {"parentRefs": [{"name": "gw-a"}, {"name": "gw-b"}]}})
    wait_all([Expect("mover@gw-a", status.parent("mover", "gw-a"), OK), Expect("mover@gw-b", status.parent("mover", "gw-b"), OK), *attached(1, 1)], "on both")
    parents("gw-a", "gw-b")
    served(host_a, host_b)

    gateway_api.patch("httproutes", "mover", namespace, {"spec": {"parentRefs": [{"name": "not-ours"}]}})
    wait_all(attached(0, 0), "attached to neither")
    parents()
    served()
