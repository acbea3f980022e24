# -*- test-case-name: tests.proxy.test_config_problems -*-
"""
twistd wiring: C{twistd -n ingress [options]} builds one MultiService with a
child per listener and per source.

Listeners are endpoint descriptions (strports); an empty value turns one off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, Optional, cast

from twisted.application.service import IService, MultiService, Service
from twisted.python import usage

from ingress import __version__
from ingress.acme.wiring import acme_settings, manifests_source
from ingress.controllers.acmewiring import challenge_secrets, cluster_answers, with_acme
from ingress.controllers.manager import ControllerManager, ControllerOptions
from ingress.controllers.metrics import ControllerMetrics
from ingress.controllers.options import controller_options
from ingress.model import ClusterState
from ingress.observe.accesslog import AccessLog
from ingress.observe.admin import Admin
from ingress.observe.logs import LOG_FORMATS, LoggingRoot
from ingress.observe.metrics import Metrics, created_series
from ingress.observe.nginx_metrics import NginxMetrics, controller_identity, gauge_total, recorder, served_certificates
from ingress.observe.startup import announce, listening, summary, turned_off
from ingress.options import PARAMETERS, build_arguments, given_once, given_options, grouped_usage, listener_port, table_options, take_over
from ingress.process.adoption import Handing, Scrapes, handover_options, opened_sockets, serve_adopted, serve_metrics
from ingress.process.builder import TableBuilder
from ingress.process.cpus import worker_count
from ingress.process.dataplane import ListenerOptions, data_plane
from ingress.process.drain import GracefulShutdown
from ingress.process.streamports import WorkerStreams, primary_streams
from ingress.process.streamsockets import ClosedAtDrain, inherited_streams
from ingress.process.workerconfig import worker_pool
from ingress.proxy.options import http2_settings, positive_float, proxy_settings, seconds
from ingress.proxy.request.accesslines import FORMATS as ACCESS_LOG_FORMATS
from ingress.proxy.request.settings import ProxySettings
from ingress.proxy.request.upstream import UpstreamPool
from ingress.proxy.streams.listeners import StreamListeners
from ingress.proxy.tls.expiry import certificate_secrets
from ingress.routing import build
from ingress.routing.incremental import IncrementalBuild
from ingress.routing.report import Built
from ingress.routing.table import RoutingTable
from ingress.runtime.live import LiveTable
from ingress.runtime.reactor import IProcessReactor
from ingress.runtime.sockets import check_listener, listen
from ingress.sources.kube.client import KubeClient
from ingress.sources.kube.handoverkey import fetch_handover_key
from ingress.sources.kube.source import KubeSource
from ingress.speedups.heap import FrozenWatch

_CHECKED: list[tuple[str, Callable[[str], float]]] = [
    ("poll-interval", positive_float),
    ("shutdown-delay", seconds),
    ("drain-timeout", seconds),
    ("stream-drain-timeout", seconds),
]

class Options(usage.Options):
    """Command line of C{twistd ingress}."""

    synopsis = "[options]"
    longdesc = (
        "twingress: a Kubernetes ingress proxy with an embedded controller. "
        "Routes HTTP, TLS and TCP/UDP streams by Ingress and Gateway API objects read from a manifests "
        "directory (--manifests) or a cluster (--kubeconfig, or in a pod its service account). "
        "Booleans take true or false."
    )
    optParameters: list[list[Any]] = PARAMETERS  # by topic: L{ingress.options}
    given: frozenset[str] = frozenset()  # the options the line gives: --take-over-ingress-nginx sets the others

    def parseOptions(self, options: Optional[list[str]] = None) -> None:
        """
        As twistd's subcommand (it sets C{parent}), a bad command line is one line
        on stderr and exit status 1: twistd would print its whole help text above
        the error.  Used directly (tests, embedding), it raises L{usage.UsageError}.
        """
        try:
            arguments = sys.argv[1:] if options is None else options
            given_once(self, arguments, ("manifests", "kubeconfig"))
            self.given = given_options(self, arguments)
            super().parseOptions(options)
        except usage.UsageError as error:
            if getattr(self, "parent", None) is None:
                raise
            raise SystemExit(f"twistd ingress: {error} (see twistd ingress --help)") from None

    def opt_version(self) -> None:
        """Print the version and exit."""
        print(f"twingress {__version__}")
        raise SystemExit(0)

    def opt_http2_cleartext(self) -> None:
        """The old spelling of --h2c true (still accepted)."""
        self["h2c"] = "true"

    def getUsage(self, width: Optional[int] = None) -> str:
        """--help by topic (listeners, source, controllers, limits, TLS, HTTP/2, workers, migration, logs)."""
        return grouped_usage(self, width)

    def postOptions(self) -> None:
        take_over(self, self.given)
        for option, convert in _CHECKED:
            try:
                self[option] = convert(str(self[option]))
            except ValueError as error:  # named here: twistd's own coercion error does not say which option
                raise usage.UsageError(f"--{option}: {error}") from None
        table_options(self)  # shared with twingress audit (L{ingress.options.table_options})
        self["acme"] = acme_settings(self, self["source"])
        try:
            self["worker-count"] = worker_count(self["workers"])
        except ValueError as error:
            raise usage.UsageError(f"--workers: {error}") from None
        for name in ("http", "https", "admin", "metrics"):
            if self[name]:
                check_listener(name, self[name], shared=self["worker-count"] > 1 and name in ("http", "https"), handover=bool(self["handover"]) and name != "admin")
        if not (self["http"] or self["https"] or self["admin"]):
            raise usage.UsageError(
                "--http, --https and --admin are all off: nothing would answer, and nothing would say whether the stream ports opened"
                " (keep --admin for a stream-only node)"
            )
        handover_options(self)
        for option in ("nginx-metrics", "metrics-created"):
            if self[option] not in ("true", "false"):
                raise usage.UsageError(f"--{option} must be true or false")
        if self["tls-min-version"] not in ("1.2", "1.3"):
            raise usage.UsageError("--tls-min-version must be 1.2 or 1.3")
        for option, choices in (("log-format", LOG_FORMATS), ("access-log-format", ACCESS_LOG_FORMATS)):
            if self[option] not in choices:
                raise usage.UsageError(f"--{option} must be one of: {', '.join(choices)}")
        if self["access-log"] not in ("-", "off"):
            _check_writable(self["access-log"])
        self["settings"] = proxy_settings(self, self._https_redirect_port())
        self["controllers"] = controller_options(self, self["ingress-class"], self["controller-name"])
        self["http2-settings"] = http2_settings(self)

    def _https_redirect_port(self) -> Optional[int]:
        """--https-redirect-port, or the HTTPS listener's own port: a redirect must reach the listener."""
        value = self["https-redirect-port"]
        if value is None:
            return listener_port(self["https"] or "")
        if not value.isdigit() or not 0 < int(value) < 65536:
            raise usage.UsageError(f"--https-redirect-port: {value!r} is not a port number")
        return int(value)


class _BuilderService(Service):
    """Starts and stops the build thread with the application."""

    def __init__(self, builder: TableBuilder) -> None:
        self.builder = builder

    def startService(self) -> None:
        super().startService()
        self.builder.start()

    def stopService(self) -> Any:
        self.builder.stop()
        return super().stopService()


class _Announce(Service):
    """The first lines of the log: what is served from where, by how many processes, and which listeners are off."""

    def __init__(self, *lines: str) -> None:
        self.lines = lines

    def privilegedStartService(self) -> None:  # before the listeners' lines: they listen in this phase
        super().privilegedStartService()
        for line in self.lines:
            announce.info("{line}", line=line)


def _check_writable(path: str) -> None:
    """Refuse an access log path that cannot be opened at the command line, not at first request."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError as error:
        raise usage.UsageError(f"--access-log {path!r}: {error.strerror} (give -, a writable path or off)") from None


def makeService(options: Options, reactor: Optional[IProcessReactor] = None) -> IService:
    """Wire listeners, sources and the builder into one MultiService."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        # The global reactor provides each of IProcessReactor's parts; it does not declare the union.
        reactor = cast(IProcessReactor, default_reactor)
    settings: ProxySettings = options["settings"]
    metrics = Metrics()
    live = LiveTable()
    build_options = replace(build_arguments(options), acme_challenges=options["acme"] is not None)  # the audit builds with the same (L{ingress.audit}), less ACME

    def build_table(state: ClusterState, generation: int) -> Built:
        return build(state, build_options, generation)

    builder = TableBuilder(reactor, live, metrics, IncrementalBuild(build_table))  # EndpointSlice-only changes skip the build
    metrics.table_routes.set_function(lambda: _route_count(live.table))  # counted when scraped, not per build (3 ms at 10k hosts)
    created_series(options["metrics-created"] == "true")
    top = LoggingRoot(options["log-format"], options.parent)
    _Announce(summary(options), *turned_off(options)).setServiceParent(top)
    access_log = None
    if options["access-log"] != "off" and options["worker-count"] == 1:  # with workers, each writes its own lines
        access_log = AccessLog(reactor, options["access-log"], ACCESS_LOG_FORMATS[options["access-log-format"]])
        access_log.setServiceParent(top)
        live.subscribe(access_log.use_table)  # the ConfigMap's log-format-upstream
    _BuilderService(builder).setServiceParent(top)
    FrozenWatch(reactor, metrics.collector).setServiceParent(top)  # each build freezes what is alive; this guards against a leak
    nginx = _nginx_metrics(options, metrics)
    if nginx is not None:
        live.subscribe(lambda table: nginx.table_swapped(table.generation))
    admin = Admin(live, metrics)
    pool = UpstreamPool(reactor, settings)
    # Subscribed before the controllers, so a table's bind failures are known when status is written.
    stream_sockets, streams = primary_streams(reactor, options, metrics, pool, live, builder.preparers)  # bound by the primary, served by whom
    admin.route_sections["streamListeners"] = streams.to_json
    admin.route_views.append(streams.show)
    admin.route_sections["certificateSecrets"] = lambda: certificate_secrets(live.table)
    if options["source"] == "manifests":
        manifests_source(options, builder, metrics, reactor).setServiceParent(top)
    else:
        kubeconfig = options["kubeconfig"]
        fetch_handover_key(options, lambda: KubeClient(kubeconfig))  # --handover-key-secret: before the hand-over below
        watched_maps = [k for k in (options["tcp-services-configmap-key"], options["udp-services-configmap-key"], options["nginx-configmap-key"]) if k]
        controllers: Optional[ControllerOptions] = options["controllers"]
        answers = cluster_answers(options, reactor, controllers, watched_maps)  # --acme-directory: every node answers the leader's tokens
        if answers is not None:
            answers.setServiceParent(top)  # listening before the first snapshot is rewritten
        source = KubeSource(
            lambda: KubeClient(kubeconfig),
            builder,
            metrics,
            reactor,
            options["watch-namespace"],
            config_maps=watched_maps,
            config_map_namespaces=[options["nginx-configmap-key"][0]] if options["nginx-configmap-key"] else [],
            rewrite=answers.rewrite if answers is not None else None,
            secrets=challenge_secrets(options, answers),
        )
        source.setServiceParent(top)
        admin.add_check(source.readiness)
        if controllers is not None:
            manager = ControllerManager(
                lambda: KubeClient(kubeconfig), source, with_acme(options, controllers), ControllerMetrics(metrics.registry), reactor, live,
                listen_failures=lambda: streams.failures,
            )
            manager.setServiceParent(top)
    listeners: list[IService] = []
    drainables: list[Any] = [streams, ClosedAtDrain(stream_sockets)] if isinstance(streams, StreamListeners) else []
    taken, shared = opened_sockets(options, pooled=isinstance(streams, WorkerStreams))  # --handover: a blocking exchange, bounded
    stream_sockets.inherited = inherited_streams(taken)
    if isinstance(streams, WorkerStreams):
        workers = worker_pool(reactor, options, settings, metrics, shared, stream_sockets)
        streams.reported = workers.stream_failures
        workers.setServiceParent(top)
        live.subscribe(workers.publish)
        builder.preparers.append(workers.prepare)  # the change for the workers found and pickled off the reactor
        admin.add_check(workers.readiness)
        admin.route_sections["workers"] = workers.to_json
        admin.worker_metrics = workers.collect
        drainables.append(workers)
        handing = Handing(shared, taken, lambda: all(slot.served for slot in workers.slots), partial(setattr, workers, "shared"), stream_sockets.listed)
        return _finish(reactor, options, top, admin, listeners, drainables, handing)
    plane = data_plane(
        reactor, live, pool, settings, metrics, recorder(access_log, nginx),
        ListenerOptions(
            http=bool(options["http"]), https=bool(options["https"]), tls_min_version=options["tls-min-version"], tls_ciphers=options["tls-ciphers"],
            behind_proxy=frozenset(name for name in ("http", "https") if (options[name] or "").startswith("haproxy:")), http2=options["http2-settings"],
        ),
    )
    drainables.extend(plane.drainables)
    if nginx is not None and plane.store is not None:
        nginx.certificates = served_certificates(metrics, plane.store)
    streams.gateway_listener = plane.gateway_listener  # the stream listeners open Gateway ports with it
    builder.preparers.append(plane.prepare)  # TLS contexts are built on the build thread
    if plane.store is not None:
        admin.route_views.append(plane.store.show)
    listeners.extend(serve_adopted(reactor, shared, {"http": plane.http, "https": plane.https}, lambda name: partial(listening, name, options), live, top))
    if plane.http is not None and not shared:
        listeners.append(listen(reactor, options["http"], plane.http, top, "http", partial(listening, "http", options)))
    if plane.https is not None and not shared:
        listeners.append(listen(reactor, options["https"], plane.https, top, "https", partial(listening, "https", options)))
    handing = Handing(shared, taken, lambda: live.ready and all(getattr(each, "port", None) is not None for each in listeners), more=stream_sockets.listed)
    return _finish(reactor, options, top, admin, listeners, drainables, handing)


def _finish(reactor: IProcessReactor, options: Options, top: MultiService, admin: Admin, listeners: list[IService], drainables: list[Any], handing: Handing) -> MultiService:
    """The drain, the hand-over's rendezvous (--handover) and the admin listener, last: the same with and without worker processes."""
    scrapes = Scrapes(admin.metrics_site())
    listeners.extend(serve_metrics(reactor, options, handing, scrapes, top, partial(listening, "metrics", options)))  # --metrics: handed over, stops with the others
    drainables.append(scrapes)  # its scrapes in progress are answered first
    after, wait = options["after-handover"], options["handover-wait"]
    shutdown = GracefulShutdown(reactor, listeners, drainables, options["shutdown-delay"], options["drain-timeout"], handover_wait=wait, after_handover=after)
    shutdown.setServiceParent(top)
    admin.add_check(shutdown.readiness)
    if options["handover"]:
        handing.listener(reactor, options["handover"], options["handover-key"], shutdown).setServiceParent(top)
    if options["admin"]:
        listen(reactor, options["admin"], admin.site(), top, "admin", partial(listening, "admin", options))
    return top


def _route_count(table: RoutingTable) -> int:
    groups = list(table.hosts.values()) + list(table.wildcards.values())
    if table.any_host is not None:
        groups.append(table.any_host)
    return sum(len(g.exact) + len(g.prefixes) for g in groups) + (1 if table.default_route else 0)


def _nginx_metrics(options: Options, metrics: Metrics) -> Optional[NginxMetrics]:
    """ingress-nginx's metric families (C{--nginx-metrics true}), registered with this process's metrics; else None."""
    if options["nginx-metrics"] != "true":
        return None
    nginx = NginxMetrics(controller_identity(controller_class=options["ingress-class"]), lambda: gauge_total(metrics.open_connections))
    metrics.registry.register(nginx)
    return nginx
