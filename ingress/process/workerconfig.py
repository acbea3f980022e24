# -*- test-case-name: tests.proxy.test_workers -*-
"""
The worker pool as the command line makes it: what each worker is told on its stdin (its settings,
listeners, TLS and log options), from the primary's options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ingress.observe.metrics import Metrics
from ingress.observe.startup import listening
from ingress.process.adoption import Shared
from ingress.process.pool import WorkerPool
from ingress.process.streamsockets import StreamSockets
from ingress.process.workersettings import WorkerConfig, WorkerListener
from ingress.proxy.request.settings import ProxySettings
from ingress.runtime.reactor import IProcessReactor


def worker_pool(
    reactor: IProcessReactor, options: Mapping[str, Any], settings: ProxySettings, metrics: Metrics, shared: Shared, streams: Optional[StreamSockets] = None
) -> WorkerPool:
    """--workers N: N processes that serve the HTTP and HTTPS sockets opened once (L{ingress.process.adoption})."""
    config = WorkerConfig(
        settings=settings,
        listeners=tuple(WorkerListener(spec.name, int(spec.family), spec.proxy_protocol) for spec, _ in shared),
        tls_min_version=options["tls-min-version"],
        tls_ciphers=options["tls-ciphers"],
        http2=options["http2-settings"],
        access_log=options["access-log"],
        access_log_format=options["access-log-format"],
        nginx_metrics=options["nginx-metrics"] == "true",
        ingress_class=options["ingress-class"],
        log_format=options["log-format"],
        drain_timeout=options["drain-timeout"],
        stream_interface=options["stream-interface"],
        gateway_interface=options["gateway-interface"],
        stream_drain_timeout=options["stream-drain-timeout"],
        metrics_created=options["metrics-created"] == "true",
    )
    return WorkerPool(reactor, options["worker-count"], shared, config, metrics, lambda name, address, suffix: listening(name, options, address, suffix), streams)
