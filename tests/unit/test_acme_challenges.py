"""
The HTTP-01 challenge routes (ingress/routing/acme_challenges.py) in the table: each pending token of
the issuer's ConfigMap is an Exact route of its host to the responder, matched before the host's HTTPS
redirect, auth, rewrite and regex paths, and nothing changes without the ConfigMap or without the option.
"""

from __future__ import annotations

from typing import Any

from ingress.routing import RoutingTable
from ingress.routing.acme_challenges import CHALLENGES
from tests.unit.objects import endpoints, ingress, path, rule, service, table, tls_secret

NGINX = "nginx.ingress.kubernetes.io/"
TOKEN = "hoGvpiW8rLUYdY_XcPFU35PEldxG05uhIsNlJHA3uGg"


def _challenges(tokens: dict[str, str], responder: str = "127.0.0.1:4000") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": CHALLENGES[0], "name": CHALLENGES[1]}, "data": {"responder": responder, **tokens}}


def _guarded_host(**annotations: str) -> list[dict[str, Any]]:
    """A TLS host (an HTTPS redirect on :80) with basic auth and a rewrite on its "/" prefix."""
    guards = {NGINX + "auth-type": "basic", NGINX + "auth-secret": "htpasswd", NGINX + "rewrite-target": "/app", **annotations}
    htpasswd = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "htpasswd", "namespace": "default"}, "stringData": {"auth": "u:$apr1$x$y"}}
    return [service(), endpoints("web", "10.0.0.1"), tls_secret("app-tls"), htpasswd,
            ingress("app", rule("app.example.com", path("/")), annotations=guards, tls=((("app.example.com",), "app-tls"),))]


def _table(*objects: dict[str, Any], acme: bool = True) -> RoutingTable:
    return table(*objects, acme_challenges=acme)


def test_a_pending_token_is_an_exact_route_to_the_responder_before_the_hosts_redirect_and_auth() -> None:
    routes = _table(*_guarded_host(), _challenges({TOKEN: "app.example.com", "other-token": "new.example.com"}))
    challenge = routes.match("app.example.com", f"/.well-known/acme-challenge/{TOKEN}")
    assert challenge is not None
    assert challenge.upstream.endpoints == (("127.0.0.1", 4000),)
    assert (challenge.redirect_https, challenge.policies, challenge.path_type) == (False, None, "Exact")
    host_route = routes.match("app.example.com", "/.well-known/acme-challenge/unknown")
    assert host_route is not None and host_route.redirect_https and host_route.policies is not None and host_route.policies.basic_auth is not None
    fresh = routes.match("new.example.com", "/.well-known/acme-challenge/other-token")  # a host with no Ingress rule yet
    assert fresh is not None and fresh.upstream.endpoints == (("127.0.0.1", 4000),)


def test_a_regex_host_gets_the_token_as_its_first_pattern() -> None:
    routes = _table(*_guarded_host(**{NGINX + "use-regex": "true"}), _challenges({TOKEN: "app.example.com"}))
    challenge = routes.match("app.example.com", f"/.well-known/acme-challenge/{TOKEN}")
    assert challenge is not None and challenge.upstream.key == "acme-challenge-responder"


def test_without_the_option_or_with_a_broken_responder_nothing_is_added() -> None:
    for routes in (_table(*_guarded_host(), _challenges({TOKEN: "app.example.com"}), acme=False),
                   _table(*_guarded_host(), _challenges({TOKEN: "app.example.com"}, responder="nowhere"))):
        route = routes.match("app.example.com", f"/.well-known/acme-challenge/{TOKEN}")
        assert route is not None and route.redirect_https and route.upstream.key != "acme-challenge-responder"
    assert "new.example.com" not in _table(*_guarded_host(), _challenges({TOKEN: "new.example.com"}), acme=False).hosts
