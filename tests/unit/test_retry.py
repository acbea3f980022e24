"""
Tests for passing a failed request to the next endpoint (L{ingress.proxy.request.retry}, L{ingress.routing.policies.retry}).

ingress-nginx's proxy-next-upstream, -tries and -timeout (annotations page, "Custom timeouts"), with
nginx's proxy_next_upstream rules: non-idempotent requests that reached an endpoint are not passed on
without non_idempotent, "off" disables it, tries and timeout bound it.
"""

from __future__ import annotations

import pytest

from ingress.proxy.message import h1
from ingress.proxy.request.retry import may_retry
from ingress.routing.policies.retry import Retry
from tests.unit.objects import ingress, path, problems, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
GET = h1.parse_request_head(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 100)
POST = h1.parse_request_head(b"POST / HTTP/1.1\r\nHost: a\r\n\r\n", 100)
POST_BODY = h1.parse_request_head(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n", 100)
DEFAULT = Retry()
STATUSES = Retry.from_conditions(("error", "timeout", "http_502", "http_503"), 3, 0)
GATEWAY = Retry.from_gateway((500, 502), 3, 0.1)


@pytest.mark.parametrize(
    ("policy", "cause", "request_head", "attempts", "endpoints", "reused", "elapsed", "expected"),
    [
        # without a policy: twingress's own rule
        (None, "connect-error", POST_BODY, 1, 2, False, 0, True),
        (None, "connect-error", GET, 2, 3, False, 0, False),
        (None, "error", GET, 1, 1, True, 0, True),  # a stale pooled connection
        (None, "error", POST, 1, 2, False, 0, False),
        (None, "timeout", GET, 1, 2, False, 0, False),
        (None, "http_503", GET, 1, 2, False, 0, False),
        # ingress-nginx's defaults: error timeout, 3 tries
        (DEFAULT, "timeout", GET, 1, 3, False, 0, True),
        (DEFAULT, "timeout", GET, 3, 5, False, 0, False),  # tries
        (DEFAULT, "error", GET, 2, 2, False, 0, False),  # each endpoint once
        (DEFAULT, "http_503", GET, 1, 3, False, 0, False),
        (DEFAULT, "timeout", POST, 1, 3, False, 0, False),  # sent, not idempotent
        (DEFAULT, "connect-timeout", POST_BODY, 1, 3, False, 0, True),  # nothing was sent
        (DEFAULT, "invalid_header", GET, 1, 3, False, 0, False),
        (STATUSES, "http_503", GET, 1, 3, False, 0, True),
        (STATUSES, "http_500", GET, 1, 3, False, 0, False),
        (STATUSES, "http_503", POST_BODY, 1, 3, False, 0, False),  # the body streamed: it cannot be sent again
        (Retry.from_conditions(("http_503", "non_idempotent"), 3, 0), "http_503", POST, 1, 3, False, 0, True),
        (Retry.from_conditions(("error", "off"), 3, 0), "connect-error", GET, 1, 3, False, 0, False),
        (Retry.from_conditions(("error",), 0, 0), "error", GET, 4, 5, False, 0, True),  # tries 0: no limit but the endpoints
        (Retry.from_conditions(("timeout",), 3, 10), "timeout", GET, 1, 3, False, 10.5, False),  # the time limit
        # Gateway API (GEP-1731): attempts counts retries; the one endpoint may be tried again; codes only
        (GATEWAY, "http_500", GET, 3, 1, False, 0, True),
        (GATEWAY, "http_500", GET, 4, 1, False, 0, False),
        (GATEWAY, "http_503", GET, 1, 1, False, 0, False),
        (GATEWAY, "connect-error", GET, 1, 1, False, 0, True),
        (GATEWAY, "timeout", GET, 1, 2, False, 0, False),  # a backend timeout is HTTPRouteRetryBackendTimeout: not claimed
        (GATEWAY, "http_500", POST, 1, 2, False, 0, False),  # nginx's rule kept: a non-idempotent request that reached a backend
        (Retry.from_gateway((500,), 0, None), "http_500", GET, 1, 2, False, 0, False),
    ],
)
def test_may_retry(policy, cause, request_head, attempts, endpoints, reused, elapsed, expected) -> None:  # type: ignore[no-untyped-def]
    assert may_retry(policy, cause, request_head, attempts, endpoints, reused, elapsed) is expected


def test_the_annotations() -> None:
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "proxy-next-upstream": "error http_502 non_idempotent", NGINX + "proxy-next-upstream-tries": "2"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None
    assert route.policies.retry == Retry(on=frozenset({"error", "http_502"}), statuses=frozenset({502}), non_idempotent=True, tries=2, timeout=0.0)


def test_tries_alone_keeps_the_default_conditions() -> None:
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "proxy-next-upstream-tries": "5"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.retry == Retry(tries=5)


def test_an_unknown_condition_is_invalid() -> None:
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "proxy-next-upstream": "error http_418"}))
    assert routes.table.match("a.test", "/") is None and ("default/web", "InvalidAnnotation") in problems(routes)


def test_a_gateway_rule_s_retry_is_the_route_s_retry_policy() -> None:
    """GEP-1731's fields in the retry policy proxy-next-upstream compiles to; attempts unset: one retry (implementation-specific)."""
    assert Retry.from_gateway((500,), None, None) == Retry(on=frozenset({"error"}), statuses=frozenset({500}), tries=2, same_endpoint=True)
    assert Retry.from_gateway((503,), 2, 0.25).backoff == 0.25
