# -*- test-case-name: tests.unit.test_logformat -*-
"""
An nginx C{log_format} string (the ConfigMap's C{log-format-upstream}), split into text and variables.

Pure and checked when the ConfigMap is read: a variable twingress cannot fill refuses the whole
format (the problem names it), so a log pipeline never gets lines with silently empty fields.
The variables are those of ingress-nginx's default format and its JSON example
(docs/user-guide/nginx-configuration/log-format.md, configmap.md "log-format-upstream") and the
few nginx core variables around them; C{$http_<name>} reads any request header.  nginx's syntax:
C{$name} or C{${name}}, a name of letters, digits and underscores.
"""

from __future__ import annotations

import re

from ingress.routing.annotations.values import InvalidValue

VARIABLES = frozenset(
    """remote_addr remote_user time_local time_iso8601 msec request request_method request_uri uri args
    query_string server_protocol scheme host status body_bytes_sent bytes_sent request_length request_time
    proxy_upstream_name proxy_alternative_upstream_name upstream_addr upstream_response_length
    upstream_response_time upstream_status req_id request_id namespace ingress_name service_name service_port
    proxy_add_x_forwarded_for proxy_protocol_addr""".split()
)
"""What C{log-format-upstream} may use besides C{$http_*}."""

UPSTREAMINFO = (
    '$remote_addr - $remote_user [$time_local] "$request" '
    '$status $body_bytes_sent "$http_referer" "$http_user_agent" '
    "$request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr "
    "$upstream_response_length $upstream_response_time $upstream_status $req_id"
)
"""ingress-nginx's default C{log-format-upstream} (log-format.md)."""

ESCAPES = ("default", "json", "none")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")

Parts = tuple[tuple[str, str], ...]
"""(text before, variable name) pairs; the last pair's variable is "" (text only)."""


def parse(text: str) -> Parts:
    """C{text} as parts, or L{InvalidValue} naming every variable twingress does not fill."""
    parts: list[tuple[str, str]] = []
    unknown: list[str] = []
    at = 0
    for match in _VARIABLE.finditer(text):
        name = match.group(1) or match.group(2)
        if name not in VARIABLES and not (name.startswith("http_") and len(name) > 5):
            unknown.append("$" + name)
        parts.append((text[at : match.start()], name))
        at = match.end()
    if "$" in text[at:]:
        raise InvalidValue("has a '$' that starts no variable name")
    if unknown:
        raise InvalidValue(f"uses variables twingress does not fill: {', '.join(sorted(set(unknown)))}")
    parts.append((text[at:], ""))
    return tuple(parts)
