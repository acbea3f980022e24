"""
The guards' sequence (ingress.proxy.request.guards), in memory: rate limits, then the password, then the
auth service, each step reading the one L{GuardRequest} made for the request; the password check and the
auth service are fakes that answer at once (their own tests are test_basic_auth and test_external_auth).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.internet.testing import MemoryReactorClock

from ingress.proxy.message.h1 import parse_request_head
from ingress.proxy.request.extauth import Verdict
from ingress.proxy.request.guards import GuardRequest, Guards
from ingress.proxy.request.ratelimit import RequestRates
from ingress.routing.policies.access import SourceRanges
from ingress.routing.policies.auth import BasicAuth
from ingress.routing.policies.extauth import ExternalAuth
from ingress.routing.policies.ratelimit import RateLimit, Zone
from ingress.routing.route import Policies

GOOD = b"Authorization: Basic good\r\n"
RATE = RateLimit(zones=(Zone("web/rps", 1.0, 0),), status=429, connections=1, connection_zone="web/conn")
BASIC = BasicAuth("realm", (("user", "hash"),), "default/users")
SERVICE = ExternalAuth(url=(), source="http://auth.test/")
STEPS = ("_after_rate", "_after_enter", "_authenticate", "_after_password", "_any", "_after_password_any", "_external", "_ask_service")


class Passwords:
    """The password check, answering at once: the block holds the good credentials or not."""

    def __init__(self) -> None:
        self.asked = 0

    def check(self, auth: BasicAuth, block: bytes) -> Deferred[bool]:
        self.asked += 1
        return succeed(GOOD in block)


class Service:
    """The auth service, answering C{status} (0: let through) and keeping what it was asked."""

    def __init__(self, status: int = 0) -> None:
        self.status = status
        self.asked: list[tuple[Any, ...]] = []

    def check(self, auth: ExternalAuth, request: Any, client_ip: str, scheme: bytes, timeout: float) -> Deferred[Verdict]:
        self.asked.append((auth, request, client_ip, scheme, timeout))
        return succeed(Verdict(self.status, "external-auth" if self.status else ""))


def _guards(service_status: int = 0) -> tuple[Guards, Passwords, Service]:
    guards = Guards(MemoryReactorClock(), RequestRates(lambda: 1000.0))  # a clock that stands still: no rate drains
    passwords, service = Passwords(), Service(service_status)
    guards.passwords, guards.external = passwords, service  # type: ignore[assignment]  # fakes of their check()
    return guards, passwords, service


def _asked(policies: Policies, credentials: bytes = GOOD, client_ip: str = "10.0.0.1") -> GuardRequest:
    head = parse_request_head(b"GET / HTTP/1.1\r\nHost: w.test\r\n" + credentials + b"\r\n")
    return GuardRequest(policies, head, client_ip, b"https", 7.0)


def _decide(guards: Guards, asked: GuardRequest) -> Deferred[Verdict]:
    """The framings' call: check(policies, request, client_ip, scheme, timeout)."""
    return guards.check(asked.policies, asked.request, asked.client_ip, asked.scheme, asked.timeout)


def _verdict(decided: Deferred[Verdict]) -> Verdict:
    found: list[Verdict] = []
    decided.addCallback(found.append)
    assert found, "the fakes answer at once: so does the verdict"
    return found[0]


def test_every_step_reads_the_one_request_value() -> None:
    """check() makes one GuardRequest and hands that same value to each step; the auth service gets its fields."""
    guards, passwords, service = _guards()
    seen: list[tuple[str, GuardRequest]] = []
    for name in STEPS:
        step = getattr(guards, name)

        def recording(*args: Any, _step: Any = step, _name: str = name) -> Any:
            seen.extend((_name, each) for each in args if isinstance(each, GuardRequest))
            return _step(*args)

        setattr(guards, name, recording)
    asked = _asked(Policies(rate_limit=RATE, basic_auth=BASIC, external_auth=SERVICE))
    verdict = _verdict(_decide(guards, asked))
    assert (verdict.status, verdict.hold) == (0, ("web/conn", "10.0.0.1"))
    assert [name for name, _ in seen] == ["_after_rate", "_after_enter", "_authenticate", "_after_password", "_external", "_ask_service"]
    made = seen[0][1]
    assert made == asked and made is not asked  # made by check, from its five arguments
    assert all(each is made for _, each in seen)  # once: the same value at every step
    assert service.asked == [(SERVICE, asked.request, "10.0.0.1", b"https", 7.0)] and passwords.asked == 1


def test_an_auth_service_refusal() -> None:
    guards, _, service = _guards(403)
    asked = _asked(Policies(external_auth=SERVICE), client_ip="10.0.0.2")
    verdict = _verdict(_decide(guards, asked))
    assert (verdict.status, verdict.reason) == (403, "external-auth")
    assert service.asked == [(SERVICE, asked.request, "10.0.0.2", b"https", 7.0)]


@pytest.mark.parametrize(
    ("policies", "credentials", "service_status", "expected", "password_asked", "service_asked"),
    [
        pytest.param(Policies(basic_auth=BASIC, external_auth=SERVICE), b"", 0, (401, "basic-auth"), 1, 0, id="no-password-no-service-question"),
        pytest.param(Policies(basic_auth=BASIC, external_auth=SERVICE), GOOD, 403, (403, "external-auth"), 1, 1, id="both-must-pass"),
        pytest.param(Policies(basic_auth=BASIC, external_auth=SERVICE, satisfy_any=True), b"", 403, (401, "basic-auth"), 1, 1, id="any-401-beats-403"),
        pytest.param(Policies(basic_auth=BASIC, external_auth=SERVICE, satisfy_any=True), b"", 0, (0, ""), 1, 1, id="any-service-yes"),
        pytest.param(
            Policies(basic_auth=BASIC, satisfy_any=True, source_ranges=SourceRanges(allow=(ipaddress.ip_network("10.0.0.0/8"),))), b"", 0, (0, ""), 0, 0, id="any-range-first"
        ),
    ],
)
def test_the_order_of_the_checks(policies: Policies, credentials: bytes, service_status: int, expected: tuple[int, str], password_asked: int, service_asked: int) -> None:
    guards, passwords, service = _guards(service_status)
    verdict = _verdict(_decide(guards, _asked(policies, credentials)))
    assert (verdict.status, verdict.reason) == expected
    assert (passwords.asked, len(service.asked)) == (password_asked, service_asked)


def test_rate_and_connection_limits_come_first_and_a_refusal_leaves_its_place() -> None:
    guards, passwords, service = _guards(403)
    policies = Policies(rate_limit=dataclasses.replace(RATE, zones=()), external_auth=SERVICE)
    refused = _verdict(_decide(guards, _asked(policies)))  # entered, then the service says no: the place is left
    assert (refused.status, refused.hold) == (403, None)
    guards.external = Service(0)  # type: ignore[assignment]
    first = _verdict(_decide(guards, _asked(policies)))
    assert (first.status, first.hold) == (0, ("web/conn", "10.0.0.1"))
    second = _verdict(_decide(guards, _asked(policies)))  # the first still holds the one place
    assert (second.status, second.reason) == (503, "connection-limit")
    guards.leave(first.hold)
    assert _verdict(_decide(guards, _asked(policies))).status == 0
    limited = Policies(rate_limit=RATE)
    assert _verdict(_decide(guards, _asked(limited, client_ip="10.9.9.9"))).status == 0
    again = _verdict(_decide(guards, _asked(limited, client_ip="10.9.9.9")))  # the rate refuses before the place is asked for
    assert (again.status, again.reason) == (429, "rate-limit")
    assert passwords.asked == 0


def test_the_request_value_is_frozen_and_has_no_dict() -> None:
    asked = _asked(Policies())
    with pytest.raises(AttributeError):
        asked.timeout = 1.0  # type: ignore[misc]
    assert not hasattr(asked, "__dict__")
    assert not Guards.wanted(Policies(source_ranges=SourceRanges()))  # a route without guards never makes one
