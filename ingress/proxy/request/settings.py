"""Limits and timeouts of the HTTP proxy, with defaults an edge proxy can run with."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ingress.routing.compression import Gzip
from ingress.routing.nginx_config import ListenerSettings


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """
    Every limit the proxy enforces; the twistd options map onto these one to one.

    Defaults follow what operators know from nginx: 8 KiB request line, 32 KiB
    of headers, 60 s upstream timeouts, 75 s keep-alive.
    """

    max_request_line: int = 8192
    max_head_bytes: int = 32768
    max_header_fields: int = 100
    max_body_bytes: int = 1 << 30
    header_timeout: float = 10.0
    client_body_timeout: float = 60.0  # between two reads of a request body, as nginx's client_body_timeout
    keepalive_timeout: float = 75.0  # 0: no keep-alive
    keepalive_requests: int = 0  # requests on one client connection before it is closed; 0: no limit
    connect_timeout: float = 5.0
    upstream_timeout: float = 60.0
    upstream_idle_timeout: float = 30.0
    max_idle_per_endpoint: int = 320  # ingress-nginx's upstream-keepalive-connections default: an h2 client runs 100 streams at once
    fail_timeout: float = 5.0
    server_name: bytes = b"twingress"
    https_redirect_port: Optional[int] = None  # the port in HTTP -> HTTPS redirects; None: the scheme's own (443)
    gzip: Optional[Gzip] = None  # the ConfigMap's use-gzip (never from the command line)


@dataclass(frozen=True, slots=True)
class HTTP2Settings:
    """
    HTTP/2 from clients: on over TLS (ALPN offers h2 first), off in cleartext unless asked
    (--http2-cleartext: prior knowledge only, no Upgrade), and its limits (nginx's defaults:
    128 streams there, 100 here as Go and Envoy use; the header list size is the HTTP/1.1 head limit).
    """

    enabled: bool = True
    cleartext: bool = False
    max_concurrent_streams: int = 100
    initial_window: int = 65535
    header_table_size: int = 4096


def with_listener(settings: ProxySettings, listener: Optional[ListenerSettings]) -> ProxySettings:
    """The settings with a table's connection settings (the ingress-nginx ConfigMap's) in place of the command line's."""
    if listener is None:
        return settings
    changes: dict[str, object] = {}
    if listener.keepalive_timeout is not None:
        changes["keepalive_timeout"] = listener.keepalive_timeout
    if listener.keepalive_requests is not None:
        changes["keepalive_requests"] = listener.keepalive_requests
    if listener.upstream_keepalive_connections is not None:
        changes["max_idle_per_endpoint"] = listener.upstream_keepalive_connections
    if listener.upstream_keepalive_timeout is not None:
        changes["upstream_idle_timeout"] = listener.upstream_keepalive_timeout
    changes["gzip"] = listener.gzip
    return replace(settings, **changes)  # type: ignore[arg-type]  # field names to values of their fields' types, which mypy cannot follow through **
