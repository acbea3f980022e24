"""
custom-http-errors, default-backend and disable-proxy-intercept-errors read into a route's error pages
(ingress-nginx annotations.md "Custom HTTP Errors" and "Default Backend"; user-guide/custom-errors.md for
the fields; its controller's custom-default-backend upstream: the first port, only with an endpoint).
"""

from __future__ import annotations

import pytest

from ingress.proxy.message import h1
from ingress.proxy.request.errorpages import error_request_head, fallback_head
from ingress.routing.annotations.values import InvalidValue, error_codes
from ingress.routing.policies.errorpages import ErrorPages
from tests.unit.objects import endpoints, ingress, path, problems, rule, service, table

NGINX = "nginx.ingress.kubernetes.io/"


def _pages_of(*objects: dict, host: str = "a.test") -> tuple[ErrorPages | None, str]:
    routes = table(*objects)
    route = routes.table.match(host, "/")
    assert route is not None
    return (route.policies.error_pages if route.policies is not None else None), route.upstream.key


@pytest.mark.parametrize(("value", "codes"), [("404", {404}), ("404,415", {404, 415}), ("500, 503 ,", {500, 503}), ("599", {599})])
def test_codes_are_read(value: str, codes: set[int]) -> None:
    assert error_codes(value) == codes


@pytest.mark.parametrize("value", ["", "200", "399", "600", "40x", "404;500", ","])
def test_other_codes_are_refused(value: str) -> None:
    """ingress-nginx's validator takes 4xx and 5xx codes separated by commas, nothing else."""
    with pytest.raises(InvalidValue):
        error_codes(value)


def test_errors_go_to_the_default_backend_at_its_first_port() -> None:
    """ "In case the service has multiple ports, the first one is the one which will receive the backend traffic." """
    pages, upstream = _pages_of(
        service("web"), endpoints("web", "10.0.0.1"),
        service("errors", ("first", 8080), ("second", 9090)), endpoints("errors", "10.0.0.9", ports=(("first", 80), ("second", 90))),
        ingress("shop", rule("a.test", path("/")), annotations={NGINX + "custom-http-errors": "404,503", NGINX + "default-backend": "errors"}),
    )
    assert pages is not None and upstream == "default/web:80"
    assert pages.codes == {404, 503} and pages.backend is not None and pages.backend.endpoints == (("10.0.0.9", 80),)
    assert pages.fields == b"X-Namespace: default\r\nX-Ingress-Name: shop\r\nX-Service-Name: web\r\nX-Service-Port: 80\r\n"
    assert pages.replaces(404, upstream_sent=True) and pages.replaces(503, upstream_sent=False) and not pages.replaces(500, True)


def test_a_route_without_endpoints_goes_to_the_default_backend() -> None:
    """ "This service will be used to handle the response when the configured service in the Ingress rule does not have any active endpoints." """
    pages, upstream = _pages_of(
        service("web"), service("errors"), endpoints("errors", "10.0.0.9"),
        ingress("shop", rule("a.test", path("/")), annotations={NGINX + "default-backend": "errors"}),
    )
    assert upstream == "default/errors:80" and pages is not None and pages.fallback and not pages.codes


def test_a_default_backend_without_endpoints_is_not_used_and_reported() -> None:
    """ingress-nginx: "custom backend is valid only if contains at least one endpoint"."""
    annotations = {NGINX + "custom-http-errors": "404", NGINX + "default-backend": "errors"}
    objects = (service("web"), endpoints("web", "10.0.0.1"), service("errors"), ingress("shop", rule("a.test", path("/")), annotations=annotations))
    pages, _ = _pages_of(*objects)
    assert pages is not None and pages.backend is None and pages.codes == {404}
    assert ("default/shop", "NoEndpoints") in problems(table(*objects))


def test_a_missing_default_backend_is_reported_once() -> None:
    objects = (
        service("web"), endpoints("web", "10.0.0.1"),
        ingress("shop", rule("a.test", path("/"), path("/b")), annotations={NGINX + "default-backend": "gone"}),
    )
    assert problems(table(*objects)).count(("default/shop", "ServiceNotFound")) == 1


def test_errors_without_a_default_backend_are_reported() -> None:
    """twingress has no global default backend: the codes get its own page, and the operator is told."""
    objects = (service("web"), endpoints("web", "10.0.0.1"), ingress("shop", rule("a.test", path("/")), annotations={NGINX + "custom-http-errors": "404"}))
    pages, _ = _pages_of(*objects)
    assert pages is not None and pages.backend is None
    assert ("default/shop", "UnsupportedAnnotation") in problems(table(*objects))


def test_disabled_interception_replaces_only_the_proxys_own_errors() -> None:
    """e2e disableproxyintercepterrors.go: the upstream's 404 reaches the client as it is."""
    pages, _ = _pages_of(
        service("web"), endpoints("web", "10.0.0.1"), service("errors"), endpoints("errors", "10.0.0.9"),
        ingress("shop", rule("a.test", path("/")), annotations={
            NGINX + "custom-http-errors": "404,502", NGINX + "default-backend": "errors", NGINX + "disable-proxy-intercept-errors": "true",
        }),
    )
    assert pages is not None and not pages.replaces(404, upstream_sent=True) and pages.replaces(502, upstream_sent=False)


def _request(block: bytes, method: bytes = b"POST", target: bytes = b"/cart?x=1") -> h1.Head:
    return h1.Head((1, 1), block, frozenset(), h1.Framing(), method=method, target=target, host=b"a.test")


def test_the_error_backend_is_asked_for_slash_with_nginx_fields() -> None:
    """The @custom location: the client's fields, rewrite (.*) / break, X-* fields and Host $best_http_host; no body."""
    pages = ErrorPages(frozenset({404}), None, b"X-Namespace: ns\r\n")
    block = b"Host: a.test\r\nAccept: application/json\r\nContent-Length: 5\r\nX-Code: 200\r\nX-Request-ID: abc\r\nCookie: a=1\r\n"
    head = error_request_head(pages, 404, _request(block), "192.0.2.1")
    assert head == (
        b"POST / HTTP/1.1\r\nHost: a.test\r\nAccept: application/json\r\nCookie: a=1\r\n"
        b"X-Code: 404\r\nX-Format: application/json\r\nX-Namespace: ns\r\nX-Request-ID: abc\r\n"
        b"X-Original-URI: /cart?x=1\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"
    )


def test_a_request_id_is_made_when_the_client_has_none() -> None:
    head = error_request_head(ErrorPages(frozenset({404}), None, b""), 404, _request(b"Host: a.test\r\n"), "192.0.2.1")
    request_id = next(line for line in head.split(b"\r\n") if line.startswith(b"X-Request-ID: "))[14:]
    assert len(request_id) == 32 and int(request_id, 16) >= 0


def test_the_fallback_request_carries_x_code_503() -> None:
    """The template's custom-default-backend block: X-Code 503 and the other fields (an empty X-Format is not sent), the request otherwise unchanged."""
    pages = ErrorPages(frozenset(), None, b"X-Service-Name: web\r\n", fallback=True)
    forwarded = b"GET /cart HTTP/1.1\r\nHost: a.test\r\nX-Code: 1\r\nX-Request-ID: r1\r\n\r\n"
    assert fallback_head(pages, forwarded, _request(b"Host: a.test\r\nX-Request-ID: r1\r\n")) == (
        b"GET /cart HTTP/1.1\r\nHost: a.test\r\nX-Code: 503\r\nX-Service-Name: web\r\nX-Request-ID: r1\r\n\r\n"
    )
