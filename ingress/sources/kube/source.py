# -*- test-case-name: tests.kube.test_routing_live -*-
"""
The cluster source: one L{Reflector} per kind, and the hand-over to the reactor.

Reflector threads call C{on_change}; that crosses to the reactor with
C{callFromThread}, where the builder debounces and coalesces: a burst of
changes becomes one or two builds.  Nothing is built until every informer has
synced, so the first table is never half a cluster - except for the optional
kinds (L{OPTIONAL_KINDS}: StreamIngress and the Gateway API kinds, whose CRDs may
not be installed, the Namespaces, and the stream ConfigMaps): one of those whose list is refused (404, 403) is
logged, reported in /readyz and retried with backoff, and holds up neither
the first table nor readiness; its streams come with its first good list.
Once every informer has listed (or been refused), that holds for good (L{synced}).
When the apiserver goes away the informers keep their stores and the proxy
keeps its last table (static stability); /readyz detail and metrics report it,
and the log says it once per informer and in one summary while it lasts
(L{Outage}).  The first informer that reaches the apiserver again wakes the
others out of their backoff, so that every watch is back within a second of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Optional

from twisted.application.service import Service
from twisted.logger import Logger

from ingress.model import ClusterState
from ingress.model.parse import KINDS
from ingress.observe.metrics import Metrics
from ingress.process.builder import TableBuilder
from ingress.sources.kube.client import KubeClient
from ingress.sources.kube.outage import Outage
from ingress.sources.kube.parts import Snapshots
from ingress.sources.kube.reflector import Reflector, Resource, Store

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

RESOURCES = (
    Resource("Ingress", "networking.k8s.io/v1", "ingresses"),
    Resource("IngressClass", "networking.k8s.io/v1", "ingressclasses", namespaced=False),
    Resource("Service", "v1", "services"),
    Resource("EndpointSlice", "discovery.k8s.io/v1", "endpointslices"),
    Resource("Secret", "v1", "secrets", field_selector="type=kubernetes.io/tls"),
    Resource("Secret", "v1", "secrets", field_selector="type=Opaque"),  # basic auth: auth-secret (auth-file, auth-map)
    Resource("StreamIngress", "twingress.io/v1alpha1", "streamingresses"),
    # Gateway API (its CRDs may not be installed); ReferenceGrant at v1beta1, which every release serves
    Resource("GatewayClass", "gateway.networking.k8s.io/v1", "gatewayclasses", namespaced=False),
    Resource("Gateway", "gateway.networking.k8s.io/v1", "gateways"),
    Resource("HTTPRoute", "gateway.networking.k8s.io/v1", "httproutes"),
    Resource("GRPCRoute", "gateway.networking.k8s.io/v1", "grpcroutes"),
    Resource("TLSRoute", "gateway.networking.k8s.io/v1", "tlsroutes"),
    Resource("TCPRoute", "gateway.networking.k8s.io/v1", "tcproutes"),
    Resource("UDPRoute", "gateway.networking.k8s.io/v1", "udproutes"),
    Resource("ReferenceGrant", "gateway.networking.k8s.io/v1beta1", "referencegrants"),
    Resource("Namespace", "v1", "namespaces", namespaced=False),  # labels, for allowedRoutes selectors
)

GATEWAY_KINDS = frozenset({"GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute", "ReferenceGrant", "Namespace"})
OPTIONAL_KINDS = frozenset({"StreamIngress", "ConfigMap"}) | GATEWAY_KINDS
"""Kinds whose refused list does not hold up the first table (see the module docstring)."""


def config_map_resource(name: str) -> Resource:
    """One named ConfigMap (an ingress-nginx stream map): a field selector on its name, in its namespace."""
    return Resource("ConfigMap", "v1", "configmaps", field_selector=f"metadata.name={name}")


def informer_name(reflector: Reflector) -> str:
    """The kind, or "ConfigMap namespace/name" for a single named object: metrics label and /readyz key."""
    return reflector.name


class KubeSource(Service):
    """Runs the informers and submits a snapshot of their stores on every change."""

    def __init__(
        self,
        client_factory: Callable[[], KubeClient],
        builder: TableBuilder,
        metrics: Metrics,
        reactor: Any,
        namespace: str = "",
        resources: tuple[Resource, ...] = RESOURCES,
        config_maps: Iterable[tuple[str, str]] = (),
        config_map_namespaces: Iterable[str] = (),
        rewrite: Optional[Callable[[ClusterState], ClusterState]] = None,
        secrets: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.client_factory = client_factory
        self.builder = builder
        self.metrics = metrics
        self.reactor = reactor
        self.namespace = namespace
        self.resources = resources
        # Every ConfigMap of these namespaces (the ingress-nginx ConfigMap's, for the maps its
        # add-headers and proxy-set-headers name), and single named ones elsewhere.
        self.config_map_namespaces = tuple(dict.fromkeys(config_map_namespaces))
        self.config_maps = tuple(key for key in dict.fromkeys(config_maps) if key[0] not in self.config_map_namespaces)
        self.secrets = tuple(dict.fromkeys(secrets))  # single named Secrets outside the watched namespace (the ACME challenge certificates')
        self.rewrite = rewrite  # each snapshot through it, on the build thread (the ACME answers: L{ingress.acme.answers})
        self.reflectors: list[Reflector] = []
        self._warned: set[str] = set()
        self._seen: dict[str, tuple[int, int]] = {}
        self._trigger: Optional[object] = None
        self._snapshots = Snapshots()  # each informer's part of the snapshot, following its store
        self._outage: Optional[Outage] = None
        self._synced = False

    def startService(self) -> None:
        super().startService()
        watched = [(resource, self.namespace) for resource in self.resources]
        watched += [(config_map_resource(name), namespace) for namespace, name in self.config_maps]
        watched += [(Resource("ConfigMap", "v1", "configmaps"), namespace) for namespace in self.config_map_namespaces]
        watched += [(Resource("Secret", "v1", "secrets", field_selector=f"metadata.name={name}"), namespace) for namespace, name in self.secrets]
        for resource, namespace in watched:
            reflector = Reflector(
                self.client_factory,
                resource,
                on_change=lambda: self.reactor.callFromThread(self._changed),
                on_status=lambda r: self.reactor.callFromThread(self._status, r),
                namespace=namespace,
            )
            self.reflectors.append(reflector)
            self.metrics.kube_connected.labels(informer_name(reflector)).set(0)
            reflector.start()
        # Their first on_status calls wait for the reactor, which runs them after this returns.
        self._outage = Outage(self.reactor, self.reflectors[0].client.server if self.reflectors else "")
        self._trigger = self.reactor.addSystemEventTrigger("before", "shutdown", self._stop_reflectors)
        log.info(
            "watching {kinds} in {scope}",
            kinds=", ".join(informer_name(r) for r in self.reflectors),
            scope=f"namespace {self.namespace}" if self.namespace else "all namespaces",
        )

    def stopService(self) -> Any:
        self._stop_reflectors()
        return super().stopService()

    def _stop_reflectors(self) -> None:
        if self._outage is not None:
            self._outage.stop()
        for reflector in self.reflectors:
            reflector.stop()

    def _reflector(self, kind: str) -> Reflector:
        for reflector in self.reflectors:
            if reflector.resource.kind == kind:
                return reflector
        raise KeyError(f"{kind} is not watched")

    def watches(self, kind: str) -> bool:
        return any(r.resource.kind == kind for r in self.reflectors)

    def store(self, kind: str) -> Store:
        """The informer store of C{kind}: what the controllers read instead of asking the API."""
        return self._reflector(kind).store

    def on_key(self, kind: str, listener: Callable[[tuple[str, str]], None]) -> None:
        """Call C{listener(key)} on the informer's thread for every changed object of C{kind}."""
        self._reflector(kind).key_listeners.append(listener)

    @property
    def synced(self) -> bool:
        """
        Every informer listed once; an optional one may have been refused instead (module
        docstring).  Once true, true for good: an optional kind that is not installed fails with a
        connection error, not a 404, while the apiserver is away, and that must neither stop the
        builds (a change that came meanwhile was dropped, and stayed unserved until some other
        change came: an Ingress written right after an apiserver restart, not live after 150 s) nor
        fail readiness (every node of a cluster without the Gateway API CRDs unready at once).
        """
        if not self._synced:
            self._synced = bool(self.reflectors) and all(r.synced or _refused(r) for r in self.reflectors)
        return self._synced

    def _changed(self) -> None:
        if self.synced:
            self.builder.submit(self.snapshot)

    def _status(self, reflector: Reflector) -> None:
        kind = informer_name(reflector)
        if not reflector.synced and _refused(reflector) and kind not in self._warned:
            self._warned.add(kind)
            log.warn(
                "{kind}: list refused ({error}); routing goes on without it and retries. {hint}",
                kind=kind,
                error=reflector.last_error,
                hint=(
                    "The Gateway API needs its CRDs (the release's standard-install.yaml) and RBAC to list and watch them"
                    if kind in GATEWAY_KINDS
                    else "StreamIngress needs its CRD (kubectl apply -k k8s/) and RBAC to list and watch it"
                ),
            )
            self._changed()  # it may have been the last informer the first table waited for
        self.metrics.kube_connected.labels(kind).set(1 if reflector.connected else 0)
        self._follow_outage(reflector, kind)
        relists, restarts = self._seen.get(kind, (0, 0))
        if reflector.relists > relists:
            self.metrics.kube_relists.labels(kind).inc(reflector.relists - relists)
        if reflector.watch_restarts > restarts:
            self.metrics.kube_watch_restarts.labels(kind).inc(reflector.watch_restarts - restarts)
        self._seen[kind] = (reflector.relists, reflector.watch_restarts)
        if not reflector.connected and reflector.last_error:
            self.metrics.source_errors.labels("kube").inc()

    def _follow_outage(self, reflector: Reflector, kind: str) -> None:
        """Count C{reflector} in or out of the outage; the first back wakes the others out of their backoff."""
        if self._outage is None:
            return
        failing = not reflector.connected and bool(reflector.last_error) and not _refused(reflector)
        if self._outage.update(kind, failing, reflector.last_error, len(self.reflectors)):
            for other in self.reflectors:
                other.wake()

    def snapshot(self) -> ClusterState:
        """
        Every store's values as one ClusterState (build thread).  Each informer's part follows its
        store by the keys written since the last snapshot (L{Snapshots}): one EndpointSlice moved
        costs that slice, the other kinds' values stay the very objects they were, and the
        snapshot says which keys were written (which the incremental build looks at, instead of
        every object).
        """
        state = self._snapshots.take((KINDS[(r.resource.api_version, r.resource.kind)], r.store) for r in self.reflectors)
        return state if self.rewrite is None else self.rewrite(state)

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """Ready once every informer synced; later disconnections are reported, not failed on."""
        informers = {
            informer_name(r): {
                "synced": r.synced,
                "connected": r.connected,
                "objects": len(r.store),
                **({"lastError": r.last_error, "failedTries": r.failures} if r.last_error and not r.connected else {}),
            }
            for r in self.reflectors
        }
        return self.synced, {"informers": informers}


def _refused(reflector: Reflector) -> bool:
    """An optional kind whose list the apiserver refused: not installed (404) or not allowed (403)."""
    return reflector.resource.kind in OPTIONAL_KINDS and reflector.last_error.startswith(("404", "403"))
