"""
Basic auth through twistd (ingress-nginx annotations.md "Authentication" and its basic-auth example):
401 with WWW-Authenticate without (or with wrong) credentials, the backend reached with the right
ones and never shown them, a changed Secret applied live, and fail-closed routes.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from typing import Any, Optional

import bcrypt
import pytest
from passlib.hash import apr_md5_crypt, ldap_sha1

from tests.proxy.h2client import H2Client
from tests.support import EchoBackend, Manifests, Twingress, free_port

NGINX = "nginx.ingress.kubernetes.io/"


def _secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": "default"}, "stringData": data}


def _htpasswd(**users: str) -> str:
    lines = []
    for user, password in users.items():
        if user.startswith("b"):
            lines.append(f"{user}:" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$"))
        elif user.startswith("a"):
            lines.append(f"{user}:{apr_md5_crypt.hash(password)}")
        else:
            lines.append(f"{user}:{ldap_sha1.hash(password)}")
    return "\n".join(lines) + "\n"


def _guarded(name: str, host: str, **annotations: str) -> dict[str, Any]:
    return Manifests.nginx_ingress(name, host, "echo", {"auth-type": "basic", "auth-secret": "basic-auth", "auth-realm": "Members only", **annotations})


def _write(manifests: Manifests, echo: EchoBackend, htpasswd: str) -> None:
    manifests.write(
        "all.yaml",
        *manifests.service("echo", [echo.address]),
        _secret("basic-auth", {"auth": htpasswd}),
        _secret("basic-map", {"mia": ldap_sha1.hash("map-pass")}),
        _guarded("guarded", "guarded.test"),
        _guarded("mapped", "mapped.test", **{"auth-secret": "basic-map", "auth-secret-type": "auth-map"}),
        _guarded("missing", "missing.test", **{"auth-secret": "nowhere"}),
        Manifests.nginx_ingress("digest", "digest.test", "echo", {"auth-type": "digest", "auth-secret": "basic-auth"}),
    )


class Proxy:
    def __init__(self, twingress: Twingress, manifests: Manifests, echo: EchoBackend, https_port: int) -> None:
        self.twingress, self.manifests, self.echo, self.https_port = twingress, manifests, echo, https_port


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    echo = EchoBackend("pod-auth")
    manifests = Manifests(tmp_path_factory.mktemp("basic-auth"))
    _write(manifests, echo, _htpasswd(sam="s-pass", bea="b-pass", ada="a-pass"))
    https_port = free_port()
    twingress = Twingress(manifests.path, "--https", f"tcp:{https_port}:interface=127.0.0.1")
    yield Proxy(twingress, manifests, echo, https_port)
    twingress.stop()
    echo.stop()


def _get(proxy: Proxy, host: str, user: Optional[str] = None, password: str = "", method: str = "GET", body: Optional[bytes] = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Host": host}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    connection = http.client.HTTPConnection("127.0.0.1", proxy.twingress.http_port, timeout=10)
    connection.request(method, "/private", body=body, headers=headers)
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def test_no_or_wrong_credentials_get_401_with_the_realm(proxy: Proxy) -> None:
    status, headers, _ = _get(proxy, "guarded.test")
    assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="Members only", charset="UTF-8"'
    assert _get(proxy, "guarded.test", "sam", "wrong")[0] == 401
    assert _get(proxy, "guarded.test", "nobody", "s-pass")[0] == 401


@pytest.mark.parametrize(("user", "password"), [("sam", "s-pass"), ("bea", "b-pass"), ("ada", "a-pass")])
def test_each_hash_lets_its_user_in_and_the_backend_never_sees_the_credentials(proxy: Proxy, user: str, password: str) -> None:
    for _ in range(2):  # the second time from the remembered success
        status, _, body = _get(proxy, "guarded.test", user, password)
        assert status == 200
        assert "Authorization" not in json.loads(body)["headers"]  # ingress-nginx: proxy_set_header Authorization ""


def test_a_request_body_waits_for_the_check_and_arrives_whole(proxy: Proxy) -> None:
    status, _, body = _get(proxy, "guarded.test", "bea", "b-pass", "POST", b"z" * 200_000)
    assert status == 200 and json.loads(body)["body_bytes"] == 200_000
    assert _get(proxy, "guarded.test", "bea", "nope", "POST", b"z" * 200_000)[0] == 401


def test_auth_map_and_fail_closed_routes(proxy: Proxy) -> None:
    assert _get(proxy, "mapped.test", "mia", "map-pass")[0] == 200
    assert _get(proxy, "missing.test", "sam", "s-pass")[0] == 503  # the Secret is not there: closed, not open
    assert _get(proxy, "digest.test")[0] == 503  # digest is refused: closed
    problems = {(p["object"], p["reason"]) for p in proxy.twingress.routes()["problems"]}
    assert ("Ingress/default/missing", "SecretNotFound") in problems and ("Ingress/default/digest", "InvalidAnnotation") in problems


def test_http2_requests_are_guarded_the_same(proxy: Proxy) -> None:
    client = H2Client(proxy.https_port)
    denied = client.get("/private", authority="guarded.test")
    assert denied.status == 401 and denied.headers[b"www-authenticate"].startswith(b'Basic realm="Members only"')
    wrong = base64.b64encode(b"bea:wrong").decode()  # checked on the pool: the 401 is sent outside a read of the client's
    assert client.get("/private", authority="guarded.test", headers=(("authorization", "Basic " + wrong),)).status == 401
    token = base64.b64encode(b"bea:b-pass").decode()
    allowed = client.get("/private", authority="guarded.test", method="POST", body=b"y" * 100_000, headers=(("authorization", "Basic " + token),))
    assert allowed.status == 200 and json.loads(bytes(allowed.body))["body_bytes"] == 100_000
    client.close()


def test_a_changed_secret_applies_live(proxy: Proxy) -> None:
    assert _get(proxy, "guarded.test", "sam", "s-pass")[0] == 200
    generation = proxy.twingress.generation()
    _write(proxy.manifests, proxy.echo, _htpasswd(sam="new-pass"))
    proxy.twingress.wait_generation_above(generation)
    assert _get(proxy, "guarded.test", "sam", "new-pass")[0] == 200
    assert _get(proxy, "guarded.test", "sam", "s-pass")[0] == 401  # the remembered success was for the old hash
    assert _get(proxy, "guarded.test", "bea", "b-pass")[0] == 401  # no longer a user
