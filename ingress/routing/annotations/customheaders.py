# -*- test-case-name: tests.unit.test_nginx_behaviours -*-
"""
C{custom-headers}: the response fields of a ConfigMap, as ingress-nginx reads them (annotations.md
"Custom Headers"; internal/ingress/annotations/customheaders; e2e annotations/customheaders.go).

The annotation names C{namespace/name} (or C{name}, the Ingress's namespace).  Every field of the
ConfigMap replaces the response's fields of that name (nginx's C{more_set_headers}), its value as
written: a C{$} is a dollar sign, not a variable (ingress-nginx escapes it: the e2e test expects
C{$remote_addr} back).  As in ingress-nginx, the Ingress's routes answer 503 ("location denied")
when the ConfigMap is missing, a field name or value is not valid, or a name is not in the
controller ConfigMap's C{global-allowed-response-headers} (without C{--nginx-configmap} any name
may be set).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Optional

from ingress.model import ConfigMap, Ingress
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.policies.headers import HeaderChanges, header_changes

_NAME = re.compile(r"[a-zA-Z\d\-_]+")  # ingress-nginx's headerRegexp
_VALUE = re.compile(r"[a-zA-Z\d_ :;.,\\/\"'?!(){}\[\]@<>=\-+*#$&`|~^%]+")  # its valueRegexp


class CustomHeadersProblem(ValueError):
    """Why the Ingress's custom-headers cannot be set as asked (its routes then answer 503)."""


def custom_headers(
    ingress: Ingress, read: IngressAnnotations, config_maps: Mapping[tuple[str, str], ConfigMap], allowed: Optional[frozenset[str]]
) -> Optional[HeaderChanges]:
    """The response fields the Ingress's custom-headers ConfigMap sets (None without the annotation); raises L{CustomHeadersProblem}."""
    reference = read.text("custom-headers")
    if not reference:
        return None
    namespace, _, name = reference.rpartition("/")
    found = config_maps.get((namespace or ingress.meta.namespace, name))
    if found is None:
        raise CustomHeadersProblem(f"custom-headers: ConfigMap {reference!r} not found (twingress reads ConfigMaps of the namespaces it watches)")
    for field, value in found.data:
        if _NAME.fullmatch(field) is None or _VALUE.fullmatch(value) is None:
            raise CustomHeadersProblem(f"custom-headers: {field!r}: {value!r} is not a header field ingress-nginx accepts")
        if allowed is not None and field.lower() not in allowed:
            raise CustomHeadersProblem(f"custom-headers: {field} is not in the ConfigMap's global-allowed-response-headers")
    return header_changes(found.data) if found.data else None
