"""
The controllers' Prometheus metrics (C{twingress_leader*}, C{twingress_controller_*},
C{twingress_workqueue_*}), registered in the process's one registry.

Labels are bounded: a controller name, a kind, a verb, a result.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.leader = Gauge("twingress_leader", "1 while this replica holds the leader Lease", registry=r)
        self.leader_transitions = Counter(
            "twingress_leader_acquired", "Times this replica became the leader", registry=r
        )
        self.api_writes = Counter(
            "twingress_controller_api_writes",
            "Writes sent to the apiserver by the controllers, by controller, kind and verb",
            ["controller", "kind", "verb"],
            registry=r,
        )
        self.status_addresses = Gauge(
            "twingress_status_addresses",
            "Addresses Ingress status carries now (0: none known - no ready pod, or the --publish-service Service"
            " missing or not provisioned - and no Ingress status is written)",
            registry=r,
        )
        self.syncs = Counter(
            "twingress_controller_syncs", "Work queue keys processed, by controller and result", ["controller", "result"], registry=r
        )
        self.queue_depth = Gauge("twingress_workqueue_depth", "Keys waiting in a work queue", ["controller"], registry=r)
        self.retries = Counter("twingress_workqueue_retries", "Keys re-queued after a failed sync", ["controller"], registry=r)
        self.dropped = Counter(
            "twingress_workqueue_dropped", "Keys given up on after too many failed syncs", ["controller"], registry=r
        )
        self.acme_orders = Counter("twingress_acme_orders", "ACME orders of the leader, by result (issued, failed)", ["result"], registry=r)
        self.acme_refused = Counter(
            "twingress_acme_refused",
            "Syncs of an Ingress annotated twingress.io/acme that ordered nothing, by reason (secret-not-ours, wildcard, no-tls, no-hosts)",
            ["reason"],
            registry=r,
        )
