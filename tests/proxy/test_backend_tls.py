"""
TLS to the endpoints (backend-protocol: HTTPS and proxy-ssl-*), through twistd, with real TLS backends.

ingress-nginx's annotations page, sections "Backend Protocol" and "Backend Certificate
Authentication" (docs/user-guide/nginx-configuration/annotations.md): verification is off
by default; proxy-ssl-verify on checks the chain against the Secret's ca.crt and the name
(proxy-ssl-name); proxy-ssl-secret's tls.crt/tls.key authenticate twingress to the backend.
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.proxy.certs import CertificateAuthority, tls_secret
from tests.support import ROOT, Manifests, Twingress, free_port, wait_for_port


def _ingress(name: str, service: str, annotations: dict[str, str]) -> dict[str, Any]:
    return Manifests.nginx_ingress(name, f"{name}.test", service, annotations)


def _with_ca(secret: dict, ca: CertificateAuthority) -> dict:
    secret["data"]["ca.crt"] = base64.b64encode(ca.pem()).decode()
    return secret


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twingress]:
    directory = tmp_path_factory.mktemp("backend-tls")
    ca, client_ca = CertificateAuthority("backend-ca"), CertificateAuthority("client-ca")
    server = ca.issue(["tls-echo.default.svc", "backend.internal"])
    (directory / "server.pem").write_bytes(server.fullchain_pem())
    (directory / "server.key").write_bytes(server.key_pem("pkcs1"))
    (directory / "client-ca.pem").write_bytes(client_ca.pem())
    echo_port, mtls_port = free_port(), free_port()
    listen = f"ssl:{echo_port}:interface=127.0.0.1:privateKey={directory / 'server.key'}:certKey={directory / 'server.pem'}"
    backends = [
        subprocess.Popen([sys.executable, str(ROOT / "examples" / "echo.py"), "--listen", listen, "--name", "tls-pod"], cwd=ROOT),
        subprocess.Popen(
            ["openssl", "s_server", "-quiet", "-accept", f"127.0.0.1:{mtls_port}", "-cert", str(directory / "server.pem"), "-key", str(directory / "server.key"),
             "-CAfile", str(directory / "client-ca.pem"), "-Verify", "1", "-www"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
    ]
    for port, process in zip((echo_port, mtls_port), backends, strict=True):
        wait_for_port("127.0.0.1", port, process)
    manifests = Manifests(directory / "manifests")
    manifests.path.mkdir()
    client = client_ca.issue(["twingress-client"])
    manifests.write(
        "all.yaml",
        *manifests.service("tls-echo", [("127.0.0.1", echo_port)]),
        *manifests.service("mtls", [("127.0.0.1", mtls_port)]),
        _with_ca(tls_secret("backend-trust", server), ca),
        tls_secret("client-cert", client),
        _ingress("plain-to-tls", "tls-echo", {}),
        _ingress("unverified", "tls-echo", {"backend-protocol": "https"}),
        _ingress("verified", "tls-echo", {"backend-protocol": "HTTPS", "proxy-ssl-verify": "on", "proxy-ssl-secret": "default/backend-trust"}),
        _ingress("named", "tls-echo", {"backend-protocol": "HTTPS", "proxy-ssl-verify": "on", "proxy-ssl-secret": "backend-trust", "proxy-ssl-name": "backend.internal"}),
        _ingress("wrong-name", "tls-echo", {"backend-protocol": "HTTPS", "proxy-ssl-verify": "on", "proxy-ssl-secret": "backend-trust", "proxy-ssl-name": "other.internal"}),
        _ingress("untrusted", "tls-echo", {"backend-protocol": "HTTPS", "proxy-ssl-verify": "on", "proxy-ssl-secret": "client-cert"}),
        _ingress("missing-secret", "tls-echo", {"backend-protocol": "HTTPS", "proxy-ssl-secret": "nowhere"}),
        _ingress("mutual", "mtls", {"backend-protocol": "HTTPS", "proxy-ssl-secret": "client-cert"}),
        _ingress("no-client-cert", "mtls", {"backend-protocol": "HTTPS"}),
        _ingress("grpc", "tls-echo", {"backend-protocol": "GRPC"}),
        _ingress("fcgi", "tls-echo", {"backend-protocol": "FCGI"}),
    )
    twingress = Twingress(manifests.path)
    yield twingress
    twingress.stop()
    for process in backends:
        process.terminate()
        process.wait(5)


def _get(proxy: Twingress, host: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=10)
    connection.request("GET", "/x", headers={"Host": host})
    response = connection.getresponse()
    return response.status, response.read()


def test_plain_http_to_a_tls_endpoint_fails(proxy: Twingress) -> None:
    assert _get(proxy, "plain-to-tls.test")[0] == 502


@pytest.mark.parametrize("host", ["unverified.test", "verified.test", "named.test"])
def test_https_to_the_endpoint(proxy: Twingress, host: str) -> None:
    """"Backend Protocol" HTTPS (any case); verified against ca.crt and the Service's name or proxy-ssl-name."""
    for _ in range(3):  # the pooled TLS connection is reused
        status, body = _get(proxy, host)
        assert status == 200, body
        assert json.loads(body)["name"] == "tls-pod"


@pytest.mark.parametrize("host", ["wrong-name.test", "untrusted.test"])
def test_a_backend_that_fails_verification_is_not_used(proxy: Twingress, host: str) -> None:
    assert _get(proxy, host)[0] == 502


def test_a_missing_proxy_ssl_secret_closes_the_route(proxy: Twingress) -> None:
    assert _get(proxy, "missing-secret.test")[0] == 503
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert ("Ingress/default/missing-secret", "SecretNotFound") in problems


def test_the_client_certificate_authenticates_twingress(proxy: Twingress) -> None:
    """proxy-ssl-secret's tls.crt and tls.key: a backend that requires a client certificate accepts it."""
    status, body = _get(proxy, "mutual.test")
    assert status == 200 and b"twingress-client" in body, body  # s_server -www shows the client's certificate
    assert _get(proxy, "no-client-cert.test")[0] == 502


def test_an_unsupported_backend_protocol_leaves_the_ingress_out(proxy: Twingress) -> None:
    """FCGI (ingress-nginx "Backend Protocol") is not served: its paths are skipped, reported; gRPC is (tests/proxy/test_grpc.py)."""
    assert _get(proxy, "fcgi.test")[0] == 404
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert ("Ingress/default/fcgi", "InvalidAnnotation") in problems
    assert ("Ingress/default/grpc", "InvalidAnnotation") not in problems
    assert _get(proxy, "grpc.test")[0] == 426  # served, to HTTP/2 clients only


def test_debug_routes_shows_the_tls_settings_but_no_key(proxy: Twingress) -> None:
    policies = proxy.routes()["hosts"]["named.test"]["prefix"]["/"]["policies"]
    assert policies["backendTLS"] == {"verify": True, "name": "backend.internal", "sni": False, "clientCertificate": True}  # the Secret's tls.crt
    assert "PRIVATE KEY" not in json.dumps(proxy.routes())
