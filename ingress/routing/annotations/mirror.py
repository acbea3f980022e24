# -*- test-case-name: tests.unit.test_nginx_behaviours -*-
"""
ingress-nginx's C{mirror-target}, C{mirror-host} and C{mirror-request-body} (annotations.md "Mirror";
e2e annotations/mirror.go) read into a route's L{URLMirror} (the last two are applied by
L{ingress.routing.annotations.policies}).

The target is a URL whose path may hold nginx variables: C{https://test.env.com$request_uri} (the
docs' example), C{https://test.env.com/$request_uri} (the e2e test's, which nginx sends with two
slashes), C{http://localhost/mirror} (a fixed path).  A URL without a path copies the request's own
target.  A variable twingress cannot compute makes the value unreadable (the Ingress's paths are then
not served, as for any annotation it cannot read), never a path with the variable's name in it.
"""

from __future__ import annotations

import re

from ingress.routing.annotations.values import InvalidValue
from ingress.routing.policies.mirror import URLMirror
from ingress.routing.policies.variables import ALL_VARIABLES, parse_template

_URL = re.compile(r"(https?)://(\[[0-9a-fA-F:.]+\]|[-._a-zA-Z0-9]+)(?::([0-9]{1,5}))?([/$].*)?")


def mirror_target(value: str) -> URLMirror:
    """A mirror-target URL: http or https, a host, an optional port, and a path that may hold nginx variables."""
    match = _URL.fullmatch(value)
    if match is None or any(c in value for c in "\r\n\x00 "):
        raise InvalidValue("must be an http or https URL (its path may hold nginx variables such as $request_uri)")
    scheme, host, port, path = match.groups()
    number = int(port) if port else (443 if scheme == "https" else 80)
    if not 0 < number < 65536:
        raise InvalidValue("has a port out of range")
    try:
        parts = parse_template(path or "", ALL_VARIABLES)
    except ValueError as error:
        raise InvalidValue(f"cannot be mirrored to: {error}") from None
    authority = host if not port else f"{host}:{port}"
    return URLMirror(value, scheme == "https", host.strip("[]"), number, authority, parts)
