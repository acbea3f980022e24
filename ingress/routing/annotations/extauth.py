# -*- test-case-name: tests.unit.test_external_auth -*-
"""
C{auth-url} and its companions compiled into an L{ExternalAuth}.

ingress-nginx's annotations page ("External Authentication") and its authreq parser:
C{auth-cache-duration} defaults to C{200 202 401 5m} once C{auth-cache-key} is set;
C{auth-proxy-set-headers} names a ConfigMap in the Ingress's own namespace (another
namespace is refused, as ingress-nginx refuses it unless cross-namespace resources
are allowed), whose keys are field names and whose values are nginx strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from ingress.model import ConfigMap, Ingress
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.annotations.auth_values import DEFAULT_CACHE_DURATION, cache_rules, response_headers, signin_with_redirect, template, url_template
from ingress.routing.annotations.values import InvalidValue
from ingress.routing.policies.extauth import CacheRule, ExternalAuth
from ingress.routing.policies.variables import Part


class ExternalAuthProblem(LookupError):
    """What the route's external auth needs cannot be found or read (its ConfigMap): the route closes."""


def external_auth(ingress: Ingress, annotations: IngressAnnotations, config_maps: Mapping[tuple[str, str], ConfigMap]) -> Optional[ExternalAuth]:
    """The route's external auth, None when C{auth-url} is not set; raises L{ExternalAuthProblem}."""
    url = annotations.text("auth-url")
    if not url:
        return None
    signin = annotations.text("auth-signin")
    key = annotations.text("auth-cache-key")
    rules = annotations.value("auth-cache-duration")
    return ExternalAuth(
        url=url_template(url),
        source=url,
        method=annotations.text("auth-method"),
        signin=signin_with_redirect(signin, annotations.text("auth-signin-redirect-param")) if signin else (),
        response_headers=_names(annotations.value("auth-response-headers")),
        request_redirect=annotations.text("auth-request-redirect"),
        proxy_set_headers=_proxy_set_headers(ingress, annotations.text("auth-proxy-set-headers"), config_maps),
        cache_key=template(key) if key else (),
        cache_rules=(rules if isinstance(rules, tuple) else cache_rules(DEFAULT_CACHE_DURATION)) if key else (),
        always_set_cookie=annotations.flag("auth-always-set-cookie"),
    )


def _names(value: object) -> tuple[str, ...]:
    return tuple(str(name) for name in value) if isinstance(value, tuple) else ()


def _proxy_set_headers(ingress: Ingress, reference: str, config_maps: Mapping[tuple[str, str], ConfigMap]) -> tuple[tuple[str, tuple[Part, ...]], ...]:
    if not reference:
        return ()
    namespace, _, name = reference.rpartition("/")
    if namespace and namespace != ingress.meta.namespace:
        raise ExternalAuthProblem(f"auth-proxy-set-headers {reference!r}: a ConfigMap of another namespace is not allowed")
    found = config_maps.get((ingress.meta.namespace, name))
    if found is None:
        raise ExternalAuthProblem(f"auth-proxy-set-headers {reference!r}: no ConfigMap of that name in namespace {ingress.meta.namespace}")
    headers = []
    for field, value in sorted(found.data):
        try:
            headers.append((response_headers(field)[0], template(value)))
        except (InvalidValue, IndexError) as error:
            raise ExternalAuthProblem(f"auth-proxy-set-headers {reference!r}: {field!r}: {error or 'is empty'}") from None
    return tuple(headers)


__all__ = ["CacheRule", "ExternalAuthProblem", "external_auth"]
