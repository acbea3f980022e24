# -*- test-case-name: tests.kube.test_leader -*-
"""
The embedded controller: leader election, then the generator and status
loops, fed by the cluster source's informers.

Every replica watches; only the Lease holder enqueues and writes.  Informer
threads report changed keys straight into the work queues (thread-safe; the
reactor is not involved).  Campaigning starts only once the informers have
synced, so a new leader never acts on half a cluster; when it becomes leader
it enqueues every key from the stores (a full resync), and it resyncs again
periodically.  Losing the Lease empties the queues; in-flight syncs fail the
leadership check before their next write.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Optional

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from ingress.controllers.acmegateways import AcmeGatewayOrders
from ingress.controllers.acmeorders import AcmeControllerOptions, AcmeOrders, node_addresses
from ingress.controllers.acmesecrets import ClusterStore
from ingress.controllers.events import EventRecorder
from ingress.controllers.gatewaystatus import GatewayStatusSync
from ingress.controllers.generated import GeneratorConfig
from ingress.controllers.leader import ElectionConfig, LeaderElector
from ingress.controllers.loop import ControllerLoop
from ingress.controllers.metrics import ControllerMetrics
from ingress.controllers.problems import IngressProblemEvents
from ingress.controllers.servicegen import ServiceIngressSync
from ingress.controllers.status import IngressStatusSync, PublishedAddresses, PublishedService
from ingress.controllers.streamstatus import StreamStatusSync
from ingress.controllers.writer import LeaderWriter
from ingress.model import ObjectRef
from ingress.model.gateway import GATEWAY_CONTROLLER_NAME
from ingress.routing.report import Built
from ingress.runtime.live import LiveTable
from ingress.sources.kube.client import KubeClient
from ingress.sources.kube.reflector import Reflector, Resource
from ingress.sources.kube.source import KubeSource

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

GENERATOR, STATUS, STREAM_STATUS, PROBLEM_EVENTS, GATEWAY_STATUS, ACME = "servicegen", "status", "streamstatus", "problemevents", "gatewaystatus", "acme"
GATEWAY_STATUS_KINDS = ("GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute")
NO_FAILURES: Callable[[], Mapping[tuple[str, int], str]] = dict


@dataclass(frozen=True)
class ControllerOptions:
    election: ElectionConfig
    generator: GeneratorConfig
    controller_name: str
    generate: bool = True
    gateway_controller_name: str = GATEWAY_CONTROLLER_NAME
    update_status: bool = True
    workers: int = 5
    publish_addresses: tuple[str, ...] = ()
    publish_service: Optional[tuple[str, str]] = None  # --publish-service: (namespace, name)
    status_pod_selector: str = "app.kubernetes.io/name=twingress"
    resync_period: float = 600.0
    acme: Optional[AcmeControllerOptions] = None  # --acme-directory: certificates for the annotated Ingresses and Gateways


class ControllerManager(Service):
    """Owns the elector, the loops and (for status addresses) the Pod and Node informers."""

    name = "controllers"

    def __init__(
        self,
        client_factory: Callable[[], KubeClient],
        source: KubeSource,
        options: ControllerOptions,
        metrics: ControllerMetrics,
        reactor: Any,
        live: Optional[LiveTable] = None,
        listen_failures: Callable[[], Mapping[tuple[str, int], str]] = NO_FAILURES,
    ) -> None:
        self.client_factory = client_factory
        self.live = live
        self.listen_failures = listen_failures
        self.source = source
        self.options = options
        self.metrics = metrics
        self.reactor = reactor
        self.loops: dict[str, ControllerLoop] = {}
        self.extra_reflectors: list[Reflector] = []
        self.elector = LeaderElector(client_factory, options.election, self._started_leading, self._stopped_leading)
        self._active = False
        self._waiting: Optional[LoopingCall] = None
        self._published: Optional[PublishedAddresses] = None
        self._acme_gateways: Optional[AcmeGatewayOrders] = None
        self._resync = LoopingCall(self._enqueue_all)
        self._resync.clock = reactor

    # -- lifecycle (reactor thread)

    def startService(self) -> None:
        super().startService()
        addresses = self._published = self._addresses()
        if self.options.generate:
            self._add_loop(GENERATOR, self._generator_sync())
        if self.options.update_status:
            self._add_loop(STATUS, self._status_sync(addresses))
            if self.live is not None and self.source.watches("StreamIngress"):
                self._stream_status = StreamStatusSync(self._writer(STREAM_STATUS), self.source.store("StreamIngress"))
                self._add_loop(STREAM_STATUS, self._stream_status)
                self.live.subscribe_report(self._table_changed)
            if self.live is not None and self.source.watches("Gateway"):
                stores = {kind: self.source.store(kind) for kind in GATEWAY_STATUS_KINDS if self.source.watches(kind)}
                self._gateway_status = GatewayStatusSync(self._writer(GATEWAY_STATUS), stores, self.options.gateway_controller_name, addresses)
                self._add_loop(GATEWAY_STATUS, self._gateway_status)
                self.live.subscribe_report(self._gateway_table_changed)
            if self.live is not None:
                events = EventRecorder(self._writer(PROBLEM_EVENTS), self.options.election.identity)
                config_maps = self.source.store("ConfigMap") if self.source.watches("ConfigMap") else None
                self._problem_events = IngressProblemEvents(events, self.source.store("Ingress"), config_maps)
                self._add_loop(PROBLEM_EVENTS, self._problem_events)
                self.live.subscribe_report(self._problems_changed)
        if self.options.acme is not None:
            self._add_acme_loop(self.options.acme, addresses)
        self._subscribe()
        for loop in self.loops.values():
            loop.start()
        self._waiting = LoopingCall(self._campaign_when_synced)
        self._waiting.clock = self.reactor
        self._waiting.start(0.2)

    def stopService(self) -> Deferred[None]:
        """Stop writing, release the Lease (so a successor takes over at once), stop the threads."""
        super().stopService()
        for call in (self._waiting, self._resync):
            if call is not None and call.running:
                call.stop()
        for reflector in self.extra_reflectors:
            reflector.stop()
        return deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self._stop_threads)

    def _stop_threads(self) -> None:
        self.elector.stop()
        for loop in self.loops.values():
            loop.stop()

    def _campaign_when_synced(self) -> None:
        if self.source.synced and all(r.synced for r in self.extra_reflectors):
            assert self._waiting is not None
            self._waiting.stop()
            log.info("controllers: informers synced, campaigning for lease {ns}/{name} as {me}",
                     ns=self.options.election.namespace, name=self.options.election.name, me=self.options.election.identity)
            self.elector.start()
            if self._published is not None:
                self._published.current()  # what is known once synced (a Service missing changes no key: said here)

    # -- wiring

    def _add_loop(self, name: str, sync: Callable[[Any], None]) -> None:
        self.loops[name] = ControllerLoop(name, sync, self.options.workers, self.metrics)

    def _add_acme_loop(self, acme: AcmeControllerOptions, addresses: PublishedAddresses) -> None:
        """One thread: one order at a time owns the tokens' ConfigMap (L{ingress.controllers.acmeorders})."""
        writer = self._writer(ACME)
        store = ClusterStore(writer, self.options.election.namespace, acme.settings.directory)
        orders = AcmeOrders(
            store, EventRecorder(writer, self.options.election.identity), acme, self.source.store("Ingress"), self.source.store("IngressClass"),
            partial(node_addresses, addresses, acme.settings.self_check_host), (self.options.generator.class_name, self.options.controller_name), self.metrics,
        )
        sync: Callable[[Any], None] = orders
        if self.source.watches("Gateway"):  # the Gateways that ask too, in the same thread (one order at a time owns the tokens)
            gateways = self._acme_gateways = AcmeGatewayOrders(orders, self.source.store("Gateway"), self.source.store("GatewayClass"), self.options.gateway_controller_name)
            sync = gateways
        self.loops[ACME] = ControllerLoop(ACME, sync, 1, self.metrics)
        orders.requeue = self.loops[ACME].queue.add_after  # a backoff's or a renewal's time: the key comes back then

    def _writer(self, controller: str) -> LeaderWriter:
        """A client of the controller's own whose writes are gated by the Lease and counted under its name."""

        def count(kind: str, verb: str) -> None:
            self.metrics.api_writes.labels(controller, kind, verb).inc()

        return LeaderWriter(self.client_factory(), self.elector.check, count)

    def _generator_sync(self) -> ServiceIngressSync:
        writer = self._writer(GENERATOR)
        events = EventRecorder(writer, self.options.election.identity)
        return ServiceIngressSync(writer, self.source.store("Service"), self.source.store("Ingress"), self.options.generator, events)

    def _status_sync(self, addresses: PublishedAddresses) -> IngressStatusSync:
        return IngressStatusSync(
            self._writer(STATUS),
            self.source.store("Ingress"),
            self.source.store("IngressClass"),
            addresses,
            self.options.generator.class_name,
            self.options.controller_name,
        )

    def _addresses(self) -> PublishedAddresses:
        """
        Static addresses, or the --publish-service Service (one more informer, on its name), or
        our pods' nodes (two more), only when status needs them.  Each change of the watched
        objects recomputes the addresses (their gauge, a line when none are known) and queues
        every Ingress's status.
        """
        count = self.metrics.status_addresses.set
        if self.options.publish_addresses or not self.options.update_status:
            addresses = PublishedAddresses(self.options.publish_addresses, on_count=count)
            addresses.current()
            return addresses
        if self.options.publish_service is not None:
            namespace, name = self.options.publish_service
            service = self._watch(Resource("Service", "v1", "services", field_selector=f"metadata.name={name}"), namespace)
            addresses = PublishedAddresses((), service=PublishedService(service.store, namespace, name), on_count=count)
        else:
            pods = self._watch(Resource("Pod", "v1", "pods", label_selector=self.options.status_pod_selector), self.options.election.namespace)
            nodes = self._watch(Resource("Node", "v1", "nodes", namespaced=False), "")
            addresses = PublishedAddresses((), pods.store, nodes.store, on_count=count)
        for reflector in self.extra_reflectors:
            reflector.key_listeners.append(lambda key: self._addresses_changed(addresses))
            reflector.start()
        return addresses

    def _watch(self, resource: Resource, namespace: str) -> Reflector:
        reflector = Reflector(self.client_factory, resource, on_change=lambda: None, on_status=lambda r: None, namespace=namespace)
        self.extra_reflectors.append(reflector)
        return reflector

    def _addresses_changed(self, addresses: PublishedAddresses) -> None:
        """A watched Pod, Node or Service changed (informer thread): say what the addresses are now, sync every status."""
        addresses.current()
        self._enqueue_all_status()

    def _subscribe(self) -> None:
        """Changed keys go to the loops that care (informer threads; ignored unless we lead)."""
        if GENERATOR in self.loops:
            self.source.on_key("Service", self._enqueuer(GENERATOR))
            self.source.on_key("Ingress", self._enqueuer(GENERATOR))  # generated Ingresses share their Service's key
        if STATUS in self.loops:
            self.source.on_key("Ingress", self._enqueuer(STATUS))
            self.source.on_key("IngressClass", lambda key: self._enqueue_all_status())
        if STREAM_STATUS in self.loops:
            self.source.on_key("StreamIngress", self._enqueuer(STREAM_STATUS))
        if ACME in self.loops:
            self.source.on_key("Ingress", self._enqueuer(ACME))
            if self.source.watches("Gateway"):
                self.source.on_key("Gateway", partial(_enqueue_ref, self._enqueuer(ACME), "Gateway"))
                self.source.on_key("GatewayClass", lambda key: self._enqueue_acme_gateways())
        if GATEWAY_STATUS in self.loops:
            enqueue = self._enqueuer(GATEWAY_STATUS)
            for kind in GATEWAY_STATUS_KINDS:
                if self.source.watches(kind):
                    self.source.on_key(kind, partial(_enqueue_ref, enqueue, kind))

    def _table_changed(self, built: Built) -> None:
        """A new table (reactor thread): queue the StreamIngresses whose conditions changed."""
        enqueue = self._enqueuer(STREAM_STATUS)
        for key in self._stream_status.table_changed(built, self.listen_failures()):
            enqueue(key)

    def _gateway_table_changed(self, built: Built) -> None:
        """A new table (reactor thread): queue the Gateway API objects whose status changed."""
        enqueue = self._enqueuer(GATEWAY_STATUS)
        for ref in self._gateway_status.table_changed(built.report, self.listen_failures()):
            enqueue(ref)

    def _problems_changed(self, built: Built) -> None:
        """A new table (reactor thread): queue the Ingresses whose annotation problems changed."""
        enqueue = self._enqueuer(PROBLEM_EVENTS)
        for key in self._problem_events.table_changed(built.report):
            enqueue(key)

    def _enqueuer(self, loop: str) -> Callable[[Hashable], None]:
        queue = self.loops[loop].queue

        def enqueue(key: Hashable) -> None:
            if self._active:
                queue.add(key)

        return enqueue

    def _enqueue_all_status(self) -> None:
        if self._active and STATUS in self.loops:
            for key in self.source.store("Ingress").keys():
                self.loops[STATUS].queue.add(key)

    def _enqueue_acme_gateways(self) -> None:
        """Every Gateway's key to the ACME loop (a resync; a GatewayClass changed, which may make a Gateway ours)."""
        if self._active and self._acme_gateways is not None:
            for ref in self._acme_gateways.keys():
                self.loops[ACME].queue.add(ref)

    def _enqueue_all(self) -> None:
        """Every key from the stores: on becoming leader and every resync period."""
        if not self._active:
            return
        if GENERATOR in self.loops:
            for key in self.source.store("Service").keys():
                self.loops[GENERATOR].queue.add(key)
        if STREAM_STATUS in self.loops:
            for key in self.source.store("StreamIngress").keys():
                self.loops[STREAM_STATUS].queue.add(key)
        if GATEWAY_STATUS in self.loops:
            for ref in self._gateway_status.keys():
                self.loops[GATEWAY_STATUS].queue.add(ref)
        if ACME in self.loops:
            for key in self.source.store("Ingress").keys():
                self.loops[ACME].queue.add(key)
            self._enqueue_acme_gateways()
        if PROBLEM_EVENTS in self.loops:
            for problem_key in self._problem_events.keys():
                self.loops[PROBLEM_EVENTS].queue.add(problem_key)
        self._enqueue_all_status()

    # -- leadership (election thread)

    def _started_leading(self) -> None:
        self._active = True
        self.metrics.leader.set(1)
        self.metrics.leader_transitions.inc()
        self._enqueue_all()
        self.reactor.callFromThread(self._start_resync)

    def _start_resync(self) -> None:
        if self._active and not self._resync.running:
            self._resync.start(self.options.resync_period, now=False)

    def _stopped_leading(self) -> None:
        self._active = False
        self.metrics.leader.set(0)
        for loop in self.loops.values():
            loop.queue.clear()
        self.reactor.callFromThread(self._stop_resync)

    def _stop_resync(self) -> None:
        if self._resync.running:
            self._resync.stop()


def _enqueue_ref(enqueue: Callable[[Hashable], None], kind: str, key: tuple[str, str]) -> None:
    """An informer's (namespace, name) key as the Gateway API status loop's key: the object's reference."""
    enqueue(ObjectRef(kind, *key))
