"""
The proxy's command-line options (part of C{twistd ingress}'s Options): its limits and timeouts,
and HTTP/2; and their conversion into L{ProxySettings} and L{HTTP2Settings}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional

from twisted.python import usage

from ingress.proxy.request.settings import HTTP2Settings, ProxySettings

_SIZE_SUFFIXES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """A byte count like nginx writes it: 512, 64k, 10m, 1g."""
    text = text.strip().lower()
    multiplier = _SIZE_SUFFIXES.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in _SIZE_SUFFIXES else text
    if not digits.isdigit():
        raise ValueError(f"not a size: {text!r} (use e.g. 8192, 64k, 10m, 1g)")
    return int(digits) * multiplier


def seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError(f"{text} is negative")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


_LIMITS: list[tuple[str, str, Callable[[str], Any], str]] = [
    # option, settings field, converter, help
    ("max-request-line", "max_request_line", parse_size, "Longest request line (414 beyond)."),
    ("max-header-size", "max_head_bytes", parse_size, "Largest request head (431 beyond)."),
    ("max-header-fields", "max_header_fields", int, "Most header fields in a request (431 beyond)."),
    ("max-body-size", "max_body_bytes", parse_size, "Largest request body (413 beyond)."),
    ("header-timeout", "header_timeout", positive_float, "Seconds to receive a request head (408 after)."),
    ("client-body-timeout", "client_body_timeout", positive_float, "Seconds between two reads of a request body (408 after)."),
    ("keepalive-timeout", "keepalive_timeout", positive_float, "Seconds an idle client connection is kept."),
    ("connect-timeout", "connect_timeout", positive_float, "Seconds to connect to an endpoint."),
    ("upstream-timeout", "upstream_timeout", positive_float, "Seconds without progress from an upstream (504)."),
    ("upstream-idle-timeout", "upstream_idle_timeout", positive_float, "Seconds a pooled upstream connection is kept."),
    ("upstream-fail-timeout", "fail_timeout", positive_float, "Seconds an endpoint that failed is skipped."),
]

def _shown(value: object) -> str:
    """A default as the option is written: 1g rather than 1073741824, 10 rather than 10.0."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and value >= 1 << 20:
        for suffix in ("g", "m"):
            unit = _SIZE_SUFFIXES[suffix]
            if value % unit == 0:
                return f"{value // unit}{suffix}"
    return str(value)


LIMIT_PARAMETERS: list[list[Any]] = [[name, None, _shown(getattr(ProxySettings(), field)), help] for name, field, _, help in _LIMITS]

HTTP2_PARAMETERS: list[list[Any]] = [
    ["http2", None, "true", "Offer HTTP/2 (ALPN h2) on the TLS listener (true|false)."],
    ["h2c", None, "false", "Serve HTTP/2 with prior knowledge (h2c) on the plain HTTP listener too, no Upgrade (true|false)."],
    ["http2-max-streams", None, "100", "Concurrent streams on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS)."],
    ["http2-initial-window", None, "65535", "HTTP/2 flow-control window per stream, in bytes: what a stream may send before it is acknowledged."],
    ["http2-header-table-size", None, "4096", "HPACK dynamic table size of an HTTP/2 connection, in bytes."],
]

_HTTP2_BOUNDS = (("http2-max-streams", 1, 1 << 16), ("http2-initial-window", 1, (1 << 31) - 1), ("http2-header-table-size", 0, 1 << 20))


def proxy_settings(options: Mapping[str, Any], https_redirect_port: Optional[int]) -> ProxySettings:
    """The limits and timeouts of the command line; raises L{usage.UsageError} naming a bad one."""
    overrides: dict[str, Any] = {}
    for name, field, convert, _ in _LIMITS:
        try:
            overrides[field] = convert(options[name])
        except ValueError as error:
            raise usage.UsageError(f"--{name}: {error}") from None
    overrides["https_redirect_port"] = https_redirect_port
    return ProxySettings(**overrides)


def http2_settings(options: Mapping[str, Any]) -> HTTP2Settings:
    """HTTP/2's options, checked; raises L{usage.UsageError}."""
    for option in ("http2", "h2c"):
        if options[option] not in ("true", "false"):
            raise usage.UsageError(f"--{option} must be true or false")
    values = {}
    for option, low, high in _HTTP2_BOUNDS:
        try:
            value = int(options[option])
        except ValueError:
            raise usage.UsageError(f"--{option} must be a whole number") from None
        if not low <= value <= high:
            raise usage.UsageError(f"--{option} must be between {low} and {high}")
        values[option] = value
    return HTTP2Settings(
        enabled=options["http2"] == "true",
        cleartext=options["h2c"] == "true",
        max_concurrent_streams=values["http2-max-streams"],
        initial_window=values["http2-initial-window"],
        header_table_size=values["http2-header-table-size"],
    )
