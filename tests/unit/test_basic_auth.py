"""
Basic auth from a Secret (ingress-nginx annotations.md "Authentication", and its basic-auth example:
an htpasswd file under the key "auth", or auth-secret-type auth-map with one key per user).
"""

from __future__ import annotations

import base64
from typing import Any, Optional

import bcrypt
import pytest
from passlib.hash import apr_md5_crypt, ldap_sha1, sha512_crypt

from ingress.routing import Built
from ingress.routing.policies.auth import HASHES, BasicAuth
from tests.unit.objects import ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
BCRYPT = bcrypt.hashpw(b"b-pass", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # htpasswd -B writes $2y$


def _secret(data: dict[str, bytes], name: str = "basic-auth") -> list[dict[str, Any]]:
    """An Opaque Secret as the API serves it (data base64-encoded)."""
    encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
    return [{"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": "default"}, "data": encoded}]


def _table(annotations: dict[str, str], secrets: list[dict[str, Any]]) -> Built:
    return table(ingress("web", rule("a.test", path("/")), annotations=annotations), *secrets)


def _auth(annotations: dict[str, str], secrets: list[dict[str, Any]]) -> tuple[Optional[BasicAuth], Built]:
    routes = _table(annotations, secrets)
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None
    return route.policies.basic_auth, routes


BASIC = {NGINX + "auth-type": "basic", NGINX + "auth-secret": "basic-auth", NGINX + "auth-realm": "Authentication Required - foo"}


def test_an_htpasswd_file_with_each_hash_nginx_reads() -> None:
    htpasswd = "\n".join([
        "# a comment", "",
        f"apr:{apr_md5_crypt.hash('a-pass')}",
        f"bcrypt:{BCRYPT}",
        f"sha:{ldap_sha1.hash('s-pass')}",
        f"sha512:{sha512_crypt.hash('x-pass')}",
    ]).encode()
    auth, routes = _auth(BASIC, _secret({"auth": htpasswd}))
    assert auth is not None and auth.realm == "Authentication Required - foo" and auth.secret == "default/basic-auth"
    assert [user for user, _ in auth.users] == ["apr", "bcrypt", "sha", "sha512"]
    for user, password in (("apr", "a-pass"), ("bcrypt", "b-pass"), ("sha", "s-pass"), ("sha512", "x-pass")):
        hashed = auth.hash_for(user)
        assert hashed is not None and HASHES.verify(password, hashed) and not HASHES.verify("wrong", hashed)
    assert not [p for p in routes.report.problems if p.reason != "ServiceNotFound"]


def test_a_bad_line_or_a_plain_text_password_lets_nobody_in_under_it_and_is_reported() -> None:
    auth, routes = _auth(BASIC, _secret({"auth": f"good:{ldap_sha1.hash('p')}\nno-colon-here\nplain:secret\n".encode()}))
    assert auth is not None and [user for user, _ in auth.users] == ["good"]
    reasons = [p for p in routes.report.problems if p.reason == "InvalidAuthSecret"]
    assert len(reasons) == 2 and "line 2" in reasons[0].message and "plain" in reasons[1].message


def test_auth_map_reads_one_key_per_user() -> None:
    auth, _ = _auth({**BASIC, NGINX + "auth-secret-type": "auth-map"}, _secret({"alice": ldap_sha1.hash("wonder").encode(), "bob": BCRYPT.encode()}))
    assert auth is not None and sorted(user for user, _ in auth.users) == ["alice", "bob"]


@pytest.mark.parametrize(
    ("annotations", "secrets"),
    [
        (BASIC, []),  # no such Secret
        (BASIC, _secret({"users": b"x"})),  # auth-file without the key "auth"
        (BASIC, _secret({"auth": b"only-a-bad-line\n"})),  # nobody could sign in
        ({NGINX + "auth-type": "basic"}, []),  # no auth-secret at all
        ({NGINX + "auth-type": "digest", NGINX + "auth-secret": "basic-auth"}, _secret({"auth": BCRYPT.encode()})),  # digest is refused
    ],
)
def test_what_cannot_guard_closes_the_route(annotations: dict[str, str], secrets: list[dict[str, Any]]) -> None:
    """Fail closed: 503, never an unguarded backend (ingress-nginx denies a location whose auth cannot be read)."""
    route = _table(annotations, secrets).table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.deny is not None and route.policies.deny.status == 503
    assert route.policies.basic_auth is None


def test_the_challenge_names_the_realm() -> None:
    assert BasicAuth('say "hi"', (("a", "b"),), "ns/s").challenge == b'WWW-Authenticate: Basic realm="say \\"hi\\"", charset="UTF-8"\r\n'
