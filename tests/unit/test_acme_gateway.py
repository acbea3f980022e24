"""
ACME for Gateways (issue 64), the pure parts: what an annotated Gateway's listeners ask for
(ingress/controllers/acmegateways.py), and where a pending token's route goes when a Gateway serves its
host (ingress/routing/acme_challenges.py): among the HTTPRoute's paths, which keep serving the host
while the order lasts, instead of an Ingress host that would take the host from them.
"""

from __future__ import annotations

from typing import Any

from ingress.controllers.acmegateways import Refused, Wanted, gateway_wants
from ingress.model.gateway import Gateway
from ingress.model.parse import state_from_objects
from ingress.routing import build
from ingress.routing.acme_challenges import CHALLENGES
from ingress.routing.build_options import BuildOptions
from tests.unit.objects import PEM_SHAPED, ingress, path, rule
from tests.unit.test_gateway_routing import PORTS, backend, gateway, gateway_class, http_route, listener, prefix, serve, services, to

TOKEN = "hoGvpiW8rLUYdY_XcPFU35PEldxG05uhIsNlJHA3uGg"
CHALLENGE = f"/.well-known/acme-challenge/{TOKEN}"


def https(name: str, hostname: str | None, *refs: dict[str, Any], **tls: Any) -> dict[str, Any]:
    return listener(name, 443, "HTTPS", hostname, tls={"certificateRefs": list(refs), **tls})


def secret(name: str, **extra: str) -> dict[str, Any]:
    return {"kind": "Secret", "name": name, **extra}


def parsed(*listeners: dict[str, Any], namespace: str = "default") -> Gateway:
    found = state_from_objects([gateway("gw", *listeners, namespace=namespace)]).gateways
    assert len(found) == 1
    return found[0]


def test_each_https_listener_with_a_hostname_asks_for_its_secret_and_listeners_sharing_one_share_a_certificate() -> None:
    wanted, refused = gateway_wants(parsed(
        listener("plain", 80, "HTTP", "a.example.com"),
        https("a", "a.example.com", secret("a-tls")),
        https("b", "b.example.com", secret("shared-tls")),
        https("c", "c.example.com", secret("shared-tls")),
    ))
    assert refused == []
    assert wanted == [Wanted("a-tls", ("a.example.com",), ("a",)), Wanted("shared-tls", ("b.example.com", "c.example.com"), ("b", "c"))]


def test_what_cannot_be_ordered_is_refused_naming_the_listener() -> None:
    wanted, refused = gateway_wants(parsed(
        https("any", None, secret("any-tls")),
        https("wild", "*.example.com", secret("wild-tls")),
        https("elsewhere", "x.example.com", secret("x-tls", namespace="other")),
        https("kind", "k.example.com", {"group": "example.com", "kind": "Vault", "name": "k"}),
        listener("none", 443, "HTTPS", "n.example.com", tls={"certificateRefs": []}),
        https("ok", "ok.example.com", secret("ok-tls")),
    ))
    assert wanted == [Wanted("ok-tls", ("ok.example.com",), ("ok",))]
    assert [(r.listener, r.reason, r.event) for r in refused] == [
        ("any", "no-hostname", "AcmeNeedsHostname"),
        ("wild", "wildcard", "AcmeWildcard"),
        ("elsewhere", "certificate-ref-namespace", "AcmeCertificateRefNamespace"),
        ("kind", "certificate-ref-kind", "AcmeCertificateRefNotSecret"),
        ("none", "no-certificate-ref", "AcmeNeedsCertificateRef"),
    ]
    assert all(isinstance(r, Refused) and r.note.startswith(f"listener {r.listener}: ") for r in refused)
    assert "DNS-01" in refused[1].note and "other/x-tls" in refused[2].note


def _challenges(tokens: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": CHALLENGES[0], "name": CHALLENGES[1]},
            "data": {"responder": "127.0.0.1:4000", **tokens}}


def _built(*objects: dict[str, Any], acme: bool = True) -> Any:
    return build(state_from_objects([gateway_class(), *objects]), BuildOptions(reserved_ports=PORTS, acme_challenges=acme))


def test_a_token_for_a_host_an_httproute_serves_joins_its_paths_and_the_route_keeps_serving() -> None:
    objects = [
        *services("web"),
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "site-tls", "namespace": "default"}, "stringData": PEM_SHAPED},
        gateway("gw", listener("http", 80, "HTTP", "site.example.com"), https("https", "site.example.com", secret("site-tls"))),
        http_route("site", to(backend("web"), matches=[prefix("/")]), hostnames=("site.example.com",)),
        _challenges({TOKEN: "site.example.com"}),
    ]
    built = _built(*objects)
    assert serve(built.table, "site.example.com", CHALLENGE) == "acme-challenge-responder"
    assert serve(built.table, "site.example.com", "/app") == "default/web:80"  # the HTTPRoute still has the host
    assert serve(built.table, "site.example.com", "/app", scheme=b"https") == "default/web:80"
    assert [p for p in built.report.problems if p.reason == "HostServedByIngress"] == []
    before = _built(*objects, acme=False)
    assert serve(before.table, "site.example.com", CHALLENGE) == "default/web:80"  # without the option the prefix has it


def test_a_token_for_a_listener_hostname_without_routes_is_answered_and_an_ingress_host_keeps_its_own() -> None:
    objects = [
        *services("web"),
        gateway("gw", https("https", "new.example.com", secret("new-tls"))),  # its Secret is not there yet: the listener is not served
        ingress("app", rule("app.example.com", path("/"))),
        _challenges({TOKEN: "new.example.com", "other": "app.example.com"}),
    ]
    table = _built(*objects).table
    assert serve(table, "new.example.com", CHALLENGE) == "acme-challenge-responder"
    assert serve(table, "new.example.com", "/") == "404"
    assert serve(table, "app.example.com", "/.well-known/acme-challenge/other") == "acme-challenge-responder"
    assert serve(table, "app.example.com", "/") == "default/web:80"


def test_a_token_is_answered_before_an_http_listeners_redirect_to_https() -> None:
    """The usual pair: an HTTP listener whose HTTPRoute redirects everything to https, and the HTTPS listener being ordered for."""
    redirect = {"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}
    objects = [
        *services("web"),
        gateway("gw", listener("http", 80, "HTTP", "site.example.com"), https("https", "site.example.com", secret("site-tls"))),
        http_route("to-https", to(matches=[prefix("/")], filters=[redirect]), hostnames=("site.example.com",), parents=({"name": "gw", "sectionName": "http"},)),
        _challenges({TOKEN: "site.example.com"}),
    ]
    table = _built(*objects).table
    assert serve(table, "site.example.com", CHALLENGE) == "acme-challenge-responder"
    assert serve(table, "site.example.com", "/app") == "301 https://site.example.com/app"
    assert serve(_built(*objects, acme=False).table, "site.example.com", CHALLENGE).startswith("301 ")
