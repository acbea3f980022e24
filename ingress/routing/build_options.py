# -*- test-case-name: tests.unit.test_routing -*-
"""
What a routing build is told beside the cluster's state: one frozen value, made once from the
command line (L{ingress.options.build_arguments}) and given to every build, the proxy's and the
audit's alike, so that the two cannot be told different things.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

from ingress.model import CONTROLLER_NAME, DEFAULT_CLASS_NAME
from ingress.model.gateway import GATEWAY_CONTROLLER_NAME

__all__ = ["DEFAULT_BUILD_OPTIONS", "BuildOptions"]


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """The options of L{ingress.routing.build}: each field says what it changes in the table."""

    # The IngressClass served: Ingresses of other classes are skipped (the report's class_skipped says why).
    class_name: str = DEFAULT_CLASS_NAME
    # The IngressClass controller twingress answers for (spec.controller): a class of another controller is not ours.
    controller_name: str = CONTROLLER_NAME
    # The Secret (namespace, name) of the certificate for TLS names no Ingress names; None: no default certificate.
    default_certificate: Optional[tuple[str, str]] = None
    # The ingress-nginx tcp-services ConfigMap (namespace, name): its ports become TCP stream routes; None: none.
    tcp_services: Optional[tuple[str, str]] = None
    # The ingress-nginx udp-services ConfigMap (namespace, name): its ports become UDP stream routes; None: none.
    udp_services: Optional[tuple[str, str]] = None
    # The ports the listeners hold (port → listener name): a stream or Gateway listener there is refused, not served.
    reserved_ports: Mapping[int, str] = field(default_factory=dict)
    # Whether the nginx.ingress.kubernetes.io/ annotations are read beside twingress.io/ ones.
    nginx_annotations: bool = True
    # The ingress-nginx ConfigMap (namespace, name) whose keys become the routes' defaults; None: twingress's defaults.
    nginx_configmap: Optional[tuple[str, str]] = None
    # The GatewayClass controllerName served: Gateways of other classes are not ours.
    gateway_controller_name: str = GATEWAY_CONTROLLER_NAME
    # Whether HTTP/2 with prior knowledge is served on the HTTP listener (GRPCRoutes may attach to it then).
    cleartext_http2: bool = False
    # The address pool Gateways get an address of their own from (a table per address); empty: every Gateway everywhere.
    gateway_addresses: tuple[str, ...] = ()
    # Whether the ACME issuer's pending HTTP-01 tokens and TLS-ALPN-01 certificates are served (the proxy with --acme; the audit never).
    acme_challenges: bool = False


DEFAULT_BUILD_OPTIONS = BuildOptions()
