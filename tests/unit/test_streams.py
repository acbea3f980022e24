"""
Tests for the stream API side: L{ingress.model.parse} of StreamIngress and the ingress-nginx stream
ConfigMaps, and L{ingress.routing.streams.build_streams} through L{ingress.routing.build}.

States are written as API dicts, the way a manifests directory gives them.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional

import pytest

from ingress.model import ObjectRef, Problem, ServiceBackendPort
from ingress.model.parse import ParseError, parse_meta, parse_object, parse_stream_entry, state_from_objects
from ingress.routing import build
from ingress.routing.build_options import BuildOptions
from ingress.routing.streams import StreamCondition

T0, T1, T2 = "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z"
RESERVED = {80: "http", 443: "https", 10254: "admin"}
TCP_MAP, UDP_MAP = ("ingress", "tcp-services"), ("ingress", "udp-services")


# -- compact builders for API dicts


def stream(
    name: str, listen: Any = 5432, svc: Optional[str] = "db", port: Any = 5432, *, ns: str = "default",
    created: str = T0, generation: int = 1, upstream: Optional[dict[str, Any]] = None, **spec: Any,
) -> dict[str, Any]:
    """A StreamIngress to Service C{svc} (C{upstream} replaces the whole upstream); C{spec} adds fields."""
    body: dict[str, Any] = {"listen": listen, "upstream": upstream if upstream is not None else {"service": svc, "port": port}}
    body.update(spec)
    body = {k: v for k, v in body.items() if v is not None}
    metadata = {"name": name, "namespace": ns, "creationTimestamp": created, "generation": generation}
    return {"apiVersion": "twingress.io/v1alpha1", "kind": "StreamIngress", "metadata": metadata, "spec": body}


def service(name: str = "db", *ports: tuple[str, int, str], ns: str = "default") -> dict[str, Any]:
    """A Service; C{ports} are (name, port, protocol), default "pg" 5432/TCP."""
    items = [{"name": n, "port": p, "protocol": proto} for n, p, proto in (ports or [("pg", 5432, "TCP")])]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": {"ports": items}}


def slice_(svc: str = "db", *addresses: str, ports: tuple[tuple[str, int, str], ...] = (("pg", 15432, "TCP"),), ns: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": f"{svc}-{len(addresses)}", "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports],
        "endpoints": [{"addresses": [a]} for a in addresses],
    }


def config_map(name: str, data: Any, ns: str = "ingress", created: str = T1) -> dict[str, Any]:
    metadata = {"name": name, "namespace": ns, "creationTimestamp": created}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def table_of(*objects: dict[str, Any], tcp: Optional[tuple[str, str]] = None, udp: Optional[tuple[str, str]] = None):
    return build(state_from_objects(objects), BuildOptions(tcp_services=tcp, udp_services=udp, reserved_ports=RESERVED))


def conditions(table, name: str, ns: str = "default") -> dict[str, tuple[str, str]]:
    """{type: (status, reason)} of one StreamIngress."""
    return {c.type: (c.status, c.reason) for c in table.report.stream_conditions[ObjectRef("StreamIngress", ns, name)]}


def problems(table) -> set[tuple[str, str]]:
    return {(str(p.ref), p.reason) for p in table.report.problems}


DB = [service(), slice_("db", "10.0.0.1", "10.0.0.2")]
ACCEPTED = {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs"), "Conflict": ("False", "NoConflict")}


# -- parsing StreamIngress: what the CRD schema validates, with its messages

_VALID = [
    # (what, stream() arguments, expected fields of the value)
    ("defaults", {}, dict(protocol="TCP", listen=5432, service="db", service_namespace="default", port=ServiceBackendPort(number=5432), proxy_protocol=None, idle_timeout=None)),
    ("port name", {"port": "pg"}, dict(port=ServiceBackendPort(name="pg"))),
    ("other namespace", {"upstream": {"service": "db", "namespace": "data", "port": 5432}}, dict(service_namespace="data")),
    ("udp", {"protocol": "UDP", "svc": "dns", "port": 53}, dict(protocol="UDP", service="dns")),
    ("external host", {"external": True, "upstream": {"host": "db.example.com", "port": 5432}}, dict(external_host="db.example.com", service="")),
    ("external ip", {"external": True, "upstream": {"host": "192.0.2.7", "port": 5432}}, dict(external_host="192.0.2.7")),
    ("proxy v2 and idle", {"proxyProtocol": "v2", "idleTimeout": 30}, dict(proxy_protocol="v2", idle_timeout=30.0)),
    ("external false", {"external": False}, dict(service="db")),
]


@pytest.mark.parametrize("what, args, fields", _VALID, ids=[v[0] for v in _VALID])
def test_parse_stream_ingress(what: str, args: dict[str, Any], fields: dict[str, Any]) -> None:
    value = parse_object(stream("s", **args))
    for name, expected in fields.items():
        assert getattr(value, name) == expected, name
    assert value.ref == ObjectRef("StreamIngress", "default", "s")


_INVALID = [
    # (what, stream() arguments, reason, part of the message: the CRD's words where it has them)
    ("missing listen", {"listen": None}, "Required", "spec.listen"),
    ("listen 0", {"listen": 0}, "Invalid", "between 1 and 65535"),
    ("listen 70000", {"listen": 70000}, "Invalid", "between 1 and 65535"),
    ("listen as text", {"listen": "5432"}, "Invalid", "must be an integer"),
    ("bad protocol", {"protocol": "SCTP"}, "Invalid", "supported values"),
    ("lower-case protocol", {"protocol": "tcp"}, "Invalid", "supported values"),
    ("no upstream", {"upstream": {}}, "Required", "spec.upstream"),
    ("neither", {"upstream": {"port": 5432}}, "Required", "spec.upstream.service is required"),
    ("both", {"external": True, "upstream": {"service": "db", "host": "db.example.com", "port": 5432}}, "Invalid", "cannot be set when spec.external is true"),
    ("external without host", {"external": True, "upstream": {"port": 5432}}, "Required", "spec.upstream.host is required"),
    ("host without external", {"upstream": {"service": "db", "host": "db.example.com", "port": 5432}}, "Invalid", "needs spec.external: true"),
    ("external with namespace", {"external": True, "upstream": {"host": "h.example", "namespace": "x", "port": 1}}, "Invalid", "an external upstream has none"),
    ("external port name", {"external": True, "upstream": {"host": "db.example.com", "port": "pg"}}, "Invalid", "must be a number"),
    ("external bad host", {"external": True, "upstream": {"host": "db_1.example.com", "port": 1}}, "Invalid", "RFC 1123 subdomain"),
    ("external not a boolean", {"external": "yes"}, "Invalid", "must be a boolean"),
    ("port 0", {"port": 0}, "Invalid", "between 1 and 65535"),
    ("port name too long", {"port": "a-very-long-port-name"}, "Invalid", "IANA_SVC_NAME"),
    ("missing port", {"port": None, "upstream": {"service": "db"}}, "Required", "spec.upstream.port"),
    ("bad service name", {"svc": "DB"}, "Invalid", "RFC 1035 label"),
    ("bad namespace", {"upstream": {"service": "db", "namespace": "Data", "port": 1}}, "Invalid", "RFC 1123 label"),
    ("bad proxyProtocol", {"proxyProtocol": "v3"}, "Invalid", "supported values"),
    ("proxyProtocol on UDP", {"protocol": "UDP", "proxyProtocol": "v1"}, "Invalid", "only supported with protocol TCP"),
    ("idleTimeout 0", {"idleTimeout": 0}, "Invalid", "between 1 and 86400"),
    ("idleTimeout as duration", {"idleTimeout": "10s"}, "Invalid", "must be an integer"),
]


@pytest.mark.parametrize("what, args, reason, message", _INVALID, ids=[v[0] for v in _INVALID])
def test_parse_stream_ingress_rejects(what: str, args: dict[str, Any], reason: str, message: str) -> None:
    with pytest.raises(ParseError) as raised:
        parse_object(stream("s", **args))
    assert raised.value.reason == reason
    assert message in raised.value.message


def test_stream_ingress_without_spec() -> None:
    body = stream("s")
    del body["spec"]
    with pytest.raises(ParseError, match="spec: Required"):
        parse_object(body)


# -- ConfigMaps and their ingress-nginx entries


def test_any_config_map_parses_without_judging_its_data() -> None:
    value = parse_object(config_map("other", {"a": "1", "b": 2}))
    assert value.data == (("a", "1"),)
    assert value.invalid == ("data[b]: Invalid value: 2: must be a string",)
    assert parse_object(config_map("list", ["x"])).invalid == ("data: Invalid value: ['x']: must be an object",)
    assert state_from_objects([config_map("other", {"b": 2})]).problems == ()  # not ours unless named


_ENTRIES = [
    # (key, value, protocol, expected (listen, namespace, service, port, proxy) or (reason, part of message))
    ("9000", "default/example-go:8080", "TCP", (9000, "default", "example-go", ServiceBackendPort(number=8080), None)),
    ("9000", "default/example-go:http", "TCP", (9000, "default", "example-go", ServiceBackendPort(name="http"), None)),
    ("22", "git/shell:22::PROXY", "TCP", (22, "git", "shell", ServiceBackendPort(number=22), "v1")),
    ("22", "git/shell:22:", "TCP", (22, "git", "shell", ServiceBackendPort(number=22), None)),
    ("53", "kube-system/dns:53", "UDP", (53, "kube-system", "dns", ServiceBackendPort(number=53), None)),
    ("22", "git/shell:22:PROXY", "TCP", ("UnsupportedProxyProtocol", "first PROXY")),
    ("22", "git/shell:22:PROXY:PROXY", "TCP", ("UnsupportedProxyProtocol", "first PROXY")),
    ("53", "kube-system/dns:53::PROXY", "UDP", ("UnsupportedProxyProtocol", "only supported for TCP")),
    ("22", "git/shell:22:proxy", "TCP", ("Invalid", 'may only be "PROXY" or empty')),
    ("http", "default/web:80", "TCP", ("Invalid", "the key must be the port")),
    ("0", "default/web:80", "TCP", ("Invalid", "between 1 and 65535")),
    ("70000", "default/web:80", "TCP", ("Invalid", "between 1 and 65535")),
    ("9000", "web:80", "TCP", ("Invalid", "<namespace>/<service>:<port>")),
    ("9000", "default/web", "TCP", ("Invalid", "<namespace>/<service>:<port>")),
    ("9000", "default/web:80:PROXY:PROXY:x", "TCP", ("Invalid", "<namespace>/<service>:<port>")),
    ("9000", "default/Web:80", "TCP", ("Invalid", "RFC 1035")),
    ("9000", "Default/web:80", "TCP", ("Invalid", "RFC 1123")),
    ("9000", "default/web:0", "TCP", ("Invalid", "between 1 and 65535")),
    ("9000", "default/web:", "TCP", ("Invalid", "IANA_SVC_NAME")),
]


@pytest.mark.parametrize("key, value, protocol, expected", _ENTRIES, ids=[f"{e[2]}-{e[0]}-{e[1]}" for e in _ENTRIES])
def test_parse_stream_entry(key: str, value: str, protocol: str, expected: tuple[Any, ...]) -> None:
    owner = parse_object(config_map("tcp-services", {}))
    if len(expected) == 2:
        with pytest.raises(ParseError) as raised:
            parse_stream_entry(owner, protocol, key, value)
        assert (raised.value.reason, expected[1] in raised.value.message) == (expected[0], True), raised.value.message
        assert f"data[{key}]" in raised.value.message
        return
    entry = parse_stream_entry(owner, protocol, key, value)
    assert (entry.listen, entry.service_namespace, entry.service, entry.port, entry.proxy_protocol) == expected
    assert entry.protocol == protocol and entry.meta == parse_meta(config_map("tcp-services", {}))


# -- the build: routes, conflicts, reserved ports, conditions


def test_service_stream_gets_ready_endpoints_and_is_accepted() -> None:
    table = table_of(*DB, stream("pg", 5432, port="pg", proxyProtocol="v2", idleTimeout=30))
    route = table.table.streams[("TCP", 5432)]
    assert (route.name, route.source, route.port, route.protocol) == ("default/pg", ObjectRef("StreamIngress", "default", "pg"), 5432, "TCP")
    assert route.upstream.key == "default/db:pg"
    assert route.upstream.endpoints == (("10.0.0.1", 15432), ("10.0.0.2", 15432))
    assert (route.proxy_protocol, route.idle_timeout) == ("v2", 30.0)
    assert conditions(table, "pg") == ACCEPTED
    found = {c.type: c for c in table.report.stream_conditions[ObjectRef("StreamIngress", "default", "pg")]}
    assert found["ResolvedRefs"].message == "Service default/db port pg: 2 ready endpoints"
    assert found["Accepted"].observed_generation == 1
    assert table.report.problems == ()


def test_udp_stream_picks_the_udp_port_of_a_service_with_both() -> None:
    dns = service("dns", ("dns-tcp", 53, "TCP"), ("dns", 53, "UDP"))
    slices = slice_("dns", "10.0.0.9", ports=(("dns-tcp", 1053, "TCP"), ("dns", 2053, "UDP")))
    table = table_of(dns, slices, stream("udp", 53, "dns", 53, protocol="UDP"), stream("tcp", 53, "dns", 53))
    assert table.table.streams[("UDP", 53)].upstream.endpoints == (("10.0.0.9", 2053),)
    assert table.table.streams[("UDP", 53)].upstream.key == "default/dns:53/UDP"
    assert table.table.streams[("TCP", 53)].upstream.endpoints == (("10.0.0.9", 1053),)
    assert conditions(table, "udp") == conditions(table, "tcp") == ACCEPTED


def test_protocol_mismatch_is_an_unresolved_ref() -> None:
    table = table_of(service("dns", ("dns", 53, "UDP")), stream("tcp", 53, "dns", 53))
    assert conditions(table, "tcp")["ResolvedRefs"] == ("False", "ProtocolMismatch")
    assert conditions(table, "tcp")["Accepted"] == ("True", "Accepted")  # it listens; connections find no endpoint
    assert table.table.streams[("TCP", 53)].upstream.endpoints == ()


@pytest.mark.parametrize(
    "objects, reason",
    [
        ([stream("pg", svc="missing")], "ServiceNotFound"),
        ([service(), stream("pg", port=6543)], "PortNotFound"),
        ([service(), stream("pg", port="nope")], "PortNotFound"),
    ],
    ids=["no-service", "no-port-number", "no-port-name"],
)
def test_unresolved_service(objects: list[dict[str, Any]], reason: str) -> None:
    table = table_of(*objects)
    assert conditions(table, "pg") == {**ACCEPTED, "ResolvedRefs": ("False", reason)}
    assert ("StreamIngress/default/pg", reason) in problems(table)
    assert table.table.streams[("TCP", 5432)].upstream.targets == ()


def test_no_ready_endpoints_is_resolved_and_says_so() -> None:
    table = table_of(service(), stream("pg"))
    found = {c.type: c for c in table.report.stream_conditions[ObjectRef("StreamIngress", "default", "pg")]}
    assert (found["ResolvedRefs"].status, found["ResolvedRefs"].message) == ("True", "Service default/db port 5432: 0 ready endpoints")


def test_external_upstreams() -> None:
    table = table_of(
        stream("ip", 7000, upstream={"host": "192.0.2.7", "port": 5432}, external=True),
        stream("name", 7001, upstream={"host": "db.example.com", "port": 5432}, external=True, protocol="UDP"),
    )
    assert table.table.streams[("TCP", 7000)].upstream.endpoints == (("192.0.2.7", 5432),)
    by_name = table.table.streams[("UDP", 7001)].upstream
    assert (by_name.key, by_name.external_name, by_name.external_port) == ("external/db.example.com:5432/UDP", "db.example.com", 5432)
    assert conditions(table, "ip") == conditions(table, "name") == ACCEPTED


@pytest.mark.parametrize(
    "older, newer",
    [(("a", "default", T0), ("b", "default", T1)), (("z", "default", T0), ("a", "default", T1)),
     (("a", "default", T0), ("b", "default", T0)), (("x", "a-ns", T0), ("x", "b-ns", T0))],
    ids=["older-time", "older-time-later-name", "same-time-by-name", "same-time-by-namespace"],
)
def test_conflict_oldest_wins_in_any_input_order(older: tuple[str, str, str], newer: tuple[str, str, str]) -> None:
    objects = [
        stream(older[0], ns=older[1], created=older[2], upstream={"host": "192.0.2.1", "port": 1}, external=True),
        stream(newer[0], ns=newer[1], created=newer[2], upstream={"host": "192.0.2.2", "port": 1}, external=True),
    ]
    tables = [table_of(*order) for order in itertools.permutations(objects)]
    assert tables[0].table.streams == tables[1].table.streams and tables[0].report.stream_conditions == tables[1].report.stream_conditions
    table = tables[0]
    assert table.table.streams[("TCP", 5432)].name == f"{older[1]}/{older[0]}"
    assert conditions(table, older[0], older[1]) == ACCEPTED
    loser = {c.type: c for c in table.report.stream_conditions[ObjectRef("StreamIngress", newer[1], newer[0])]}
    assert (loser["Accepted"].status, loser["Accepted"].reason) == ("False", "PortConflict")
    assert (loser["Conflict"].status, loser["Conflict"].reason) == ("True", "PortConflict")
    assert f"already taken by StreamIngress {older[1]}/{older[0]}" in loser["Conflict"].message
    assert loser["ResolvedRefs"].status == "True"
    assert (f"StreamIngress/{newer[1]}/{newer[0]}", "Conflict") in problems(table)


def test_same_port_different_protocols_do_not_conflict() -> None:
    ext = {"upstream": {"host": "192.0.2.1", "port": 1}, "external": True}
    table = table_of(stream("t", 5000, **ext), stream("u", 5000, protocol="UDP", **ext))
    assert set(table.table.streams) == {("TCP", 5000), ("UDP", 5000)}


@pytest.mark.parametrize("port, listener", [(80, "http"), (443, "https"), (10254, "admin")])
def test_reserved_tcp_ports_are_refused(port: int, listener: str) -> None:
    ext = {"upstream": {"host": "192.0.2.1", "port": 1}, "external": True}
    table = table_of(stream("t", port, **ext), stream("u", port, protocol="UDP", **ext))
    assert set(table.table.streams) == {("UDP", port)}  # only our TCP listeners hold the port
    refused = {c.type: c for c in table.report.stream_conditions[ObjectRef("StreamIngress", "default", "t")]}
    assert (refused["Accepted"].status, refused["Accepted"].reason) == ("False", "ReservedPort")
    assert refused["Conflict"].message == f"TCP port {port} is twingress's own {listener} listener"


def test_invalid_stream_ingress_is_not_accepted_and_the_rest_is_built() -> None:
    table = table_of(*DB, stream("bad", 0), stream("good", 6000))
    assert list(table.table.streams) == [("TCP", 6000)]
    assert table.report.stream_conditions[ObjectRef("StreamIngress", "default", "bad")] == (
        StreamCondition("Accepted", "False", "Invalid", "Invalid: spec.listen: Invalid value: 0: must be between 1 and 65535, inclusive"),
    )
    assert ("StreamIngress/default/bad", "Invalid") in problems(table)


def test_config_map_entries_become_streams() -> None:
    tcp = config_map("tcp-services", {"9000": "default/db:5432", "2222": "default/db:pg::PROXY", "80": "default/db:5432", "x": "y"})
    udp = config_map("udp-services", {"5353": "default/dns:53"})
    dns = [service("dns", ("dns", 53, "UDP")), slice_("dns", "10.0.0.9", ports=(("dns", 5353, "UDP"),))]
    table = table_of(*DB, *dns, tcp, udp, tcp=TCP_MAP, udp=UDP_MAP)
    assert set(table.table.streams) == {("TCP", 9000), ("TCP", 2222), ("UDP", 5353)}
    route = table.table.streams[("TCP", 2222)]
    assert (route.name, route.source, route.proxy_protocol) == ("ingress/tcp-services:2222", ObjectRef("ConfigMap", "ingress", "tcp-services"), "v1")
    assert route.upstream.endpoints == (("10.0.0.1", 15432), ("10.0.0.2", 15432))
    assert table.table.streams[("UDP", 5353)].upstream.endpoints == (("10.0.0.9", 5353),)
    assert problems(table) == {("ConfigMap/ingress/tcp-services", "Conflict"), ("ConfigMap/ingress/tcp-services", "Invalid")}
    assert table.report.stream_conditions == {}  # ConfigMaps have no status: problems only


def test_config_maps_are_read_only_when_named() -> None:
    tcp = config_map("tcp-services", {"9000": "default/db:5432"})
    assert table_of(*DB, tcp).table.streams == {}
    assert table_of(*DB, tcp, tcp=("ingress", "other")).report.problems == (
        Problem(ObjectRef("ConfigMap", "ingress", "other"), "NotFound", "--tcp-services-configmap names this ConfigMap, which does not exist"),
    )
    bad = config_map("tcp-services", {"9000": 1})
    assert ("ConfigMap/ingress/tcp-services", "Invalid") in problems(table_of(bad, tcp=TCP_MAP))


def test_config_map_and_stream_ingress_conflict_by_age() -> None:
    tcp = config_map("tcp-services", {"5432": "default/db:5432"}, created=T1)
    older = table_of(*DB, tcp, stream("pg", created=T0), tcp=TCP_MAP)
    assert older.table.streams[("TCP", 5432)].name == "default/pg"
    assert ("ConfigMap/ingress/tcp-services", "Conflict") in problems(older)
    newer = table_of(*DB, tcp, stream("pg", created=T2), tcp=TCP_MAP)
    assert newer.table.streams[("TCP", 5432)].name == "ingress/tcp-services:5432"
    assert conditions(newer, "pg")["Accepted"] == ("False", "PortConflict")
    message = {c.type: c.message for c in newer.report.stream_conditions[ObjectRef("StreamIngress", "default", "pg")]}["Conflict"]
    assert message == 'TCP port 5432 is already taken by ConfigMap ingress/tcp-services entry "5432", which is older'


def test_debug_routes_json() -> None:
    table = table_of(*DB, stream("pg", 5432), stream("late", 5432, created=T1))
    dump = table.to_json()
    assert dump["streams"] == {
        "TCP/5432": {
            "route": "default/pg", "source": "StreamIngress/default/pg", "upstream": "default/db:5432",
            "endpoints": ["10.0.0.1:15432", "10.0.0.2:15432"], "proxyProtocol": None, "idleTimeout": 600.0,
        }
    }
    late = {c["type"]: c for c in dump["streamConditions"]["default/late"]}
    assert late["Accepted"] == {
        "type": "Accepted", "status": "False", "reason": "PortConflict", "observedGeneration": 1,
        "message": "not listening: TCP port 5432 is already taken by StreamIngress default/pg, which is older",
    }
    assert [c["type"] for c in dump["streamConditions"]["default/pg"]] == ["Accepted", "Conflict", "ResolvedRefs"]


# -- the command line: which ConfigMaps, and the ports of our own listeners


@pytest.mark.parametrize(
    "description, port",
    [("tcp:80", 80), ("tcp:port=8443:interface=127.0.0.1", 8443), ("tcp:10254:interface=127.0.0.1", 10254),
     ("ssl:443:privateKey=k.pem", 443), ("tcp6:port=81", 81), ("unix:/run/x.sock", None), ("", None),
     ("systemd:domain=INET:index=0", None)],
)
def test_listener_port(description: str, port: Optional[int]) -> None:
    from ingress.tap import listener_port

    assert listener_port(description) == port


def test_options_name_the_config_maps_and_reserve_our_ports(tmp_path) -> None:
    from twisted.python.usage import UsageError

    from ingress.tap import Options

    options = Options()
    options.parseOptions(["--manifests", str(tmp_path), "--http", "tcp:8080", "--https", "", "--tcp-services-configmap", "ingress/tcp"])
    assert options["tcp-services-configmap-key"] == ("ingress", "tcp")
    assert options["udp-services-configmap-key"] is None
    assert options["reserved-ports"] == {8080: "http", 10254: "admin"}
    for bad in ("tcp", "a/b/c", "/x", "x/"):
        with pytest.raises(UsageError, match="--udp-services-configmap takes NAMESPACE/NAME"):
            Options().parseOptions(["--manifests", str(tmp_path), "--udp-services-configmap", bad])
