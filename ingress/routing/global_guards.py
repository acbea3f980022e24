# -*- test-case-name: tests.unit.test_global_guards -*-
"""
The guards of the ingress-nginx controller ConfigMap, read into one value the route builder applies.

ingress-nginx's ConfigMap page (docs/user-guide/nginx-configuration/configmap.md):

  - C{block-cidrs}, C{block-user-agents}, C{block-referers}: requests from these addresses, or with
    a matching User-Agent or Referer, are refused (403) "globally", before anything else
    (L{ingress.routing.policies.block});
  - C{whitelist-source-range}, C{denylist-source-range}: "the default ... IPs for each server block.
    This can be overwritten by an annotation on an Ingress rule" (each list on its own: an Ingress's
    allow list replaces the global allow list, and keeps the global deny list unless it has its own);
  - C{global-auth-url} and its C{global-auth-*} companions: external authentication "for all the
    locations", as the C{auth-url} annotation does, except for locations whose path starts with an
    entry of C{no-auth-locations} (default C{/.well-known/acme-challenge}; these skip every auth,
    nginx.tmpl's C{isLocationInLocationList}), Ingresses with C{enable-global-auth: "false"}, and
    Ingresses with an C{auth-url} of their own (nginx.tmpl's C{shouldApplyGlobalAuth}).

A guard value twingress cannot read, or a companion it cannot honour, never drops the guard: the
routes the guard covers are closed (503) and say why (L{GlobalGuards.closed}).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Optional, TypeVar

from ingress.routing.annotations import auth_values, values
from ingress.routing.annotations.auth_values import DEFAULT_CACHE_DURATION
from ingress.routing.annotations.values import InvalidValue
from ingress.routing.config_keys import EVERY_ROUTE, GLOBAL_AUTH, covered
from ingress.routing.policies.access import Network, SourceRanges
from ingress.routing.policies.block import GlobalBlock, Matcher, matchers
from ingress.routing.policies.extauth import ExternalAuth

ACME_CHALLENGE = "/.well-known/acme-challenge"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class GlobalGuards:
    """
    The ConfigMap's guards.  C{closed} maps what a guard covers (L{EVERY_ROUTE}, L{GLOBAL_AUTH},
    C{"whitelist-source-range"}, C{"denylist-source-range"}) to why those routes answer 503.
    """

    allow: tuple[Network, ...] = ()
    deny: tuple[Network, ...] = ()
    block: Optional[GlobalBlock] = None
    auth: Optional[ExternalAuth] = None
    no_auth_locations: tuple[str, ...] = (ACME_CHALLENGE,)
    closed: Mapping[str, str] = field(default_factory=dict)

    def exempt(self, path: str) -> bool:
        """Whether a route of this (Ingress) path skips authentication (no-auth-locations: a prefix of the path)."""
        return any(path.startswith(location) for location in self.no_auth_locations)

    @property
    def any(self) -> bool:
        """Whether any guard, or any closure, applies to some route."""
        return bool(self.allow or self.deny or self.auth is not None or self.closed)


NO_GUARDS = GlobalGuards(no_auth_locations=())
"""Without --nginx-configmap: nothing global, and no location skips authentication."""


INVALID, IGNORED = "invalid", "ignored"


def read_global_guards(data: Mapping[str, str], closed: Mapping[str, str]) -> tuple[GlobalGuards, list[tuple[str, str]]]:
    """
    The guards of the ConfigMap's C{data} (its guard keys only), with C{closed} (the refusals the
    reader found among the other keys) added; and what was refused (L{INVALID}) or ignored (L{IGNORED}), with why.
    """
    closures = dict(closed)
    messages: list[tuple[str, str]] = []

    def networks(key: str) -> tuple[Network, ...]:
        if not data.get(key, "").strip():  # empty is unset: ingress-nginx's default ([]string{}, configmap.md)
            return ()
        try:
            return values.networks(data[key])
        except InvalidValue as error:
            covers = EVERY_ROUTE if key == "block-cidrs" else key
            closures.setdefault(covers, f"{key}: {data[key]!r} {error}")
            messages.append((INVALID, f"{key}: {data[key]!r} {error}; {covered(covers)} answer 503"))
            return ()

    blocked = networks("block-cidrs")
    user_agents, referers = _matchers(data, "block-user-agents", closures, messages), _matchers(data, "block-referers", closures, messages)
    block = GlobalBlock(SourceRanges(deny=blocked) if blocked else None, user_agents, referers)
    locations = tuple(item.strip() for item in data.get("no-auth-locations", ACME_CHALLENGE).split(",") if item.strip())
    guards = GlobalGuards(
        allow=networks("whitelist-source-range"),
        deny=networks("denylist-source-range"),
        block=block if block != GlobalBlock() else None,
        auth=_global_auth(data, closures, messages),
        no_auth_locations=locations,
        closed=closures,
    )
    return guards, messages


def _matchers(data: Mapping[str, str], key: str, closures: dict[str, str], messages: list[tuple[str, str]]) -> tuple[Matcher, ...]:
    """A block-user-agents or block-referers list (comma-separated, as ingress-nginx splits it); a bad pattern closes every route."""
    entries = tuple(entry.strip() for entry in data.get(key, "").split(",") if entry.strip())
    try:
        return matchers(entries)
    except re.error as error:
        closures.setdefault(EVERY_ROUTE, f"{key}: {data[key]!r} has a pattern that is no regular expression ({error})")
        messages.append((INVALID, f"{key}: {data[key]!r} has a pattern that is no regular expression ({error}); {covered(EVERY_ROUTE)} answer 503"))
        return ()


def _global_auth(data: Mapping[str, str], closures: dict[str, str], messages: list[tuple[str, str]]) -> Optional[ExternalAuth]:
    """global-auth-url with its companions, read as the auth-* annotations are (ingress-nginx: "Similar to the Ingress rule annotation")."""
    companions = sorted(key for key in data if key.startswith("global-auth-") and key != "global-auth-url")
    if not data.get("global-auth-url", "").strip():
        if companions:
            messages.append((IGNORED, f"{', '.join(companions)}: no effect without global-auth-url (as in ingress-nginx); ignored"))
        closures.pop(GLOBAL_AUTH, None)  # a refused companion covers nothing without the URL
        return None

    def read(key: str, reader: Callable[[str], _T], default: _T) -> _T:
        value = data.get(key, "").strip()
        if not value:
            return default
        try:
            return reader(value)
        except InvalidValue as error:
            raise InvalidValue(f"{key}: {value!r} {error}") from None

    try:
        url = read("global-auth-url", auth_values.url, "")
        signin = read("global-auth-signin", auth_values.url, "")
        parameter = read("global-auth-signin-redirect-param", values.token, "")
        key = read("global-auth-cache-key", auth_values.nginx_string, "")
        rules = read("global-auth-cache-duration", auth_values.cache_rules, auth_values.cache_rules(DEFAULT_CACHE_DURATION))
        auth = ExternalAuth(
            url=auth_values.url_template(url),
            source=url,
            method=read("global-auth-method", auth_values.method, ""),
            signin=auth_values.signin_with_redirect(signin, parameter) if signin else (),
            response_headers=read("global-auth-response-headers", auth_values.response_headers, ()),
            request_redirect=read("global-auth-request-redirect", values.redirect_url, ""),
            cache_key=auth_values.template(key) if key else (),
            cache_rules=rules if key else (),
            always_set_cookie=read("global-auth-always-set-cookie", values.boolean, False),
        )
    except InvalidValue as error:
        closures.setdefault(GLOBAL_AUTH, f"global auth cannot be enforced as written: {error}")
        messages.append((INVALID, f"{error}; {covered(GLOBAL_AUTH)} answer 503"))
        return None
    return None if GLOBAL_AUTH in closures else auth
