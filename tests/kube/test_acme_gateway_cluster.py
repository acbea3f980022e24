"""
ACME for a Gateway (issue 64: "a Gateway with the same annotation gets one per HTTPS listener with a
hostname, into its certificateRefs Secret"), against the real apiserver and Pebble.

A Gateway of our class with an HTTPS listener for site.example.com whose certificateRef names a Secret
that does not exist yet, and an HTTPRoute on that listener only (nothing on --http for the host).
Annotated, the leader orders the certificate: Pebble validates HTTP-01 on twingress's --http port,
so the token is answered there with no HTTPRoute on it; the Secret is written with the labels and
annotations of an Ingress's; a TLS client verifying against Pebble's root reaches the HTTPRoute's
backend by SNI.  The listeners that cannot be ordered for (a wildcard hostname, a certificateRef to
another namespace) are each a Warning Event on the Gateway naming the listener; a Secret twingress did
not create is refused with an Event and left as it was; an unannotated Gateway is not touched.

The listener's status follows its Secret, in the same process: while the Secret does not exist,
ResolvedRefs is False with reason InvalidCertificateRef (and the listener is not Programmed), as the
Gateway API says (sigs.k8s.io/gateway-api v1.6.3, apis/v1/gateway_types.go, ListenerReasonInvalidCertificateRef):
"This reason is used with the "ResolvedRefs" condition when the Listener has a TLS configuration with
at least one TLS CertificateRef that is invalid or does not exist.  A CertificateRef is considered
invalid when it refers to a nonexistent or unsupported resource or kind, or when the data within that
resource is malformed."  Once the certificate is written, the next table makes it ResolvedRefs True
(reason ResolvedRefs) and Programmed, with no restart.
"""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client

from tests.acme_support import Pebble
from tests.kube.api import Kube
from tests.kube.gateway_support import GatewayAPI, conditions, gateway_body, listener, route_body, start
from tests.kube.test_acme_cluster import issued_line, secret_or_none, served_certificate
from tests.kube.test_leader import wait_leader
from tests.kube.twingress import KubeTwingress, wait_until
from tests.support import free_port

pytestmark = pytest.mark.kube

HOST = "site.example.com"


@pytest.fixture
def pebble(tmp_path: Path) -> Iterator[Pebble]:
    made = Pebble(tmp_path / "pebble")
    yield made
    made.stop()


def https_listener(name: str, port: int, hostname: str, secret: str, **ref: str) -> dict[str, Any]:
    return listener(name, port, "HTTPS", hostname, tls={"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": secret, **ref}]})


def gateway_events(kube: Kube, namespace: str, name: str) -> list[Any]:
    found = client.EventsV1Api(kube.api).list_namespaced_event(namespace).items
    return [e for e in found if e.regarding and e.regarding.kind == "Gateway" and e.regarding.name == name]


def gateway_event(kube: Kube, namespace: str, name: str, reason: str, timeout: float = 30.0) -> Any:
    return wait_until(lambda: next((e for e in gateway_events(kube, namespace, name) if e.reason == reason), None), timeout=timeout, what=f"Event {reason} on Gateway {name}")


def listener_conditions(gateways: GatewayAPI, namespace: str, name: str, listener_name: str) -> dict[str, tuple[str, str, int]]:
    status = gateways.read("gateways", name, namespace).get("status") or {}
    found = next((item for item in status.get("listeners", []) if item["name"] == listener_name), None)
    return conditions(found["conditions"]) if found else {}


def https_get(port: int, host: str, root: Path) -> tuple[int, bytes]:
    """One GET of C{host} over TLS to 127.0.0.1:C{port}, SNI C{host}, the chain verified against C{root}: (status, body)."""
    context = ssl.create_default_context(cafile=str(root))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while chunk := tls.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_an_annotated_gateway_gets_its_listeners_certificate_and_the_rest_is_refused_or_untouched(
    kube: Kube, namespace: str, twingress: Callable[..., KubeTwingress], pebble: Pebble, gateway_api: GatewayAPI, gateway_class: str,
    echo: Callable[..., Any], tmp_path: Path,
) -> None:
    https_port = free_port()
    acme = ("--acme-directory", pebble.directory, "--acme-ca-file", str(pebble.ca_file), "--acme-agree-tos", "true", "--acme-email", "ops@example.com")
    proxy = start(twingress, namespace, *acme, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    wait_leader(kube, namespace, [proxy])
    pebble.start(proxy.http_port, https_port)
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root_pem())
    kube.backend(namespace, "app", [echo("pod-a")])
    theirs = kube.core.create_namespaced_secret(namespace, {
        "metadata": {"name": "taken-tls"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": base64.b64encode(b"someone else's").decode(), "tls.key": base64.b64encode(b"someone else's").decode()},
    })

    listeners = [
        https_listener("site", https_port, HOST, "site-tls"),
        https_listener("wild", https_port, "*.wild.example.com", "wild-tls"),
        https_listener("elsewhere", https_port, "elsewhere.example.com", "elsewhere-tls", namespace="default"),
        https_listener("taken", https_port, "taken.example.com", "taken-tls"),
    ]
    gateway_api.create("gateways", gateway_body("gw", gateway_class, https_port, listeners), namespace)
    route = route_body("site", [HOST], [{"backendRefs": [{"name": "app", "port": 80}]}], parents=[{"name": "gw", "sectionName": "site"}])
    gateway_api.create("httproutes", route, namespace)
    plain = gateway_body("plain", gateway_class, https_port, [https_listener("plain", https_port, "plain.example.com", "plain-tls")])
    gateway_api.create("gateways", plain, namespace)

    missing = wait_until(lambda: (found := listener_conditions(gateway_api, namespace, "gw", "site")).get("ResolvedRefs", ("",))[0] == "False" and found,
                         what="the listener's ResolvedRefs while its Secret is missing")
    assert missing["ResolvedRefs"][1] == "InvalidCertificateRef" and missing["Programmed"][:2] == ("False", "Invalid"), missing
    assert secret_or_none(kube, namespace, "site-tls") is None and "ordering a certificate" not in proxy.log()  # not annotated yet

    requests_before = pebble.requests()
    gateway_api.patch("gateways", "gw", namespace, {"metadata": {"annotations": {"twingress.io/acme": "true"}}})
    line = issued_line(proxy, pebble, HOST)
    secret = wait_until(lambda: secret_or_none(kube, namespace, "site-tls"), what="the listener's Secret")
    assert secret.type == "kubernetes.io/tls"
    assert secret.metadata.labels == {"app.kubernetes.io/managed-by": "twingress"}
    assert secret.metadata.annotations["acme.twingress.io/hosts"] == HOST
    assert secret.metadata.annotations["acme.twingress.io/issuer"] == pebble.directory
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret.data["tls.crt"]))
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == [HOST]
    served = wait_until(lambda: served_certificate("127.0.0.1", https_port, HOST, root), timeout=30, what="the certificate by SNI")
    assert served.serial_number == leaf.serial_number
    status, body = wait_until(lambda: (found := https_get(https_port, HOST, root))[0] == 200 and found, timeout=30, what="the HTTPRoute over HTTPS")
    assert b'"pod-a"' in body, body[:300]
    resolved = wait_until(lambda: (found := listener_conditions(gateway_api, namespace, "gw", "site")).get("ResolvedRefs", ("",))[0] == "True" and found,
                          what="the listener's ResolvedRefs once its Secret is written")
    assert resolved["ResolvedRefs"][1] == "ResolvedRefs" and resolved["Programmed"][:2] == ("True", "Programmed"), resolved
    assert proxy.process.poll() is None  # the process that reported the missing Secret, never restarted
    issued = gateway_event(kube, namespace, "gw", "AcmeIssued")
    assert issued.type == "Normal" and "site-tls" in issued.note
    challenges = kube.core.read_namespaced_config_map("twingress-acme-challenges", namespace)
    assert not challenges.data, challenges.data  # the token withdrawn after the order
    print(f"Gateway listener certificate: the order {line.group(3)}s, {line.group(4)} requests counted by the client, {pebble.requests() - requests_before} in Pebble's log")

    wild = gateway_event(kube, namespace, "gw", "AcmeWildcard")
    assert wild.type == "Warning" and wild.note.startswith("listener wild: ") and "DNS-01" in wild.note, wild.note
    elsewhere = gateway_event(kube, namespace, "gw", "AcmeCertificateRefNamespace")
    assert elsewhere.note.startswith("listener elsewhere: ") and "default/elsewhere-tls" in elsewhere.note, elsewhere.note
    taken = gateway_event(kube, namespace, "gw", "AcmeSecretNotOurs")
    assert taken.type == "Warning" and f"Secret {namespace}/taken-tls exists and was not made by twingress" in taken.note, taken.note
    assert kube.core.read_namespaced_secret("taken-tls", namespace).metadata.resource_version == theirs.metadata.resource_version
    assert secret_or_none(kube, namespace, "wild-tls") is None and secret_or_none(kube, namespace, "plain-tls") is None
    assert secret_or_none(kube, "default", "elsewhere-tls") is None
    log = proxy.log()
    assert all(f"ordering a certificate for {host}" not in log for host in ("*.wild", "elsewhere.", "taken.", "plain."))
    assert not gateway_events(kube, namespace, "plain")
    assert proxy.metric("twingress_acme_refused_total", reason="wildcard") >= 1
    assert proxy.metric("twingress_acme_refused_total", reason="certificate-ref-namespace") >= 1
