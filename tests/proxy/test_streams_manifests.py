"""
Stream objects from a manifests directory (C{twistd -n ingress --manifests DIR}): StreamIngresses
and the ingress-nginx tcp/udp-services ConfigMaps named on the command line become the same
stream routes, conditions and problems as from a cluster, follow edits of the files, and carry
traffic.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.kube.streams_support import StreamEchoes, tcp_exchange, udp_exchange
from tests.kube.twingress import wait_until
from tests.proxy.streams_support import stream_ingress
from tests.support import Manifests, Twingress, free_port


def config_map(name: str, data: dict[str, str], ns: str = "ingress") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def test_stream_objects_from_files(manifests: Manifests, twingress: Callable[..., Twingress]) -> None:
    first, second, entry = free_port(), free_port(), free_port()
    manifests.write("db.yaml", *manifests.service("db", [("10.1.0.1", 5432), ("10.1.0.2", 5432)]))
    manifests.write("streams.yaml", stream_ingress("pg", first, proxyProtocol="v2"), stream_ingress("bad", 0))
    manifests.write("maps.yaml", config_map("tcp-services", {str(entry): "default/db:http::PROXY"}), config_map("unrelated", {"x": "y"}))
    proxy = twingress("--tcp-services-configmap", "ingress/tcp-services")

    routes = proxy.routes()
    assert routes["streams"] == {
        f"TCP/{first}": {
            "route": "default/pg", "source": "StreamIngress/default/pg", "upstream": "default/db:80",
            "endpoints": ["10.1.0.1:5432", "10.1.0.2:5432"], "proxyProtocol": "v2", "idleTimeout": 600.0, "listening": True,
        },
        f"TCP/{entry}": {
            "route": f"ingress/tcp-services:{entry}", "source": "ConfigMap/ingress/tcp-services", "upstream": "default/db:http",
            "endpoints": ["10.1.0.1:5432", "10.1.0.2:5432"], "proxyProtocol": "v1", "idleTimeout": 600.0, "listening": True,
        },
    }
    assert {c["type"]: c["status"] for c in routes["streamConditions"]["default/pg"]} == {
        "Accepted": "True", "ResolvedRefs": "True", "Conflict": "False"}
    assert routes["streamConditions"]["default/bad"][0]["reason"] == "Invalid"
    assert [(p["object"], p["reason"]) for p in routes["problems"]] == [("StreamIngress/default/bad", "Invalid")]

    # An edit moves the stream; a newer one on the same port loses; the admin port is refused.
    generation = proxy.generation()
    manifests.write(
        "streams.yaml",
        stream_ingress("pg", second),
        stream_ingress("late", second, created="2024-02-01T00:00:00Z"),
        stream_ingress("admin", proxy.admin_port),
    )
    proxy.wait_generation_above(generation)
    wait_until(lambda: f"TCP/{second}" in proxy.routes()["streams"], 10, "the stream moved")
    routes = proxy.routes()
    assert sorted(routes["streams"]) == sorted([f"TCP/{second}", f"TCP/{entry}"])
    assert routes["streams"][f"TCP/{second}"]["route"] == "default/pg"
    late = {c["type"]: c["reason"] for c in routes["streamConditions"]["default/late"]}
    assert late == {"Accepted": "PortConflict", "Conflict": "PortConflict", "ResolvedRefs": "ResolvedRefs"}
    admin = {c["type"]: c["message"] for c in routes["streamConditions"]["default/admin"]}
    assert admin["Conflict"] == f"TCP port {proxy.admin_port} is twingress's own admin listener"

    manifests.remove("streams.yaml")
    wait_until(lambda: sorted(proxy.routes()["streams"]) == [f"TCP/{entry}"], 10, "only the ConfigMap entry left")


def test_config_map_entry_carries_traffic(manifests: Manifests, twingress: Callable[..., Twingress]) -> None:
    echoes = StreamEchoes()
    target, listen, udp = free_port(), free_port(), free_port()
    echoes.start("TCP", "pod", "127.0.0.1", target)
    echoes.start("UDP", "pod", "127.0.0.1", target)
    try:
        dns = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns", "namespace": "default"},
               "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}}
        dns_slice = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                     "metadata": {"name": "dns-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "dns"}},
                     "ports": [{"name": "dns", "port": target, "protocol": "UDP"}], "endpoints": [{"addresses": ["127.0.0.1"]}]}
        manifests.write("svc.yaml", *manifests.service("db", [("127.0.0.1", target)]), dns, dns_slice)
        manifests.write("maps.yaml", config_map("tcp", {str(listen): "default/db:80"}), config_map("udp", {str(udp): "default/dns:dns"}))
        twingress("--tcp-services-configmap", "ingress/tcp", "--udp-services-configmap", "ingress/udp")

        assert wait_until(lambda: tcp_exchange(listen, b"hello"), 10, "the TCP listener") == b"pod:hello"
        assert wait_until(lambda: udp_exchange(udp, b"hello"), 10, "the UDP listener") == b"pod:hello"
    finally:
        echoes.close()
