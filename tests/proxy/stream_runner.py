"""
The stream data plane alone in its own process, for measurements that need
one: resident memory during a 1 GB transfer, and the stream benchmark.

C{python -m tests.proxy.stream_runner ROUTES.json} builds one routing table
with the stream routes listed in the file and hands it to the same
L{StreamListeners} that twistd wires up, with the same pool and metrics.
Each route is C{{"protocol": "TCP", "port": 9000, "targets": [["127.0.0.1", 9001]],
"proxy_protocol": null, "idle_timeout": 60}}.  Prints "ready" once listening.
"""

from __future__ import annotations

import json
import sys

from twisted.internet import reactor
from twisted.python import log as legacy_log

from ingress.observe.metrics import Metrics
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import StreamListeners
from ingress.routing.table import RoutingTable
from ingress.runtime.live import LiveTable
from tests.proxy.streams_support import stream_route


def main(path: str) -> None:
    with open(path) as f:
        specs = json.load(f)
    routes = [
        stream_route(
            spec["protocol"],
            spec["port"],
            [tuple(t) for t in spec["targets"]],
            name=spec.get("name", f"default/s{spec['port']}"),
            proxy_protocol=spec.get("proxy_protocol"),
            idle_timeout=spec.get("idle_timeout", 60.0),
        )
        for spec in specs
    ]
    legacy_log.startLogging(sys.stderr, setStdout=False)
    live = LiveTable()
    listeners = StreamListeners(reactor, UpstreamPool(reactor, ProxySettings()), Metrics(), interface="127.0.0.1")
    live.subscribe(listeners.apply)
    live.swap(RoutingTable(generation=1, streams={r.key: r for r in routes}))
    if listeners.failures:
        raise SystemExit(f"listeners failed: {listeners.failures}")
    print("ready", flush=True)
    reactor.run()


if __name__ == "__main__":
    main(sys.argv[1])
