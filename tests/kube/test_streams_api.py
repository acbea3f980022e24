"""
StreamIngress against the real apiserver: the CRD from k8s/ (installed by the session cluster)
rejects bad objects with the rule's own message, and a running twingress (C{twistd -n ingress
--kubeconfig}) turns StreamIngresses and the ingress-nginx tcp/udp-services ConfigMaps into
stream routes and conditions, shown in /debug/routes.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.kube import cluster
from tests.kube.streams_support import (
    stream_body,
    stream_conditions,
    stream_entries,
    tcp_exchange,
    udp_exchange,
    wait_conditions,
    wait_stream,
)
from tests.kube.twingress import RECONNECT_TIMEOUT, host_for, next_pod_ip, wait_until
from tests.support import free_port, refused

pytestmark = pytest.mark.kube

_BAD = [
    # (what, spec changes on a valid TCP Service stream, a part of the apiserver's message)
    ("missing listen", {"listen": None}, "spec.listen: Required value"),
    ("port 0", {"listen": 0}, "should be greater than or equal to 1"),
    ("port 70000", {"listen": 70000}, "should be less than or equal to 65535"),
    ("bad protocol", {"protocol": "SCTP"}, 'supported values: "TCP", "UDP"'),
    ("lower-case protocol", {"protocol": "tcp"}, 'supported values: "TCP", "UDP"'),
    ("service and external", {"external": True, "upstream": {"service": "db", "host": "db.example.com", "port": 5432}}, "spec.upstream.service cannot be set when spec.external is true"),
    ("neither service nor external", {"upstream": {"port": 5432}}, "spec.upstream.service is required"),
    ("external without host", {"external": True, "upstream": {"port": 5432}}, "spec.upstream.host is required when spec.external is true"),
    ("host without external", {"upstream": {"service": "db", "host": "db.example.com", "port": 5432}}, "spec.upstream.host needs spec.external: true"),
    ("external port name", {"external": True, "upstream": {"host": "db.example.com", "port": "pg"}}, "an external upstream's port must be a number"),
    ("bad proxyProtocol", {"proxyProtocol": "v3"}, 'supported values: "v1", "v2"'),
    ("proxyProtocol on UDP", {"protocol": "UDP", "proxyProtocol": "v1"}, "only supported with protocol TCP"),
    ("upstream port 0", {"upstream": {"service": "db", "port": 0}}, "must be a port number"),
    ("upstream port name too long", {"upstream": {"service": "db", "port": "a-very-long-port-name"}}, "must be a port number"),
    ("bad service name", {"upstream": {"service": "DB", "port": 5432}}, "spec.upstream.service in body should match"),
    ("bad external host", {"external": True, "upstream": {"host": "db_1.example.com", "port": 5432}}, "must be an IP address or a lower-case DNS name"),
    ("idleTimeout 0", {"idleTimeout": 0}, "spec.idleTimeout: Invalid value"),
    ("idleTimeout as text", {"idleTimeout": "10s"}, "spec.idleTimeout: Invalid value"),
]


@pytest.mark.parametrize("what, changes, message", _BAD, ids=[b[0] for b in _BAD])
def test_schema_rejects(streams, namespace, what, changes, message):
    body = stream_body(namespace, "bad", 5432, service="db", port=5432)
    for key, value in changes.items():
        if value is None:
            del body["spec"][key]
        else:
            body["spec"][key] = value
    with pytest.raises(ApiException) as raised:
        streams.create(body)
    assert raised.value.status == 422, raised.value.body
    assert message in json.loads(raised.value.body)["message"], raised.value.body


def test_schema_accepts_and_defaults(streams, namespace):
    created = streams.create(stream_body(namespace, "db", 5432, service="db", port="postgres"))
    assert created["spec"]["protocol"] == "TCP"
    assert created["spec"]["external"] is False
    external = streams.create(
        stream_body(namespace, "ext", 5433, port=5432, external=True, upstream={"host": "10.1.2.3", "port": 5432}, proxyProtocol="v2", idleTimeout=30)
    )
    assert external["spec"]["upstream"] == {"host": "10.1.2.3", "port": 5432}
    udp = streams.create(stream_body(namespace, "dns", 5353, service="dns", port=53, protocol="UDP", upstream={"service": "dns", "namespace": "kube-system", "port": 53}))
    assert udp["spec"]["protocol"] == "UDP"


def test_printer_columns(streams, namespace):
    streams.create(stream_body(namespace, "db", 5432, service="db", port=5432))
    streams.create(stream_body(namespace, "ext", 6000, external=True, upstream={"host": "db.example.com", "port": 5432}, protocol="UDP"))
    table = streams.table(namespace)
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Protocol", "Listen", "Upstream", "Port", "Accepted", "Age"]
    rows = {row["cells"][0]: row["cells"][1:] for row in table["rows"]}
    assert rows["db"][:4] == ["TCP", 5432, "db", "5432"]
    assert rows["ext"][:4] == ["UDP", 6000, "db.example.com", "5432"]
    assert rows["db"][4] is None  # no Accepted condition written yet


# -- a running twingress: StreamIngresses and ConfigMaps to /debug/routes streams and conditions

ACCEPTED = {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs"), "Conflict": ("False", "NoConflict")}


def _service(kube, namespace: str, name: str, addresses: list[str], target: int, port: int = 80) -> None:
    """A selector-less Service on C{port} whose slice has C{addresses} on C{target}."""
    kube.create_service(namespace, name, port=port, target_port=target)
    kube.put_endpoint_slice(namespace, f"{name}-1", name, addresses, target)


def test_create_change_delete_stream_ingress(kube, streams, namespace, twingress):
    proxy = twingress()
    _service(kube, namespace, "db", ["10.244.0.20", "10.244.0.21"], 15432)
    first, second = free_port(), free_port()

    streams.create(stream_body(namespace, "pg", first, service="db", port="http", idleTimeout=30))
    entry = wait_stream(proxy, f"TCP/{first}", lambda e: e is not None, "the stream listed")
    assert entry == {
        "route": f"{namespace}/pg",
        "source": f"StreamIngress/{namespace}/pg",
        "upstream": f"{namespace}/db:http",
        "endpoints": ["10.244.0.20:15432", "10.244.0.21:15432"],
        "proxyProtocol": None,
        "idleTimeout": 30.0,
        "listening": True,  # the port did bind (a port that did not is shown as not listening)
    }
    conditions = wait_conditions(proxy, namespace, "pg", ACCEPTED)
    assert conditions["ResolvedRefs"]["message"] == f"Service {namespace}/db port http: 2 ready endpoints"
    assert conditions["Accepted"]["observedGeneration"] == 1

    # The port, protocol and upstream change: the old key goes, the new one comes.
    streams.replace(stream_body(namespace, "pg", second, protocol="UDP", external=True, upstream={"host": "192.0.2.9", "port": 53}))
    wait_stream(proxy, f"UDP/{second}", lambda e: e is not None and e["endpoints"] == ["192.0.2.9:53"], "the stream moved")
    assert f"TCP/{first}" not in stream_entries(proxy)
    assert wait_conditions(proxy, namespace, "pg", ACCEPTED)["Accepted"]["observedGeneration"] == 2

    # Endpoints follow the EndpointSlice.
    streams.replace(stream_body(namespace, "pg", second, service="db", port=80))
    wait_stream(proxy, f"TCP/{second}", lambda e: e is not None and len(e["endpoints"]) == 2, "back to the Service")
    kube.put_endpoint_slice(namespace, "db-1", "db", ["10.244.0.20", ("10.244.0.21", False)], 15432)
    wait_stream(proxy, f"TCP/{second}", lambda e: e is not None and e["endpoints"] == ["10.244.0.20:15432"], "one ready endpoint")

    streams.delete(namespace, "pg")
    wait_stream(proxy, f"TCP/{second}", lambda e: e is None, "the stream gone")
    assert stream_conditions(proxy, namespace, "pg") == {}


def test_conflicts_reserved_ports_and_unresolved_services(kube, streams, namespace, twingress):
    proxy = twingress()
    port = free_port()
    streams.create(stream_body(namespace, "z-older", port, service="missing", port=80))
    time.sleep(1.1)  # creationTimestamp has whole seconds: the older one must win by age, not by name
    streams.create(stream_body(namespace, "a-newer", port, service="missing", port=80))
    streams.create(stream_body(namespace, "on-http", proxy.http_port, service="missing", port=80))

    older = wait_conditions(proxy, namespace, "z-older", {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "ServiceNotFound")})
    assert older["ResolvedRefs"]["message"] == f'Service "{namespace}/missing" not found'
    newer = wait_conditions(proxy, namespace, "a-newer", {"Accepted": ("False", "PortConflict"), "Conflict": ("True", "PortConflict")})
    assert newer["Conflict"]["message"] == f"TCP port {port} is already taken by StreamIngress {namespace}/z-older, which is older"
    reserved = wait_conditions(proxy, namespace, "on-http", {"Accepted": ("False", "ReservedPort")})
    assert reserved["Conflict"]["message"] == f"TCP port {proxy.http_port} is twingress's own http listener"
    assert stream_entries(proxy)[f"TCP/{port}"]["route"] == f"{namespace}/z-older"
    assert f"TCP/{proxy.http_port}" not in stream_entries(proxy)
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert {(f"StreamIngress/{namespace}/a-newer", "Conflict"), (f"StreamIngress/{namespace}/z-older", "ServiceNotFound")} <= problems

    # The Service appears: resolved.  The winner goes: the other one gets the port.
    _service(kube, namespace, "missing", ["10.244.0.22"], 9000)
    wait_conditions(proxy, namespace, "z-older", ACCEPTED)
    streams.delete(namespace, "z-older")
    wait_conditions(proxy, namespace, "a-newer", ACCEPTED)
    assert stream_entries(proxy)[f"TCP/{port}"]["endpoints"] == ["10.244.0.22:9000"]


def test_config_map_entries_produce_streams(kube, streams, namespace, twingress):
    _service(kube, namespace, "db", ["10.244.0.23"], 15432)
    tcp_port, proxied, udp_port = free_port(), free_port(), free_port()
    streams.put_config_map(namespace, "tcp-services", {str(tcp_port): f"{namespace}/db:80", str(proxied): f"{namespace}/db:http::PROXY"})
    streams.put_config_map(namespace, "other", {str(free_port()): f"{namespace}/db:80"})
    proxy = twingress("--tcp-services-configmap", f"{namespace}/tcp-services", "--udp-services-configmap", f"{namespace}/udp-services")

    entries = stream_entries(proxy)  # what existed at start is live once ready
    assert entries[f"TCP/{tcp_port}"]["route"] == f"{namespace}/tcp-services:{tcp_port}"
    assert entries[f"TCP/{tcp_port}"]["endpoints"] == ["10.244.0.23:15432"]
    assert entries[f"TCP/{proxied}"]["proxyProtocol"] == "v1"
    ours = [key for key, entry in entries.items() if entry["route"].startswith(f"{namespace}/")]
    assert sorted(ours) == sorted([f"TCP/{tcp_port}", f"TCP/{proxied}"])  # the unrelated ConfigMap is not read
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert (f"ConfigMap/{namespace}/udp-services", "NotFound") in problems
    informers = proxy.informers()
    assert informers[f"ConfigMap {namespace}/tcp-services"]["objects"] == 1
    assert informers[f"ConfigMap {namespace}/udp-services"]["synced"] is True

    kube.core.create_namespaced_service(namespace, {
        "metadata": {"name": "dns"}, "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}})
    streams.put_config_map(namespace, "udp-services", {str(udp_port): f"{namespace}/dns:53", "53": f"{namespace}/dns:53::PROXY"})
    wait_stream(proxy, f"UDP/{udp_port}", lambda e: e is not None, "the UDP entry")
    streams.put_config_map(namespace, "tcp-services", {str(tcp_port): f"{namespace}/db:80:PROXY"})
    wait_stream(proxy, f"TCP/{tcp_port}", lambda e: e is None, "the entry with an unsupported PROXY refused")
    assert f"TCP/{proxied}" not in stream_entries(proxy)
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert {(f"ConfigMap/{namespace}/tcp-services", "UnsupportedProxyProtocol"), (f"ConfigMap/{namespace}/udp-services", "UnsupportedProxyProtocol")} <= problems


def test_without_the_crd_routing_goes_on_and_streams_come_with_it(kube_cluster, kube, streams, namespace, twingress):
    """The CRD is deleted (and its objects with it) for this test, and installed again after."""
    crd = "streamingresses.twingress.io"
    extensions = client.ApiextensionsV1Api(streams.api)
    extensions.delete_custom_resource_definition(crd)
    try:
        wait_until(lambda: _crd_gone(extensions, crd), 60, "the CRD deleted")
        _service(kube, namespace, "web", ["10.244.0.24"], 8080)
        host = host_for(namespace, "web")
        kube.create_ingress(namespace, "web", host, "web")
        proxy = twingress()  # ready although StreamIngress cannot be listed

        assert proxy.route(host, "/")["endpoints"] == ["10.244.0.24:8080"]
        informer = proxy.informers()["StreamIngress"]
        assert informer["synced"] is False and informer["lastError"].startswith("404"), informer
        assert "StreamIngress: list refused (404" in proxy.log()
    finally:
        kube_cluster.install_crd(cluster.CRDS[0])
    port = free_port()
    streams.create(stream_body(namespace, "late", port, service="web", port=80))
    wait_stream(proxy, f"TCP/{port}", lambda e: e is not None, "the stream, once the CRD is back", timeout=RECONNECT_TIMEOUT)
    assert proxy.informers()["StreamIngress"]["synced"] is True


def _crd_gone(extensions, name: str) -> bool:
    try:
        extensions.read_custom_resource_definition(name)
    except ApiException as error:
        return error.status == 404
    return False


# -- real traffic through listeners made from StreamIngresses


def _same_port(hosts: list[str]) -> int:
    """A port free on every one of C{hosts} (an EndpointSlice has one port for all its endpoints)."""
    while True:
        port = free_port(hosts[0])
        if all(_free(host, port) for host in hosts[1:]):
            return port


def _free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def test_traffic_follows_stream_ingresses(kube, streams, stream_echoes, namespace, twingress):
    hosts = [next_pod_ip(), next_pod_ip()]
    target = _same_port(hosts)
    for protocol in ("TCP", "UDP"):
        for index, host in enumerate(hosts):
            stream_echoes.start(protocol, f"{protocol.lower()}-{index}", host, target)
    _service(kube, namespace, "echo", hosts, target)
    kube.core.create_namespaced_service(namespace, {"metadata": {"name": "udp-echo"}, "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": target}]}})
    kube.discovery.create_namespaced_endpoint_slice(namespace, {
        "metadata": {"name": "udp-echo-1", "labels": {"kubernetes.io/service-name": "udp-echo"}},
        "addressType": "IPv4", "ports": [{"name": "dns", "port": target, "protocol": "UDP"}],
        "endpoints": [{"addresses": [h]} for h in hosts]})
    proxy = twingress()
    first, second, udp = free_port(), free_port(), free_port()

    streams.create(stream_body(namespace, "tcp", first, service="echo", port=80))
    streams.create(stream_body(namespace, "udp", udp, service="udp-echo", port="dns", protocol="UDP"))
    wait_until(lambda: tcp_exchange(first, b"hello"), what="the TCP listener")
    answers = {tcp_exchange(first, b"hello") for _ in range(6)}
    assert answers == {b"tcp-0:hello", b"tcp-1:hello"}  # round-robin over the ready endpoints
    wait_until(lambda: udp_exchange(udp, b"hello"), what="the UDP listener")
    replies = [udp_exchange(udp, f"ping {i}".encode()).split(b":", 1) for i in range(6)]  # a new session each
    assert [payload for _, payload in replies] == [f"ping {i}".encode() for i in range(6)]
    assert {name for name, _ in replies} == {b"udp-0", b"udp-1"}

    # proxyProtocol: the upstream gets a PROXY v1 header naming the client before its bytes.
    proxied = free_port()
    streams.create(stream_body(namespace, "proxied", proxied, service="echo", port=80, proxyProtocol="v1"))
    answer = wait_until(lambda: tcp_exchange(proxied, b"hello"), what="the PROXY listener")
    assert re.fullmatch(rb"tcp-[01]:PROXY TCP4 127\.0\.0\.1 127\.0\.0\.1 \d+ %d\r\nhello" % proxied, answer), answer

    # The port moves: the old one closes, the new one forwards; one endpoint goes unready.
    streams.replace(stream_body(namespace, "tcp", second, service="echo", port=80))
    wait_until(lambda: refused(first), what="the old port closed")
    kube.put_endpoint_slice(namespace, "echo-1", "echo", [hosts[0], (hosts[1], False)], target)
    wait_until(lambda: {tcp_exchange(second, b"x") for _ in range(4)} == {b"tcp-0:x"}, what="the new port, one endpoint")

    for name in ("tcp", "udp", "proxied"):
        streams.delete(namespace, name)
    wait_until(lambda: refused(second), what="the listener closed")
    # Three deletions may be one table or several (a change after a quiet spell is built at once): all gone, in the end.
    wait_until(lambda: not {f"TCP/{second}", f"UDP/{udp}"} & set(stream_entries(proxy)), what="the streams gone from the table")
    with pytest.raises(OSError):  # socket.timeout, or ECONNREFUSED from the ICMP port unreachable
        udp_exchange(udp, b"anyone?")
