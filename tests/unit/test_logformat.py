"""
log-format-upstream parsing (ingress-nginx docs/user-guide/nginx-configuration/log-format.md; nginx's
log_format syntax: C{$name} and C{${name}}): the documented variables are accepted, the rest named.
"""

from __future__ import annotations

import pytest

from ingress.routing.annotations.values import InvalidValue
from ingress.routing.logformat import UPSTREAMINFO, parse


def test_ingress_nginx_default_format_parses() -> None:
    parts = parse(UPSTREAMINFO)
    assert [name for _, name in parts if name] == [
        "remote_addr", "remote_user", "time_local", "request", "status", "body_bytes_sent", "http_referer", "http_user_agent",
        "request_length", "request_time", "proxy_upstream_name", "proxy_alternative_upstream_name", "upstream_addr",
        "upstream_response_length", "upstream_response_time", "upstream_status", "req_id",
    ]
    assert "".join(text + ("$" + name if name else "") for text, name in parts) == UPSTREAMINFO


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("", (("", ""),)),
        ("${status}ms", (("", "status"), ("ms", ""))),
        ("[$http_x_custom_header]", (("[", "http_x_custom_header"), ("]", ""))),
        ('{"ns": "$namespace"}', (('{"ns": "', "namespace"), ('"}', ""))),
    ],
)
def test_parts(text: str, parts: tuple[tuple[str, str], ...]) -> None:
    assert parse(text) == parts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("$remote_addr $geoip_city $ssl_protocol", "$geoip_city, $ssl_protocol"),
        ("$http_", "$http_"),
        ("cost: $", "'$' that starts no variable"),
        ("${unclosed", "'$' that starts no variable"),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidValue, match=message.replace("$", r"\$")):
        parse(text)

