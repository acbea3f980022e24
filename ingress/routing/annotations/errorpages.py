# -*- test-case-name: tests.unit.test_error_pages -*-
"""
C{custom-http-errors}, C{default-backend} and C{disable-proxy-intercept-errors} read into a route's
L{ErrorPages}, as ingress-nginx's controller resolves them (its annotations page, "Custom HTTP
Errors" and "Default Backend"; controller.go's custom-default-backend upstream):

  - the default backend is a Service of the Ingress's namespace, at its first port, and counts
    only when it has a ready endpoint ("custom backend is valid only if contains at least one
    endpoint");
  - a route whose own Service has no ready endpoint sends its requests there instead;
  - the listed codes, from the upstream or made here, are answered by the default backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from ingress.model import Ingress, IngressBackend
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.backends import Issue
from ingress.routing.policies.errorpages import ErrorPages, static_fields
from ingress.routing.upstream import Upstream

NO_GLOBAL_DEFAULT = (
    "custom-http-errors without default-backend: ingress-nginx sends these errors to its global default backend, "
    "which twingress does not have; they are answered with twingress's own page for the same status"
)

NO_ENDPOINTS = "NoEndpoints"
"""The problem of a default-backend that is not used because its Service has no ready endpoint."""

DefaultBackend = Callable[[str, str], tuple[Upstream, Optional[Issue]]]
"""(namespace, Service name) → the Service's first-port upstream and what is wrong with it."""


def error_pages(
    ingress: Ingress,
    read: IngressAnnotations,
    backend: IngressBackend,
    upstream: Upstream,
    default_backend: Optional[Upstream],
    global_codes: frozenset[int] = frozenset(),
) -> tuple[Optional[ErrorPages], Upstream]:
    """
    The route's error pages (None when it has none) and the upstream its requests go to: its own,
    or C{default_backend} (already resolved, with endpoints, or None) when its own has none.
    C{global_codes} (the ConfigMap's custom-http-errors) count where the Ingress sets no codes.
    """
    codes = read.value("custom-http-errors")
    if not isinstance(codes, frozenset) and default_backend is not None and global_codes:
        codes = global_codes
    if not isinstance(codes, frozenset) and default_backend is None:
        return None, upstream
    fallback = default_backend is not None and not upstream.targets
    pages = ErrorPages(
        codes=codes if isinstance(codes, frozenset) else frozenset(),
        backend=default_backend,
        fields=static_fields(ingress.meta.namespace, ingress.meta.name, backend.service_name, str(backend.port)),
        intercept=not read.flag("disable-proxy-intercept-errors"),
        fallback=fallback,
    )
    return pages, default_backend if fallback and default_backend is not None else upstream


def default_backend(ingress: Ingress, read: IngressAnnotations, resolve: DefaultBackend) -> tuple[Optional[Upstream], Optional[Issue]]:
    """The Ingress's default backend with a ready endpoint, or None and why it is not used (if it was asked for)."""
    name = read.text("default-backend")
    if not name:
        return None, ("UnsupportedAnnotation", NO_GLOBAL_DEFAULT) if isinstance(read.value("custom-http-errors"), frozenset) else None
    found, issue = resolve(ingress.meta.namespace, name)
    if issue is not None:
        return None, (issue[0], f"default-backend: {issue[1]}; it is not used")
    if not found.targets:
        return None, (NO_ENDPOINTS, f'default-backend: Service "{ingress.meta.namespace}/{name}" has no ready endpoint; it is not used')
    return found, None
