"""
Tests for canary Ingresses (L{ingress.routing.route.Canary} and their building).

The semantics checked are ingress-nginx's annotations page, section "Canary"
(docs/user-guide/nginx-configuration/annotations.md): the annotations, the
precedence "canary-by-header -> canary-by-cookie -> canary-weight", weights from
0 to the total, and "a canary Ingress only adds to a main Ingress" with "a
maximum of one canary ingress ... per Ingress rule".
"""

from __future__ import annotations

import re
from typing import Optional

import pytest

from ingress.model import ObjectRef
from ingress.routing.report import Built
from ingress.routing.route import Canary, Route
from ingress.routing.upstream import Upstream
from tests.unit.objects import T0, T1, T2, ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
_ROUTE = Route("default/canary", ObjectRef("Ingress", "default", "canary"), Upstream("default/canary:80", ()))


def _canary(**options: object) -> Canary:
    return Canary(route=_ROUTE, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("canary", "header", "cookie", "roll", "chosen"),
    [
        # canary-by-header: always / never decide; any other value falls through to the cookie, then the weight
        (_canary(by_header=b"x-canary"), b"always", None, 100, True),
        (_canary(by_header=b"x-canary", weight=100), b"never", None, 1, False),
        (_canary(by_header=b"x-canary", by_cookie="c", weight=100), b"never", "always", 1, False),  # header before cookie
        (_canary(by_header=b"x-canary", weight=0), b"maybe", None, 1, False),
        (_canary(by_header=b"x-canary", weight=100), b"maybe", None, 100, True),
        # canary-by-header-value replaces always; never then means nothing special
        (_canary(by_header=b"x-canary", header_value=b"v2"), b"v2", None, 100, True),
        (_canary(by_header=b"x-canary", header_value=b"v2"), b"always", None, 100, False),
        (_canary(by_header=b"x-canary", header_value=b"v2", weight=100), b"never", None, 1, True),
        # canary-by-header-pattern, searched (ngx.re.match is not anchored); ignored when a value is set
        (_canary(by_header=b"x-canary", header_pattern=re.compile(rb"beta|gamma")), b"user-beta-1", None, 100, True),
        (_canary(by_header=b"x-canary", header_pattern=re.compile(rb"beta")), b"alpha", None, 100, False),
        (_canary(by_header=b"x-canary", header_value=b"v2", header_pattern=re.compile(rb".*")), b"v3", None, 100, False),
        # canary-by-cookie
        (_canary(by_cookie="canary"), None, "always", 100, True),
        (_canary(by_cookie="canary", weight=100), None, "never", 1, False),
        (_canary(by_cookie="canary", weight=0), None, "other", 1, False),
        # canary-weight: a roll from 1 to the total at or below the weight
        (_canary(weight=0), None, None, 1, False),
        (_canary(weight=100), None, None, 100, True),
        (_canary(weight=30), None, None, 30, True),
        (_canary(weight=30), None, None, 31, False),
    ],
)
def test_the_precedence(canary: Canary, header: Optional[bytes], cookie: Optional[str], roll: int, chosen: bool) -> None:
    assert canary.chosen(header, cookie, roll) is chosen


@pytest.mark.parametrize(("weight", "total"), [(0, 100), (1, 100), (25, 100), (100, 100), (1, 1000), (999, 1000), (1000, 1000)])
def test_the_weight_is_the_share_of_rolls(weight: int, total: int) -> None:
    canary = _canary(weight=weight, weight_total=total)
    assert sum(canary.chosen(None, None, roll) for roll in range(1, total + 1)) == weight


def _tables(*extra: dict, main_annotations: Optional[dict[str, str]] = None) -> Built:
    return table(
        ingress("main", rule("a.test", path("/", "stable"), path("/api", "stable-api")), annotations=main_annotations, created=T0),
        *extra,
    )


def _canary_ingress(name: str, annotations: dict[str, str], *paths: dict, created: str = T1, host: str = "a.test") -> dict:
    return ingress(name, rule(host, *(paths or (path("/", name),))), annotations={NGINX + "canary": "true", **{NGINX + k: v for k, v in annotations.items()}}, created=created)


def test_a_canary_adds_its_backend_to_the_main_route_of_its_host_and_path() -> None:
    routes = _tables(_canary_ingress("v2", {"canary-weight": "20", "canary-by-header": "X-Canary"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.name == "default/main" and route.upstream.key == "default/stable:80"
    assert route.policies is not None and route.policies.canary is not None
    canary = route.policies.canary
    assert (canary.route.name, canary.route.upstream.key) == ("default/v2", "default/v2:80")
    assert (canary.by_header, canary.weight, canary.weight_total) == (b"x-canary", 20, 100)
    other = routes.table.match("a.test", "/api/x")  # the canary has no /api path: that route has none
    assert other is not None and other.policies is None


def test_a_canary_inherits_the_main_routes_other_policies() -> None:
    """"all the other non-canary annotations will be ignored (inherited from the corresponding main ingress)"."""
    routes = _tables(
        _canary_ingress("v2", {"canary-weight": "50", "proxy-body-size": "1k"}),
        main_annotations={NGINX + "upstream-vhost": "stable.internal"},
    )
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.canary is not None
    canary_route = route.policies.canary.route
    assert canary_route.policies is not None and canary_route.policies.upstream_host == "stable.internal"
    assert canary_route.policies.limits is None  # the canary's own proxy-body-size is not its route's


def test_a_canary_without_main_ingress_is_not_served_and_says_why() -> None:
    routes = _tables(_canary_ingress("lonely", {"canary-weight": "100"}, host="b.test"))
    assert routes.table.match("b.test", "/") is None
    assert [(p.ref.name, p.reason) for p in routes.report.problems if p.reason != "ServiceNotFound"] == [("lonely", "CanaryWithoutMain")]


def test_one_canary_per_route_the_oldest() -> None:
    routes = _tables(_canary_ingress("first", {"canary-weight": "10"}, created=T1), _canary_ingress("second", {"canary-weight": "90"}, created=T2))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.canary is not None
    assert route.policies.canary.route.name == "default/first"
    assert [(p.ref.name, p.reason) for p in routes.report.problems if p.reason == "Conflict"] == [("second", "Conflict")]


def test_a_canary_on_a_regex_host_joins_the_same_pattern() -> None:
    routes = table(
        ingress("main", rule("a.test", path("/v[0-9]+/", "stable", kind="ImplementationSpecific")), annotations={NGINX + "use-regex": "true"}, created=T0),
        _canary_ingress("v2", {"canary-by-cookie": "beta"}, path("/v[0-9]+/", "v2", kind="ImplementationSpecific")),
    )
    route = routes.table.match("a.test", "/v1/x")
    assert route is not None and route.policies is not None and route.policies.canary is not None
    assert route.policies.canary.by_cookie == "beta"


@pytest.mark.parametrize(
    "annotations",
    [{"canary-weight": "101"}, {"canary-weight": "500", "canary-weight-total": "400"}, {"canary-weight": "-1"}, {"canary-by-header-pattern": "("}, {"canary-by-header": "X Canary"}],
)
def test_an_invalid_canary_leaves_the_main_route_alone(annotations: dict[str, str]) -> None:
    routes = _tables(_canary_ingress("bad", annotations))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is None
    assert [p.reason for p in routes.report.problems if p.ref.name == "bad"] == ["InvalidAnnotation"]


def test_the_weight_total_can_be_raised() -> None:
    routes = _tables(_canary_ingress("v2", {"canary-weight": "5", "canary-weight-total": "1000"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.canary is not None
    assert (route.policies.canary.weight, route.policies.canary.weight_total) == (5, 1000)


def test_the_canary_keeps_its_own_affinity_hashing_and_balancing() -> None:
    """"except load-balance, upstream-hash-by, and annotations related to session affinity": those are the canary's own."""
    routes = _tables(
        _canary_ingress("v2", {"canary-weight": "50", "affinity": "cookie", "session-cookie-name": "V2", "load-balance": "ewma"}),
        main_annotations={NGINX + "affinity": "cookie", NGINX + "upstream-hash-by": "$request_uri"},
    )
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.canary is not None
    own = route.policies.canary.route.policies
    assert own is not None and own.affinity is not None and own.affinity.cookie == "V2"
    assert (own.hash_by, own.load_balance, route.policies.canary.sticky) == (None, "ewma", True)


def test_legacy_canary_behaviour_ignores_affinity() -> None:
    routes = _tables(_canary_ingress("v2", {"canary-weight": "50", "affinity": "cookie", "affinity-canary-behavior": "legacy"}))
    route = routes.table.match("a.test", "/")
    assert route is not None and route.policies is not None and route.policies.canary is not None
    canary = route.policies.canary
    assert not canary.sticky and canary.route.policies is not None and canary.route.policies.affinity is None
