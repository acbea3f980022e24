"""
Tests for Gateway API listeners on ports other than twingress's C{--http} and C{--https}
(L{ingress.routing.gateway.listeners}): each such HTTP or HTTPS listener is served on a port of
its own, with its own hosts and certificates, and listeners that want one port for different
protocols are Conflicted (sigs.k8s.io/gateway-api v1.7.0, apis/v1/gateway_types.go: Listener
"port", ListenerConditionConflicted and ListenerReasonProtocolConflict; all our Gateways share
one address, so their listeners share its ports).
"""

from __future__ import annotations

from typing import Any

from ingress.model import ObjectRef
from ingress.routing.gateway.status import with_listen_failures
from ingress.routing.report import Built
from tests.unit.objects import PEM_SHAPED
from tests.unit.test_gateway_routing import backend, gateway, gateway_table, http_route, l4_route, listener, parent_conditions, problems_of, serve, services, to

TLS_SECRET = {
    "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "cert", "namespace": "default"},
    "stringData": PEM_SHAPED,
}


def listener_conditions(table: Built, gateway_name: str = "gw") -> list[dict[str, tuple[str, str]]]:
    assert table.report.gateway_status is not None
    status = table.report.gateway_status.gateways[ObjectRef("Gateway", "default", gateway_name)]
    return [{c.type: (c.status, c.reason) for c in each.conditions} for each in status.listeners]


def test_an_http_listener_on_another_port_is_served_on_a_port_of_its_own() -> None:
    """Its routes answer on that port only; the port is a stream route that serves HTTP, named after its Gateway."""
    table = gateway_table(gateway("gw", listener("alt", port=8080)), http_route("r", to(backend("v1")), hostnames=("a.example",)), *services("v1"))
    assert listener_conditions(table)[0] == {
        "Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed"), "ResolvedRefs": ("True", "ResolvedRefs"), "Conflicted": ("False", "NoConflicts"),
    }
    stream = table.table.streams[("TCP", 8080)]
    assert (stream.serves, stream.name, stream.source) == ("http", "default/gw", ObjectRef("Gateway", "default", "gw"))
    assert serve(table.table.gateway_ports[8080], "a.example", "/x") == "default/v1:80"
    assert serve(table.table, "a.example", "/x") == "404"  # not on the --http listener
    assert table.report.problems == ()


def test_a_listener_without_routes_still_opens_its_port() -> None:
    """A Programmed listener answers (404) before any route attaches."""
    table = gateway_table(gateway("gw", listener("alt", port=8080)))
    assert table.table.streams[("TCP", 8080)].serves == "http"
    assert serve(table.table.gateway_ports[8080], "a.example", "/") == "404"


def test_a_route_on_two_listeners_is_served_on_both_ports() -> None:
    table = gateway_table(gateway("gw", listener("http"), listener("alt", port=8080)), http_route("r", to(backend("v1"))), *services("v1"))
    assert serve(table.table, "a.example", "/") == "default/v1:80"
    assert serve(table.table.gateway_ports[8080], "a.example", "/") == "default/v1:80"


def test_a_section_name_picks_one_port() -> None:
    table = gateway_table(
        gateway("gw", listener("http"), listener("alt", port=8080)),
        http_route("r", to(backend("v1")), parents=({"name": "gw", "sectionName": "alt"},)), *services("v1"),
    )
    assert serve(table.table, "a.example", "/") == "404"
    assert serve(table.table.gateway_ports[8080], "a.example", "/") == "default/v1:80"


def test_an_https_listener_on_another_port_has_its_own_certificates() -> None:
    tls: dict[str, Any] = {"certificateRefs": [{"name": "cert"}]}
    table = gateway_table(
        gateway("gw", listener("tls", port=8443, protocol="HTTPS", hostname="secure.example", tls=tls)),
        http_route("r", to(backend("v1"))), TLS_SECRET, *services("v1"),
    )
    assert table.table.streams[("TCP", 8443)].serves == "https"
    port = table.table.gateway_ports[8443]
    assert port.certificates.secret_for("secure.example") == ("default", "cert")
    assert table.table.certificates.secret_for("secure.example") is None  # the --https listener does not serve it
    assert serve(port, "secure.example", "/", scheme=b"https") == "default/v1:80"


def test_a_port_twingress_holds_for_another_listener_is_unavailable() -> None:
    """HTTPS on the --http port, HTTP on the --https or admin port: PortUnavailable."""
    table = gateway_table(
        gateway("gw", listener("a", port=80, protocol="HTTPS", tls={"certificateRefs": [{"name": "cert"}]}), listener("b", port=443), listener("c", port=9901)),
        TLS_SECRET, ports={80: "http", 443: "https", 9901: "admin"},
    )
    assert [found["Accepted"] for found in listener_conditions(table)] == [("False", "PortUnavailable")] * 3
    assert not table.table.streams and not table.table.gateway_ports


def test_tls_listeners_on_a_port_of_their_own_pass_through_and_terminate() -> None:
    """A TLS listener on another port: its port's TLS front passes its TLSRoutes' names through, or terminates them."""
    table = gateway_table(
        gateway("gw", listener("pass", port=8883, protocol="TLS", hostname="abc.example.com", tls={"mode": "Passthrough"}),
                listener("term", port=8883, protocol="TLS", hostname="tls.example.com", tls={"mode": "Terminate", "certificateRefs": [{"name": "cert"}]})),
        l4_route("TLSRoute", "pass", backend("v1", 443), section="pass"),
        l4_route("TLSRoute", "term", backend("v2", 443), section="term"),
        TLS_SECRET, *services("v1", "v2"),
    )
    assert [found["Accepted"] for found in listener_conditions(table)] == [("True", "Accepted")] * 2
    assert table.table.streams[("TCP", 8883)].serves == "https"
    port = table.table.gateway_ports[8883]
    assert port.passthrough_for("abc.example.com") is not None and port.terminated_for("tls.example.com") is not None
    assert port.certificates.secret_for("tls.example.com") == ("default", "cert")
    assert table.table.passthrough_for("abc.example.com") is None and table.table.terminated_for("tls.example.com") is None


def test_protocols_that_want_one_port_conflict_and_the_first_keeps_it() -> None:
    """
    ListenerReasonProtocolConflict: HTTP and TCP on one port cannot both be served; the first
    listener keeps the port, the other is Conflicted and not Programmed.  TCP and UDP on one port
    do not conflict (two port spaces).
    """
    table = gateway_table(
        gateway("gw", listener("web", port=8080), listener("raw", port=8080, protocol="TCP"), listener("dns", port=8080, protocol="UDP")),
    )
    web, raw, dns = listener_conditions(table)
    assert web["Conflicted"] == ("False", "NoConflicts") and web["Programmed"] == ("True", "Programmed")
    assert raw["Conflicted"] == ("True", "ProtocolConflict")
    assert raw["Accepted"] == ("False", "PortUnavailable") and raw["Programmed"] == ("False", "Invalid")
    assert dns["Conflicted"] == ("False", "NoConflicts")
    assert table.table.streams[("TCP", 8080)].serves == "http"


def test_the_older_gateway_keeps_a_port_across_gateways() -> None:
    """All our Gateways share one address: an older Gateway's HTTP listener keeps a port a newer one wants for HTTPS."""
    older = gateway("first", listener("web", port=8080))
    newer = gateway("second", listener("secure", port=8080, protocol="HTTPS", tls={"certificateRefs": [{"name": "cert"}]}))
    older["metadata"]["creationTimestamp"], newer["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    table = gateway_table(newer, older, TLS_SECRET)
    assert listener_conditions(table, "first")[0]["Conflicted"] == ("False", "NoConflicts")
    assert listener_conditions(table, "second")[0]["Conflicted"] == ("True", "ProtocolConflict")
    assert table.table.streams[("TCP", 8080)].serves == "http"
    assert not table.table.gateway_ports[8080].certificates.secrets


def test_http_listeners_of_two_gateways_on_one_port_share_it() -> None:
    table = gateway_table(
        gateway("one", listener("web", port=8080, hostname="a.example")), gateway("two", listener("web", port=8080, hostname="b.example")),
        http_route("a", to(backend("v1")), parents=({"name": "one"},)), http_route("b", to(backend("v2")), parents=({"name": "two"},)),
        *services("v1", "v2"),
    )
    assert listener_conditions(table, "two")[0]["Conflicted"] == ("False", "NoConflicts")
    assert serve(table.table.gateway_ports[8080], "a.example", "/") == "default/v1:80"
    assert serve(table.table.gateway_ports[8080], "b.example", "/") == "default/v2:80"


def test_a_stream_ingress_keeps_a_port_a_gateway_listener_wants() -> None:
    """As for TCPRoutes: the StreamIngress's port stays its own, and the Gateway is told."""
    stream_ingress = {
        "apiVersion": "twingress.io/v1alpha1", "kind": "StreamIngress", "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"protocol": "TCP", "listen": 8080, "upstream": {"service": "v1", "port": 80}},
    }
    table = gateway_table(gateway("gw", listener("alt", port=8080)), stream_ingress, *services("v1"))
    assert table.table.streams[("TCP", 8080)].source.kind == "StreamIngress"
    assert ("gw", "PortConflict") in problems_of(table, "Gateway")


def test_a_port_that_cannot_be_bound_makes_its_listener_unavailable() -> None:
    """The status the Lease holder writes: a listener whose port failed to bind is neither Accepted (PortUnavailable) nor Programmed."""
    table = gateway_table(gateway("gw", listener("http"), listener("alt", port=8080)))
    assert table.report.gateway_status is not None
    status = with_listen_failures(table.report.gateway_status, {("TCP", 8080): "Address already in use"})
    http, alt = ({c.type: (c.status, c.reason) for c in each.conditions} for each in status.gateways[ObjectRef("Gateway", "default", "gw")].listeners)
    assert alt["Accepted"] == ("False", "PortUnavailable") and alt["Programmed"] == ("False", "Invalid")
    assert http["Accepted"] == ("True", "Accepted")
    assert with_listen_failures(table.report.gateway_status, {("UDP", 8080): "taken"}) == table.report.gateway_status


def test_a_redirect_without_scheme_and_port_goes_to_the_own_port_it_came_to() -> None:
    """
    HTTPRequestRedirectFilter.Port: without scheme and port the Location has the port of the
    listener the request came to; a route on --http and on a port of its own redirects each
    request to its own listener's port (the well-known port left out).
    """
    redirect = {"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org"}}
    tls: dict[str, Any] = {"certificateRefs": [{"name": "cert"}]}
    table = gateway_table(
        gateway("gw", listener("http"), listener("alt", port=8080), listener("secure", port=8443, protocol="HTTPS", tls=tls)),
        http_route("r", to(filters=[redirect])), TLS_SECRET,
    )
    assert serve(table.table, "a.example", "/x?q") == "302 http://example.org/x?q"
    assert serve(table.table.gateway_ports[8080], "a.example", "/x?q") == "302 http://example.org:8080/x?q"
    assert serve(table.table.gateway_ports[8443], "a.example", "/x?q", scheme=b"https") == "302 https://example.org:8443/x?q"


def test_httproute_listener_port_matching() -> None:
    """
    HTTPRouteListenerPortMatching (httproute-listener-port-matching.go): a parentRef's port selects
    the listeners on that port (80: twingress's --http here; 8080 and 8090: ports of their own),
    with sectionName too when both are given; each port answers its own listeners' hosts.
    """
    same = {"namespaces": {"from": "Same"}}
    table = gateway_table(
        gateway(
            "gw",
            listener("listener-1", port=80, hostname="foo.com", allowedRoutes=same),
            listener("listener-2", port=8080, hostname="foo.com", allowedRoutes=same),
            listener("listener-3", port=8080, hostname="bar.com", allowedRoutes=same),
            listener("listener-4", port=8090, hostname="foo.com", allowedRoutes=same),
            listener("listener-5", port=8090, hostname="bar.com", allowedRoutes=same),
        ),
        http_route("backend-v1", to(backend("v1")), parents=({"name": "gw", "port": 80},)),
        http_route("backend-v2", to(backend("v2")), parents=({"name": "gw", "port": 8080},)),
        http_route("backend-v3", to(backend("v3")), parents=({"name": "gw", "port": 8090, "sectionName": "listener-4"},)),
        *services("v1", "v2", "v3"),
    )
    assert serve(table.table, "foo.com", "/") == "default/v1:80"
    assert serve(table.table, "bar.com", "/") == "404"
    assert serve(table.table.gateway_ports[8080], "foo.com", "/") == "default/v2:80"
    assert serve(table.table.gateway_ports[8080], "bar.com", "/") == "default/v2:80"
    assert serve(table.table.gateway_ports[8090], "foo.com", "/") == "default/v3:80"
    assert serve(table.table.gateway_ports[8090], "bar.com", "/") == "404"
    assert [c["Accepted"] for c in parent_conditions(table, "backend-v3")] == [("True", "Accepted")]
    assert [count for _, count in _attached(table)] == [1, 1, 1, 1, 0]


def test_httproute_invalid_parent_ref_section_name_not_matching_port() -> None:
    """
    HTTPRouteInvalidParentRefSectionNameNotMatchingPort
    (httproute-invalid-parentref-section-name-not-matching-port.go): a sectionName whose listener
    is not on the parentRef's port: NoMatchingParent, and the listener counts no route.
    """
    table = gateway_table(
        gateway("gw", listener("http", port=80, allowedRoutes={"kinds": [{"kind": "HTTPRoute"}], "namespaces": {"from": "All"}})),
        http_route("r", to(backend("v1")), parents=({"name": "gw", "sectionName": "http", "port": 81},)), *services("v1"),
    )
    assert [c["Accepted"] for c in parent_conditions(table, "r")] == [("False", "NoMatchingParent")]
    assert [count for _, count in _attached(table)] == [0]
    assert serve(table.table, "a.example", "/") == "404"


def _attached(table: Built, gateway_name: str = "gw") -> list[tuple[str, int]]:
    assert table.report.gateway_status is not None
    return [(each.name, each.attached_routes) for each in table.report.gateway_status.gateways[ObjectRef("Gateway", "default", gateway_name)].listeners]
