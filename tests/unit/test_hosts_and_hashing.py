"""
Tests for upstream-hash-by, service-upstream, server-alias and from-to-www-redirect.

ingress-nginx's annotations page (docs/user-guide/nginx-configuration/annotations.md), sections
"Custom NGINX upstream hashing", "Service Upstream", "Server Alias" and "Redirect from/to www".
"""

from __future__ import annotations

import pytest

from ingress.routing.policies.affinity import rendezvous_top
from ingress.routing.policies.hashing import HashBy, parse_template
from tests.unit.objects import T0, T1, endpoints, ingress, path, problems, rule, service, table

NGINX = "nginx.ingress.kubernetes.io/"


@pytest.mark.parametrize(
    ("template", "parts"),
    [
        ("$request_uri", (("var", "request_uri"),)),
        ("$request_uri$host", (("var", "request_uri"), ("var", "host"))),
        ("${request_uri}-text-value", (("var", "request_uri"), ("text", "-text-value"))),  # the page's three examples
        ("$http_x_user_id", (("var", "http_x_user_id"),)),
        ("$cookie_session", (("var", "cookie_session"),)),
        ("$remote_addr", (("var", "remote_addr"),)),
    ],
)
def test_key_templates(template: str, parts: tuple) -> None:
    assert parse_template(template) == HashBy(parts, template)


@pytest.mark.parametrize("template", ["$binary_remote_addr", "$upstream_addr", "$http_", "${request_uri"])
def test_a_variable_twingress_cannot_compute_is_refused(template: str) -> None:
    with pytest.raises(ValueError):
        parse_template(template)
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "upstream-hash-by": template}))
    assert routes.table.match("a.test", "/") is None and ("default/web", "InvalidAnnotation") in problems(routes)


def test_upstream_hash_by_is_a_policy() -> None:
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "upstream-hash-by": "$request_uri"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.hash_by == parse_template("$request_uri")


def test_service_upstream_uses_the_cluster_ip() -> None:
    """"Service Upstream": a single upstream, the service's Cluster IP and port, instead of the endpoints."""
    objects = (
        service("web", clusterIP="10.96.0.10"),
        endpoints("web", "10.244.0.5", "10.244.0.6"),
        ingress("direct", rule("a.test", path("/")), created=T0),
        ingress("via-service", rule("b.test", path("/")), annotations={NGINX + "service-upstream": "true"}, created=T1),
    )
    routes = table(*objects)
    direct, via = routes.table.match("a.test", "/"), routes.table.match("b.test", "/")
    assert direct is not None and direct.upstream.targets == (("10.244.0.5", 8080), ("10.244.0.6", 8080))
    assert via is not None and via.upstream.targets == (("10.96.0.10", 80),)
    assert via.upstream.key != direct.upstream.key  # pooled and balanced apart


def test_service_upstream_of_a_headless_service_is_reported() -> None:
    routes = table(service("web", clusterIP="None"), ingress("i", rule("a.test", path("/")), annotations={NGINX + "service-upstream": "true"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.upstream.targets == ()  # 503, with the reason
    assert ("default/i", "NoClusterIP") in problems(routes)


def test_server_alias_serves_the_same_paths_unless_the_name_is_a_host_of_its_own() -> None:
    routes = table(
        ingress("main", rule("a.test", path("/", "web"), path("/api", "api")), annotations={NGINX + "server-alias": "alias.test, b.test"}, created=T0),
        ingress("b", rule("b.test", path("/", "b")), created=T1),
    )
    for request_path, upstream in (("/", "default/web:80"), ("/api/x", "default/api:80")):
        route = routes.table.match("alias.test", request_path)
        assert route is not None and route.upstream.key == upstream
    b = routes.table.match("b.test", "/")
    assert b is not None and b.upstream.key == "default/b:80"  # "cannot conflict with the hostname of an existing server"


@pytest.mark.parametrize(("host", "other"), [("www.example.com", "example.com"), ("example.com", "www.example.com")])
def test_from_to_www_redirect(host: str, other: str) -> None:
    """"Redirect from/to www": the way depends on the rule's host; the redirect keeps the request URI."""
    routes = table(ingress("site", rule(host, path("/")), annotations={NGINX + "from-to-www-redirect": "true"}))
    route = routes.table.match(other, "/any/path")
    assert route is not None and route.policies is not None and route.policies.redirect is not None
    assert route.policies.redirect.code == 308
    assert route.policies.redirect.location_for(b"https", other, b"/any/path?q=1") == f"https://{host}/any/path?q=1".encode()


def test_from_to_www_leaves_a_host_that_has_its_own_ingress() -> None:
    """"If at some point a new Ingress is created with a host equal to one of the options ... the annotation will be omitted"."""
    routes = table(
        ingress("site", rule("example.com", path("/", "site")), annotations={NGINX + "from-to-www-redirect": "true"}, created=T0),
        ingress("www", rule("www.example.com", path("/", "www")), created=T1),
    )
    route = routes.table.match("www.example.com", "/")
    assert route is not None and route.upstream.key == "default/www:80" and route.policies is None


def test_upstream_hash_by_subset() -> None:
    """"subset" hashing: a key maps to a subset (default size 3) and a server is chosen at random in it."""
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "upstream-hash-by": "$request_uri", NGINX + "upstream-hash-by-subset": "true"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.hash_by is not None
    assert route.policies.hash_by.subset_size == 3
    targets = [(f"10.0.0.{n}", 80) for n in range(1, 9)]
    subset = rendezvous_top("/item/1", targets, 3)
    assert len(set(subset)) == 3 and rendezvous_top("/item/1", list(reversed(targets)), 3) == subset
    assert rendezvous_top("/item/1", [t for t in targets if t not in subset[1:]], 3)[0] == subset[0]  # stable as targets go
