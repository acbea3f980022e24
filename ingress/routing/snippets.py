# -*- test-case-name: tests.unit.test_guard_keys -*-
"""
Whether an nginx snippet (C{configuration-snippet}, C{server-snippet}, the ConfigMap's
C{http-snippet}...) might guard access.

twingress never executes a snippet (raw nginx configuration: the attack surface of
CVE-2025-1974).  Most snippets set header fields, and dropping those is reported and
harmless; but a snippet may as well say C{deny all;}, C{auth_basic}, C{return 403} or
run Lua, and dropping that would open what it closed.  So a snippet is harmless only
when every statement in it is one of the directives below, which only shape headers,
buffers, timeouts and caching; anything else, a block (C{if}, C{location}), a
variable we cannot follow, or text we cannot split into statements, is treated as a
guard and closes the routes it covers.
"""

from __future__ import annotations

import re

HARMLESS_DIRECTIVES = frozenset(
    """add_header add_trailer more_set_headers more_clear_headers more_set_input_headers more_clear_input_headers
    proxy_set_header proxy_hide_header proxy_pass_header proxy_ignore_headers proxy_buffering proxy_buffer_size
    proxy_buffers proxy_busy_buffers_size proxy_request_buffering proxy_max_temp_file_size proxy_http_version
    proxy_connect_timeout proxy_read_timeout proxy_send_timeout proxy_cookie_path proxy_cookie_domain
    proxy_cookie_flags proxy_redirect client_max_body_size client_body_buffer_size client_body_timeout
    client_header_timeout keepalive_timeout send_timeout expires etag charset default_type gzip gzip_types
    gzip_min_length gzip_comp_level gzip_proxied gzip_vary chunked_transfer_encoding server_tokens
    large_client_header_buffers underscores_in_headers ignore_invalid_headers access_log error_log log_not_found
    sendfile tcp_nopush tcp_nodelay""".split()
)
"""Directives that only shape a request's or response's fields, buffers and timeouts: never who may pass."""

_STATEMENT = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)((?:\s+(?:"[^"]*"|'[^']*'|[^;{}"'\s]+))*)\s*;""")
_COMMENT = re.compile(r"#[^\n]*")


def guarding_directive(snippet: str) -> str:
    """
    "" when every statement of C{snippet} is a harmless directive; else the first one
    that might guard access (or a description of what could not be read).
    """
    text = _COMMENT.sub("", snippet)
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            return ""
        match = _STATEMENT.match(text, position)
        if match is None:
            return "a block or text that is not a plain directive"
        if match.group(1) not in HARMLESS_DIRECTIVES:
            return match.group(1)
        position = match.end()
    return ""
