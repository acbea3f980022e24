"""
--publish-service's addresses, by ingress-nginx's rule (C{statusAddressFromService} in its
C{internal/ingress/status/status.go}), from Services as the API serves them; the LoadBalancer case on
the real apiserver is tests/kube/test_ingress_status.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingress.controllers.status import PublishedAddresses, PublishedService, service_addresses
from ingress.model import Service
from ingress.model.parse import parse_object
from ingress.sources.kube.reflector import Store


def service(spec: dict[str, Any], status: dict[str, Any] | None = None) -> Service:
    obj = {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "edge", "name": "lb"}, "spec": spec, "status": status or {}}
    parsed = parse_object(obj)
    assert isinstance(parsed, Service)
    return parsed


PORTS = [{"name": "http", "port": 80}]
CASES = {
    "load balancer: ingress IPs and hostnames, then externalIPs not already there": (
        {"type": "LoadBalancer", "ports": PORTS, "clusterIP": "10.96.0.9", "externalIPs": ["203.0.113.9", "192.0.2.1"]},
        {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}, {"hostname": "lb.example.com"}, {"ip": "192.0.2.2", "hostname": "x.example.com"}]}},
        ("192.0.2.1", "lb.example.com", "192.0.2.2", "203.0.113.9"),
    ),
    "load balancer not provisioned: none (never its clusterIP)": ({"type": "LoadBalancer", "ports": PORTS, "clusterIP": "10.96.0.9"}, None, ()),
    "node port: its externalIPs": ({"type": "NodePort", "ports": PORTS, "clusterIP": "10.96.0.9", "externalIPs": ["203.0.113.9"]}, None, ("203.0.113.9",)),
    "node port without externalIPs: its clusterIP": ({"type": "NodePort", "ports": PORTS, "clusterIP": "10.96.0.9"}, None, ("10.96.0.9",)),
    "cluster IP": ({"ports": PORTS, "clusterIP": "10.96.0.9"}, None, ("10.96.0.9",)),
    "headless: none": ({"ports": PORTS, "clusterIP": "None"}, None, ()),
    "external name": ({"type": "ExternalName", "externalName": "edge.example.com"}, None, ("edge.example.com",)),
}


@pytest.mark.parametrize("case", CASES)
def test_service_addresses(case: str) -> None:
    spec, status, expected = CASES[case]
    assert service_addresses(service(spec, status)) == expected


def test_the_reason_is_told_once_per_change_and_the_count_each_time_it_changes() -> None:
    store, counts = Store(), []
    addresses = PublishedAddresses((), service=PublishedService(store, "edge", "lb"), on_count=counts.append)
    assert addresses.current() == () and addresses.current() == ()
    assert addresses.service is not None and addresses.service.addresses() == ((), "does not exist")
    store.put(("edge", "lb"), service({"type": "LoadBalancer", "ports": PORTS}, {"loadBalancer": {"ingress": [{"hostname": "b.example.com"}, {"ip": "192.0.2.7"}]}}))
    assert addresses.current() == ("192.0.2.7", "b.example.com")  # sorted, as the status sync compares them
    store.put(("edge", "lb"), service({"type": "LoadBalancer", "ports": PORTS}))
    assert addresses.current() == ()
    assert addresses.service.addresses()[1].startswith("has no address yet")
    assert counts == [0, 2, 0]
