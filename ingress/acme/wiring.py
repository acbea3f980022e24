# -*- test-case-name: tests.proxy.test_acme -*-
"""The manifests source, with the ACME issuer beside it when --acme-directory is given (L{ingress.tap} wires it)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter
from twisted.application.service import IService, MultiService

from ingress.acme.issuer import AcmeIssuer
from ingress.acme.options import AcmeSettings, acme_settings
from ingress.acme.storage import manifests_dir
from ingress.observe.metrics import Metrics
from ingress.process.builder import TableBuilder
from ingress.runtime.reactor import IProcessReactor
from ingress.sources.files import ManifestsSource

__all__ = ["acme_settings", "manifests_source"]


def manifests_source(options: Any, builder: TableBuilder, metrics: Metrics, reactor: IProcessReactor) -> IService:
    """The manifests directory's source; with ACME, the issuer first (its responder listens) and the storage's manifests read too."""
    settings: AcmeSettings | None = options["acme"]
    if settings is None:
        return ManifestsSource(options["manifests"], builder, metrics, reactor, options["poll-interval"])
    both = MultiService()
    ports = {name: port for port, name in options["reserved-ports"].items()}
    orders = Counter("twingress_acme_orders", "ACME orders of the issuer, by result (issued, failed)", ["result"], registry=metrics.registry)  # a cluster's: ControllerMetrics
    issuer = AcmeIssuer(settings, reactor, ports.get("http", 0), options["ingress-class"], options["controller-name"], ports.get("https", 0), orders=orders)
    issuer.setServiceParent(both)
    also = manifests_dir(settings.storage)
    ManifestsSource(options["manifests"], builder, metrics, reactor, options["poll-interval"], also=also, observe=issuer.consider).setServiceParent(both)
    return both
