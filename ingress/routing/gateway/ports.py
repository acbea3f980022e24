# -*- test-case-name: tests.unit.test_gateway_ports -*-
"""The routing table of a Gateway listener on a port of its own (L{ingress.routing.build} makes one per such port)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Optional

from ingress.model import TLSSecret
from ingress.routing.certs import CertificateTable
from ingress.routing.gateway import GatewayRoutes
from ingress.routing.gateway.merge import with_listener_certificates
from ingress.routing.nginx_config import NginxConfig
from ingress.routing.table import RoutingTable


def port_table(
    routes: GatewayRoutes, generation: int, secrets: Mapping[tuple[str, str], TLSSecret], config: NginxConfig, default_certificate: Optional[tuple[str, str]]
) -> RoutingTable:
    """
    The table a Gateway listener on a port of its own serves: that port's hosts and certificates (the
    --default-certificate where no listener of the port has a hostless one), nothing else.
    """
    certificates = with_listener_certificates(CertificateTable(), routes.certificates, secrets)
    if certificates.default is None and default_certificate is not None and default_certificate in secrets:
        certificates = replace(certificates, default=default_certificate, secrets={**certificates.secrets, default_certificate: secrets[default_certificate]})
    passed = routes.l4.passthrough
    return RoutingTable(
        generation=generation,
        hosts=routes.hosts,
        deep_wildcards=routes.wildcards,
        any_host=routes.any_host,
        passthrough={host: upstream for host, upstream in passed.items() if not host.startswith("*.")},
        deep_passthrough={host[2:]: upstream for host, upstream in passed.items() if host.startswith("*.")},
        tls_terminated=dict(routes.l4.terminated),
        certificates=certificates,
        trust=config.trust,
        listener=config.listener,
        blocked=config.guards.block,
        rejects_unknown_tls_names=routes.tls_listeners,
        https_listeners=routes.https_names,
    )
