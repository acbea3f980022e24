# -*- test-case-name: tests.unit.test_nginx_differences -*-
"""
ingress-nginx ConfigMap keys that twingress answers by what it already does: a value that asks for
twingress's own behaviour is applied (nothing to report), any other value is reported with what
twingress does instead.  None of them guards access, so none closes a route, whatever its name
looks like (C{enable-auth-access-log} has "auth" in it and only changes logging).

Sources (kubernetes/ingress-nginx at dbb11b92ddb77bee9c35e462479129354c84f939):
internal/ingress/controller/config/config.go for the keys its ConfigMap page leaves out, and
docs/user-guide/nginx-configuration/configmap.md "ssl-early-data".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Optional

from ingress.routing.annotations import values


def _when(asked: object, message: str) -> Callable[[object], Optional[str]]:
    """The note for a value other than the one twingress behaves as (C{asked}: that value)."""
    return lambda value: None if value == asked else message


NOTES: Mapping[str, tuple[Callable[[str], object], Callable[[object], Optional[str]]]] = {
    "enable-auth-access-log": (
        values.boolean,
        _when(False, "twingress writes no access log line for an external auth subrequest (only the request's own); it only changes logging, nothing is denied"),
    ),
    "disable-http-access-log": (values.boolean, _when(False, "the HTTP access log is twingress's --access-log (off turns it off); it is ignored")),
    "disable-stream-access-log": (values.boolean, _when(True, "twingress writes no access log for TCP/UDP streams; it is ignored")),
    "forwarded-host-header": (
        lambda value: values.token(value).lower(),
        _when("x-forwarded-host", "twingress reads the client's host from X-Forwarded-Host only (with use-forwarded-headers); it is ignored"),
    ),
    "proxy-http-version": (values.one_of("1.0", "1.1"), _when("1.1", "twingress speaks HTTP/1.1 to endpoints (ingress-nginx's default); it is ignored")),
    "ssl-early-data": (
        values.boolean,
        _when(False, "twingress never accepts TLS 1.3 early data (0-RTT), so no request can be replayed (the safe side); it is ignored"),
    ),
}
"""Each key's reader and its note: None when twingress does what the value asks, else what it does instead."""


def note(key: str, value: str) -> Optional[str]:
    """What twingress does instead of C{key}'s C{value}, or None when it does what the value asks; raises InvalidValue."""
    reader, noted = NOTES[key]
    return noted(reader(value))
