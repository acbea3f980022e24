"""
StreamIngress against the real apiserver: the CRD from k8s/ (installed by the session cluster)
rejects bad objects with the rule's own message, and a running twingress turns StreamIngresses
and the ingress-nginx tcp/udp-services ConfigMaps into stream routes and conditions, shown in
/debug/routes.
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client import ApiException

from tests.kube.streams_support import stream_body, streams  # noqa: F401 - fixtures
from tests.kube.twingress import kube, namespace  # noqa: F401 - fixtures

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
