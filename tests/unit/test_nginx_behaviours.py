"""
The routing side of ingress-nginx behaviours (the proxy side: tests/proxy/test_nginx_behaviours.py):
generate-request-id, the ConfigMap's custom-http-errors and global-allowed-response-headers, and the
annotations x-forwarded-prefix, satisfy and custom-headers, compiled into the table.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ingress.proxy.message import h1
from ingress.proxy.request import requestid
from ingress.routing import RoutingTable
from ingress.routing.policies.headers import header_changes, merged
from ingress.routing.report import Built
from ingress.routing.route import Policies
from tests.unit.objects import ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
KEY = ("ingress-nginx", "ingress-nginx-controller")
BASIC = {"auth-type": "basic", "auth-secret": "basic-auth"}
AUTH_SECRET = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "basic-auth", "namespace": "default"},
               "stringData": {"auth": "ann:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n"}}


def _config_map(name: str, data: dict[str, str], namespace: str = "ingress-nginx") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def _table(config: Optional[dict[str, str]], annotations: Optional[dict[str, str]] = None, *extra: dict[str, Any]) -> Built:
    plain = ingress("plain", rule("plain.test", path("/")), annotations={NGINX + k: v for k, v in (annotations or {}).items()})
    objects = [plain, AUTH_SECRET, *extra] + ([_config_map(KEY[1], config)] if config is not None else [])
    return table(*objects, nginx_configmap=KEY if config is not None else None)


def _policies(routes: RoutingTable) -> Policies:
    route = routes.match("plain.test", "/")
    assert route is not None and route.policies is not None
    return route.policies


@pytest.mark.parametrize(("config", "expected"), [(None, True), ({}, True), ({"generate-request-id": "false"}, False), ({"generate-request-id": "true"}, True)])
def test_generate_request_id(config: Optional[dict[str, str]], expected: bool) -> None:
    """configmap.md "generate-request-id": on unless the ConfigMap turns it off (also without a ConfigMap)."""
    assert _table(config).table.request_ids is expected


def test_x_forwarded_prefix_alone() -> None:
    """annotations.md "X-Forwarded-Prefix Header": the value alone, no rewrite-target needed."""
    policies = _policies(_table(None, {"x-forwarded-prefix": "/test/value"}).table)
    assert policies.forwarded_prefix == "/test/value" and policies.rewrite is None
    assert policies.to_json()["forwardedPrefix"] == "/test/value"


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({**BASIC, "satisfy": "any", "whitelist-source-range": "10.0.0.0/8"}, True),
        ({**BASIC, "satisfy": "all", "whitelist-source-range": "10.0.0.0/8"}, False),
        ({**BASIC, "whitelist-source-range": "10.0.0.0/8"}, False),
        ({"satisfy": "any", "whitelist-source-range": "10.0.0.0/8"}, False),  # no auth: the allow-list is the only guard
    ],
)
def test_satisfy_any_needs_an_auth(annotations: dict[str, str], expected: bool) -> None:
    """annotations.md "Satisfy": "any" makes one guard enough, which only means something beside an auth."""
    assert _policies(_table(None, annotations).table).satisfy_any is expected


def test_satisfy_value_that_cannot_be_read_closes_the_routes() -> None:
    """satisfy guards access: a value other than any/all closes the routes (503) rather than guess."""
    routes = _table(None, {**BASIC, "satisfy": "some"})
    policies = _policies(routes.table)
    assert policies.deny is not None and policies.deny.status == 503
    assert any(p.reason == "InvalidAnnotation" and "satisfy" in p.message for p in routes.report.problems)


def test_custom_headers_with_and_without_the_allow_list() -> None:
    """
    internal/ingress/annotations/customheaders: with the controller ConfigMap, each name must be in
    global-allowed-response-headers (else 503); without --nginx-configmap any name may be set.
    """
    fields = _config_map("custom", {"My-Custom-Header": "42"}, "default")
    free = _policies(_table(None, {"custom-headers": "default/custom"}, fields).table)
    assert free.response_headers is not None and free.response_headers.lines == b"My-Custom-Header: 42\r\n" and free.deny is None
    allowed = _policies(_table({"global-allowed-response-headers": "my-custom-header"}, {"custom-headers": "custom"}, fields).table)
    assert allowed.response_headers is not None and allowed.deny is None
    refused = _table({}, {"custom-headers": "default/custom"}, fields)
    policies = _policies(refused.table)
    assert policies.deny is not None and policies.deny.status == 503
    assert any(p.reason == "InvalidCustomHeaders" and "global-allowed-response-headers" in p.message for p in refused.report.problems)


def test_custom_headers_over_add_headers() -> None:
    """The Ingress's custom-headers replace the ConfigMap's add-headers field of the same name, and keep the rest."""
    base = header_changes([("X-A", "1"), ("X-B", "2")])
    over = header_changes([("x-b", "3")])
    both = merged(base, over)
    assert both is not None and both.fields == (("X-A", "1"), ("x-b", "3"))
    assert merged(None, over) is over and merged(base, None) is base


def test_global_custom_http_errors() -> None:
    """configmap.md "custom-http-errors": every route's, unless its Ingress sets its own or disables interception."""
    pages = _policies(_table({"custom-http-errors": "404,503"}).table).error_pages
    assert pages is not None and pages.codes == frozenset({404, 503}) and pages.backend is None
    own = _policies(_table({"custom-http-errors": "404,503"}, {"custom-http-errors": "500"}).table).error_pages
    assert own is not None and own.codes == frozenset({500})
    route = _table({"custom-http-errors": "404"}, {"disable-proxy-intercept-errors": "true"}).table.match("plain.test", "/")
    assert route is not None and (route.policies is None or route.policies.error_pages is None)


@pytest.mark.parametrize(
    ("value", "tls", "host", "port", "authority", "path"),
    [
        ("https://test.env.com$request_uri", True, "test.env.com", 443, "test.env.com", (("var", "request_uri"),)),
        ("https://test.env.com/$request_uri", True, "test.env.com", 443, "test.env.com", (("text", "/"), ("var", "request_uri"))),
        ("http://localhost/mirror", False, "localhost", 80, "localhost", (("text", "/mirror"),)),
        ("http://10.0.0.1:8080", False, "10.0.0.1", 8080, "10.0.0.1:8080", ()),
    ],
)
def test_mirror_target_urls(value: str, tls: bool, host: str, port: int, authority: str, path: tuple[tuple[str, str], ...]) -> None:
    """annotations.md "Mirror" and e2e annotations/mirror.go: the URLs they use."""
    mirror = _policies(_table(None, {"mirror-target": value}).table).mirror
    assert mirror is not None and mirror.targets == () and len(mirror.urls) == 1
    url = mirror.urls[0]
    assert (url.tls, url.host, url.port, url.authority, url.path, url.body) == (tls, host, port, authority, path, True)


def test_mirror_host_and_body() -> None:
    mirror = _policies(_table(None, {"mirror-target": "http://1.2.3.4$request_uri", "mirror-host": "test.env.com", "mirror-request-body": "off"}).table).mirror
    assert mirror is not None and (mirror.urls[0].authority, mirror.urls[0].body) == ("test.env.com", False)


@pytest.mark.parametrize("value", ["ftp://x/y", "http://", "http://x/$upstream_addr", "http://x/a b", "http://x:70000/"])
def test_mirror_target_that_cannot_be_read(value: str) -> None:
    """Not an http(s) URL, or a variable twingress does not compute: the Ingress's paths are not served, and it is said why."""
    routes = _table(None, {"mirror-target": value})
    assert routes.table.match("plain.test", "/") is None
    assert any(p.reason == "InvalidAnnotation" and "mirror-target" in p.message for p in routes.report.problems)


@pytest.mark.parametrize(
    ("fields", "kept"),
    [
        (b"Host: a\r\n", None),
        (b"Host: a\r\nX-Request-ID: given\r\n", b"given"),
        (b"x-request-id: lower\r\nHost: a\r\n", b"lower"),
        (b"Host: a\r\nX-REQUEST-Id: mixed\r\n", b"mixed"),
        (b"Host: a\r\nX-Not-X-Request-ID: other\r\n", None),  # a longer name that ends the same is not it
        (b"Host: a\r\nX-Not-X-Request-ID: other\r\nX-Request-Id: late\r\n", b"late"),
    ],
)
def test_request_id_tag(fields: bytes, kept: Optional[bytes]) -> None:
    """nginx.tmpl's C{map $http_x_request_id $req_id}: the client's id when it sent one, else 32 new hex digits."""
    head = h1.parse_request_head(b"GET / HTTP/1.1\r\n" + fields + b"\r\n")
    requestid.tag(head)
    found = requestid.request_id(head)
    if kept is None:
        assert len(found) == 32 and all(c in b"0123456789abcdef" for c in found)
        assert head.block.endswith(b"X-Request-ID: %s\r\n" % found)
    else:
        assert found == kept and head.block.count(b"\r\n") == fields.count(b"\r\n")
