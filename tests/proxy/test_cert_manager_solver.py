"""
cert-manager's HTTP-01 solver beside a host that forces HTTPS (issue 64), through twistd in manifests
mode with real sockets: the token path answers over plain HTTP from the solver's backend, every other
path of the host is redirected.  The solver's objects are cert-manager's own shape (tests/cert_manager.py,
which cites its source); the redirect is exempt by ingress-nginx's C{no-tls-redirect-locations} default
(L{ingress.routing.certs.with_tls_options}).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.cert_manager import HOST, SOLVER, SOLVER_PORT, TOKEN, solver_ingress
from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.support import EchoBackend, Manifests, Twingress, raw_exchange


def _get(port: int, target: str) -> tuple[int, dict[str, str], bytes]:
    answer = raw_exchange(port, f"GET {target} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), fields, body


def solver_service(manifests: Manifests, backend: EchoBackend) -> list[dict]:
    """The solver pod's Service on port 8089 (@CM service.go) and its EndpointSlice: the solver pod is the echo backend here."""
    service, *slices = manifests.service(SOLVER, [backend.address])
    service["spec"]["ports"] = [{"name": "http", "port": SOLVER_PORT, "targetPort": backend.port}]
    return [service, *slices]


@pytest.mark.parametrize(
    ("class_by", "redirect", "path_type"),
    [
        ("ingressClassName", {"force-ssl-redirect": "true"}, "ImplementationSpecific"),
        ("annotation", {"force-ssl-redirect": "true"}, "ImplementationSpecific"),
        ("ingressClassName", {}, "ImplementationSpecific"),  # ssl-redirect's default on a host with spec.tls
        ("annotation", {"ssl-redirect": "true"}, "Exact"),  # @CM feature gate ACMEHTTP01IngressPathTypeExact
    ],
)
def test_the_solvers_token_answers_over_http_and_the_rest_of_the_host_redirects(
    manifests: Manifests, twingress: Callable[..., Twingress], echo_pair: tuple[EchoBackend, EchoBackend],
    class_by: str, redirect: dict[str, str], path_type: str,
) -> None:
    site, solver = echo_pair
    leaf = CertificateAuthority("shop-ca").issue([HOST])
    own = Manifests.nginx_ingress("shop", HOST, "shop", redirect)
    own["spec"]["tls"] = [{"hosts": [HOST], "secretName": "shop-tls"}]
    manifests.write("shop.yaml", *manifests.service("shop", [site.address]), tls_secret("shop-tls", leaf), own)
    manifests.write("solver.yaml", *solver_service(manifests, solver), solver_ingress(class_by, path_type))
    proxy = twingress()

    status, _, body = _get(proxy.http_port, f"/.well-known/acme-challenge/{TOKEN}")
    assert status == 200, body
    answered = json.loads(body)
    assert answered["name"] == solver.name and answered["path"] == f"/.well-known/acme-challenge/{TOKEN}", answered
    for target in ("/", "/cart?item=1", "/.well-known/acme-challenge/another-token", "/.well-known/other"):
        status, fields, _ = _get(proxy.http_port, target)
        assert (status, fields.get("location")) == (308, f"https://{HOST}{target}"), (target, status, fields)
