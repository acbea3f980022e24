"""
Tests for cookie session affinity (L{ingress.routing.policies.affinity}, its annotations and its cookie).

ingress-nginx's annotations page, sections "Session Affinity" and "Cookie affinity", is the
specification: the cookie INGRESSCOOKIE by default, affinity-mode balanced (redistributes some
sessions when endpoints are added) or persistent (never rebalances), and the cookie attributes.
"""

from __future__ import annotations

import re

import pytest

from ingress.proxy.request.affinity import set_cookie_field
from ingress.routing.policies.affinity import Affinity, endpoint_key, persistent_target, rendezvous, samesite_none_understood
from tests.unit.objects import ingress, path, rule, table

NGINX = "nginx.ingress.kubernetes.io/"
TARGETS = [(f"10.0.0.{n}", 8080) for n in range(1, 5)]
KEYS = [f"key-{n}" for n in range(2000)]


def test_balanced_keys_stay_while_the_endpoints_stay() -> None:
    assert [rendezvous(k, TARGETS) for k in KEYS] == [rendezvous(k, list(reversed(TARGETS))) for k in KEYS]


def test_balanced_a_removed_endpoint_moves_only_its_own_clients() -> None:
    before = {k: rendezvous(k, TARGETS) for k in KEYS}
    after = {k: rendezvous(k, TARGETS[:3]) for k in KEYS}
    moved = [k for k in KEYS if before[k] != after[k]]
    assert moved and all(before[k] == TARGETS[3] for k in moved)


def test_balanced_an_added_endpoint_takes_about_its_share_and_nothing_else_moves() -> None:
    """"will redistribute some sessions if a deployment gets scaled up": 4 → 5 endpoints moves ~1/5, all to the new one."""
    grown = TARGETS + [("10.0.0.5", 8080)]
    before = {k: rendezvous(k, TARGETS) for k in KEYS}
    moved = [k for k in KEYS if rendezvous(k, grown) != before[k]]
    assert all(rendezvous(k, grown) == ("10.0.0.5", 8080) for k in moved)
    assert 0.12 * len(KEYS) < len(moved) < 0.28 * len(KEYS)


def test_persistent_keys_name_their_endpoint_until_it_is_gone() -> None:
    """"will not rebalance sessions to new servers": the key is the endpoint's; a new endpoint changes nothing."""
    key = endpoint_key(TARGETS[2])
    assert persistent_target(key, TARGETS) == TARGETS[2]
    assert persistent_target(key, TARGETS + [("10.0.0.9", 8080)]) == TARGETS[2]
    assert persistent_target(key, TARGETS[:2]) is None
    assert re.fullmatch(r"[0-9a-f]{16}", key)  # nothing readable about the address


def _affinity(annotations: dict[str, str], request_path: str = "/app", kind: str = "Prefix") -> Affinity:
    routes = table(ingress("web", rule("a.test", path(request_path if kind == "Prefix" else "/app(/|$)(.*)", kind=kind)), annotations={NGINX + k: v for k, v in annotations.items()}))
    route = routes.table.match("a.test", "/app")
    assert route is not None and route.policies is not None and route.policies.affinity is not None
    return route.policies.affinity


def test_the_defaults() -> None:
    affinity = _affinity({"affinity": "cookie"})
    assert (affinity.cookie, affinity.mode, affinity.path, affinity.secure, affinity.change_on_failure) == ("INGRESSCOOKIE", "balanced", "/app", None, False)


def test_a_regex_path_gives_the_cookie_path_slash_unless_set() -> None:
    """"Session cookie paths do not support regex"."""
    assert _affinity({"affinity": "cookie", "use-regex": "true"}, kind="ImplementationSpecific").path == "/"
    assert _affinity({"affinity": "cookie", "use-regex": "true", "session-cookie-path": "/app"}, kind="ImplementationSpecific").path == "/app"


@pytest.mark.parametrize(
    ("annotations", "https", "field"),
    [
        ({}, False, b"Set-Cookie: INGRESSCOOKIE=k|t; Path=/app; HttpOnly\r\n"),
        ({}, True, b"Set-Cookie: INGRESSCOOKIE=k|t; Path=/app; HttpOnly; Secure\r\n"),
        ({"session-cookie-secure": "false"}, True, b"Set-Cookie: INGRESSCOOKIE=k|t; Path=/app; HttpOnly\r\n"),
        (
            {
                "session-cookie-name": "route",
                "session-cookie-path": "/",
                "session-cookie-domain": "example.com",
                "session-cookie-max-age": "3600",
                "session-cookie-samesite": "Strict",
                "session-cookie-secure": "true",
            },
            False,
            b"Set-Cookie: route=k|t; Path=/; Domain=example.com; Max-Age=3600; HttpOnly; Secure; SameSite=Strict\r\n",
        ),
    ],
)
def test_the_cookie_attributes(annotations: dict[str, str], https: bool, field: bytes) -> None:
    assert set_cookie_field(_affinity({"affinity": "cookie", **annotations}), "k|t", https) == field


def test_expires_is_a_date_that_many_seconds_ahead() -> None:
    cookie = set_cookie_field(_affinity({"affinity": "cookie", "session-cookie-expires": "172800"}), "k|t", False)
    assert re.search(rb"; Expires=\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT;", cookie)


@pytest.mark.parametrize(("key", "value"), [("affinity", "ip"), ("affinity-mode", "sticky"), ("session-cookie-samesite", "lax"), ("session-cookie-name", "a b")])
def test_invalid_affinity_values_leave_the_ingress_out(key: str, value: str) -> None:
    routes = table(ingress("web", rule("a.test", path("/")), annotations={NGINX + "affinity": "cookie", NGINX + key: value}))
    assert routes.table.match("a.test", "/") is None
    assert "InvalidAnnotation" in [p.reason for p in routes.report.problems]


@pytest.mark.parametrize(
    ("agent", "understood"),
    [
        ("Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36", True),
        ("Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/66.0.3359 Safari/537.36", False),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 12_4 like Mac OS X) AppleWebKit/605.1.15 Version/12.1 Mobile Safari/604.1", False),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.1 Safari/605.1.15", False),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15", True),
        ("", True),
    ],
)
def test_samesite_none_is_left_out_for_the_clients_that_reject_it(agent: str, understood: bool) -> None:
    """session-cookie-conditional-samesite-none: Chromium's list of incompatible clients."""
    assert samesite_none_understood(agent) is understood
    affinity = _affinity({"affinity": "cookie", "session-cookie-samesite": "None", "session-cookie-conditional-samesite-none": "true"})
    assert affinity.conditional_samesite_none
    assert set_cookie_field(affinity, "k|t", True, "None" if understood else "").endswith(b"; SameSite=None\r\n" if understood else b"; Secure\r\n")
