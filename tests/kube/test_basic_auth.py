"""
Basic auth from a real Secret through the apiserver (ingress-nginx annotations.md "Authentication"):
the Secret's htpasswd guards the route, and a changed Secret applies live (the new password works,
the old one stops working).
"""

from __future__ import annotations

import base64
import http.client

import pytest
from passlib.hash import ldap_sha1

from tests.kube.twingress import host_for, wait_until

pytestmark = pytest.mark.kube


def _status(port: int, host: str, user: str, password: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        connection.request("GET", "/", headers={"Host": host, "Authorization": "Basic " + token, "Connection": "close"})
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_secret_change_applies_live(kube, namespace, echo, twingress):
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "basic-auth"}, "type": "Opaque", "stringData": {"auth": f"foo:{ldap_sha1.hash('old')}\n"}})
    pod = echo("pod-a")
    host = host_for(namespace, "web")
    kube.backend(namespace, "web", [pod])
    body = kube.ingress_body(namespace, "web", host, "web")
    body["metadata"]["annotations"] = {
        "nginx.ingress.kubernetes.io/auth-type": "basic",
        "nginx.ingress.kubernetes.io/auth-secret": "basic-auth",
        "nginx.ingress.kubernetes.io/auth-realm": "Authentication Required - foo",
    }
    kube.networking.create_namespaced_ingress(namespace, body)
    proxy = twingress()

    denied = proxy.wait_status(host, 401)
    assert denied.headers["www-authenticate"].startswith('Basic realm="Authentication Required - foo"')
    port = proxy.http_port
    wait_until(lambda: _status(port, host, "foo", "old") == 200, what="the Secret's password let in")

    kube.core.patch_namespaced_secret("basic-auth", namespace, {"stringData": {"auth": f"foo:{ldap_sha1.hash('new')}\n"}})
    wait_until(lambda: _status(port, host, "foo", "new") == 200, what="the changed Secret's password let in")
    assert _status(port, host, "foo", "old") == 401
