# -*- test-case-name: tests.proxy.test_external_auth -*-
"""
The guards that may hold a request before it goes upstream: rate limits, basic auth, then external auth.

Both are asked off the reactor's critical path (a password hash on a thread pool,
an auth service over the network) and give one L{Verdict}, so the HTTP/1.1 and
HTTP/2 connections hold a request the same way whichever guards its route has.
Both must let it through (nginx's C{satisfy all}); the password is checked
first, so a request without one never reaches the auth service.  With
C{satisfy: any} one guard suffices: a client of the allowed source ranges
passes without credentials, else a good password, else the auth service's
yes; when none lets it through, a 401 wins over a 403 (nginx keeps the
access phase's 401).  Rate limits come
before both (nginx's preaccess phase): a refused request costs no hash and no
question to a service.  They answer at once in a single process, and after a
question to the primary in a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime

from ingress.proxy.message import h1
from ingress.proxy.request.auth import PasswordChecker
from ingress.proxy.request.client import ClientSide
from ingress.proxy.request.extauth import ExternalAuthChecker, Verdict
from ingress.proxy.request.forwarding import ForwardedFor
from ingress.proxy.request.ratelimit import Rates, RequestRates
from ingress.routing.policies.extauth import ExternalAuth
from ingress.routing.route import Policies

PASSED = Verdict()
Outcome = Union[Verdict, Deferred[Verdict]]


def _then(value: Any, step: Callable[..., Outcome], *args: Any) -> Outcome:
    """C{step(value, *args)} now, or when C{value} (a Deferred) fires: answers given at once stay synchronous."""
    if isinstance(value, Deferred):
        later: Deferred[Verdict] = value.addCallback(step, *args)
        return later
    return step(value, *args)


class GuardRequest(NamedTuple):
    """
    One request the guards decide on, as each of their steps reads it: made once per guarded request
    (L{Guards.check}), never for a route without guards (L{Guards.wanted} is false there).  A named
    tuple: frozen and without an instance dict, like a frozen slots dataclass, but made in about a
    third of its time (whose init sets each field through object.__setattr__: a tenth of a basic-auth
    check whose password is remembered).
    """

    policies: Policies  # the route's: its rate limit, basic and external auth, satisfy any
    request: h1.Head
    client_ip: str
    scheme: bytes  # what the client spoke (the auth service's X-Forwarded-Proto)
    timeout: float  # bounds the wait for an auth service


class Guards:
    """The listeners' shared checkers."""

    def __init__(self, reactor: IReactorTime, rates: Optional[Rates] = None) -> None:
        self.rates: Rates = rates if rates is not None else RequestRates()
        self.passwords = PasswordChecker(reactor)  # basic auth: hashes checked off the reactor thread
        self.external = ExternalAuthChecker(reactor)

    @staticmethod
    def wanted(policies: Policies) -> bool:
        return policies.rate_limit is not None or policies.basic_auth is not None or policies.external_auth is not None

    def wait(self, policies: Policies, request: h1.Head, forwarded: ForwardedFor, timeout: float, client: ClientSide, then: Callable[[Verdict], None]) -> None:
        """
        The verdict on C{request}, to C{then}; its client reads no more of it while the verdict takes time.  One
        known at once pauses nothing (a pause and a resume are two changes of the reactor's interest in the socket).
        """
        checking = self.check(policies, request, forwarded.ip, forwarded.scheme, timeout)
        if not checking.called:
            client.pause_reading("auth")
        checking.addCallback(then)

    def check(self, policies: Policies, request: h1.Head, client_ip: str, scheme: bytes, timeout: float) -> Deferred[Verdict]:
        """The verdict on C{request}: rate limits first, then the password and the auth service; C{timeout} bounds the wait for one."""
        asked = GuardRequest(policies, request, client_ip, scheme, timeout)  # once: every step reads it
        rate = policies.rate_limit
        if rate is None or rate.exempts(client_ip):
            return self._authenticate(asked)
        verdict = _then(self.rates.take(rate.zones, client_ip) if rate.zones else True, self._after_rate, asked)
        return verdict if isinstance(verdict, Deferred) else succeed(verdict)

    def leave(self, hold: tuple[str, str]) -> None:
        """A request that took a place under limit-connections (L{Verdict.hold}) is over."""
        self.rates.leave(*hold)

    def _after_rate(self, allowed: bool, asked: GuardRequest) -> Outcome:
        rate = asked.policies.rate_limit
        assert rate is not None
        if not allowed:
            return Verdict(rate.status, "rate-limit")
        if not rate.connections:
            return self._authenticate(asked)
        entered = self.rates.enter(rate.connection_zone, rate.connections, asked.client_ip)
        return _then(entered, self._after_enter, asked)

    def _after_enter(self, entered: bool, asked: GuardRequest) -> Outcome:
        rate = asked.policies.rate_limit
        assert rate is not None
        if not entered:
            return Verdict(rate.connection_status, "connection-limit")
        return _then(self._authenticate(asked), self._holding, (rate.connection_zone, asked.client_ip))

    def _holding(self, verdict: Verdict, hold: tuple[str, str]) -> Verdict:
        """The place taken under limit-connections goes with a passing verdict, and is left at once otherwise."""
        if verdict.status:
            self.rates.leave(*hold)
            return verdict
        passing = Verdict(0, "", b"", verdict.request_fields, verdict.drop, verdict.cookies)
        passing.hold = hold
        return passing

    def _authenticate(self, asked: GuardRequest) -> Deferred[Verdict]:
        policies = asked.policies
        if policies.satisfy_any:
            return self._any(asked)
        if policies.basic_auth is None:
            return self._external(asked)
        checking = self.passwords.check(policies.basic_auth, asked.request.block)
        return checking.addCallback(self._after_password, asked)

    def _after_password(self, ok: bool, asked: GuardRequest) -> Outcome:
        if not ok:
            assert asked.policies.basic_auth is not None
            return Verdict(401, "basic-auth", asked.policies.basic_auth.challenge)
        return self._external(asked)

    def _any(self, asked: GuardRequest) -> Deferred[Verdict]:
        """satisfy any: the source ranges, then the password, then the auth service; the first yes lets the request through."""
        policies = asked.policies
        ranges = policies.source_ranges
        if ranges is not None and ranges.permits(asked.client_ip):
            return succeed(PASSED)
        if policies.basic_auth is None:
            return self._external(asked)
        checking = self.passwords.check(policies.basic_auth, asked.request.block)
        return checking.addCallback(self._after_password_any, asked)

    def _after_password_any(self, ok: bool, asked: GuardRequest) -> Outcome:
        if ok:
            return PASSED
        policies = asked.policies
        assert policies.basic_auth is not None
        refused = Verdict(401, "basic-auth", policies.basic_auth.challenge)
        if policies.external_auth is None:
            return refused
        answer = self._ask_service(policies.external_auth, asked)
        return answer.addCallback(lambda verdict: refused if verdict.status == 403 else verdict)

    def _external(self, asked: GuardRequest) -> Deferred[Verdict]:
        external_auth = asked.policies.external_auth
        if external_auth is None:
            return succeed(PASSED)
        return self._ask_service(external_auth, asked)

    def _ask_service(self, external_auth: ExternalAuth, asked: GuardRequest) -> Deferred[Verdict]:
        """The auth service's verdict on C{asked} (L{ingress.proxy.request.extauth})."""
        return self.external.check(external_auth, asked.request, asked.client_ip, asked.scheme, asked.timeout)
