# -*- test-case-name: tests.proxy.test_acme -*-
"""
The ACME issuer without a cluster: which Ingresses need a certificate, one order at a time in a thread,
and the loopback responder the challenge routes send the validation requests to.

An Ingress annotated C{twingress.io/acme: "true"} gets, for each C{spec.tls[]} entry, a certificate for
the entry's hosts in its C{secretName} (a Secret manifest in the storage directory, which the manifests
source reads: the certificate store serves it by SNI from the next table on, no restart).  What cannot
be ordered (no C{spec.tls}, a wildcard host: HTTP-01 cannot prove one, DNS-01 is out of scope) is
logged once; a failed order is logged with the server's error and tried again after a backoff
(30 s, doubling to an hour), never in a loop.
"""

from __future__ import annotations

import time
from typing import Optional

from prometheus_client import Counter
from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.web.server import Site

from ingress.acme.answers import TokenAnswers
from ingress.acme.client import Issued, fetch_token, order_certificate
from ingress.acme.options import AcmeSettings
from ingress.acme.storage import MANAGED_BY, stored_hosts, write_certificate, write_challenges
from ingress.acme.tlsalpn import answers_handshake, publish_tls_alpn, write_tls_alpn
from ingress.model import ClusterState, Ingress
from ingress.routing.selection import select_ingresses
from ingress.runtime.reactor import IProcessReactor

log = Logger(namespace=__name__)
ANNOTATION = "twingress.io/acme"
CERT_MANAGER = ("cert-manager.io/issuer", "cert-manager.io/cluster-issuer")
FIRST_BACKOFF, LAST_BACKOFF = 30.0, 3600.0
Entry = tuple[str, str, tuple[str, ...]]  # namespace, secretName, hosts


class AcmeIssuer(Service):
    """Orders the certificates the manifests ask for (L{consider}: each new state), one at a time."""

    def __init__(
        self, settings: AcmeSettings, reactor: IProcessReactor, http_port: int, class_name: str, controller_name: str, https_port: int = 0,
        orders: Optional[Counter] = None,
    ) -> None:
        self.settings = settings
        self.orders = orders  # twingress_acme_orders_total{result}
        self.https_port = https_port  # where the TLS-ALPN-01 self check handshakes
        self.serves = (class_name, controller_name)  # only the Ingresses of this controller's class are ordered for
        self.reactor = reactor
        self.http_port = http_port
        self.responder = TokenAnswers()
        self._port: Optional[IListeningPort] = None
        self._pool = ThreadPool(minthreads=0, maxthreads=1, name="acme")
        self._busy: Optional[Entry] = None
        self._retry: dict[Entry, tuple[float, float]] = {}  # entry: (not before, next backoff)
        self._reported: set[str] = set()
        self._state: Optional[ClusterState] = None

    def startService(self) -> None:
        super().startService()
        write_challenges(self.settings.storage, {}, "")  # tokens a killed process left are stale: their responder is gone
        write_tls_alpn(self.settings.storage, {})  # and so are its challenge certificates: their order is gone
        site = Site(self.responder)
        self._port = self.reactor.listenTCP(0, site, interface="127.0.0.1")  # type: ignore[arg-type]  # Site is a ServerFactory; its stubs say HTTPChannel
        self._pool.start()

    def stopService(self) -> None:
        super().stopService()
        if self._port is not None:
            self._port.stopListening()
        self._pool.stop()

    def consider(self, state: ClusterState) -> None:
        """Called from the build thread with each new state of the manifests."""
        self.reactor.callFromThread(self._consider, state)

    def _consider(self, state: ClusterState) -> None:
        self._state = state
        if self._busy is not None or self._port is None:
            return
        for entry in self._wanted(state):
            not_before, _ = self._retry.get(entry, (0.0, FIRST_BACKOFF))
            if stored_hosts(self.settings.storage, entry[0], entry[1]) == entry[2] or time.monotonic() < not_before:
                continue
            self._order(entry)
            return

    def _wanted(self, state: ClusterState) -> list[Entry]:
        """The spec.tls entries of the annotated Ingresses that can be ordered by HTTP-01; the others reported once."""
        wanted: list[Entry] = []
        for ingress in select_ingresses(state, class_name=self.serves[0], controller_name=self.serves[1]):
            if ingress.meta.annotations.get(ANNOTATION) != "true":
                continue
            if any(key in ingress.meta.annotations for key in CERT_MANAGER):
                carried = " and ".join(key for key in CERT_MANAGER if key in ingress.meta.annotations)
                self._report(f"Ingress {ingress.meta.namespace}/{ingress.meta.name}: it carries {carried}: cert-manager's, not ordered here")
                continue
            wanted.extend(entry for entry in self._entries(ingress) if self._ours_or_free(ingress, entry, state))
        return wanted

    def _ours_or_free(self, ingress: Ingress, entry: Entry, state: ClusterState) -> bool:
        """Whether the entry's Secret is free or twingress's: a Secret someone else wrote is never overwritten."""
        found = state.secrets.get((entry[0], entry[1])) or state.opaque_secrets.get((entry[0], entry[1]))
        if found is None or all(found.meta.labels.get(key) == value for key, value in MANAGED_BY.items()):
            return True
        label = ", ".join(f"{key}={value}" for key, value in MANAGED_BY.items())
        self._report(f"Ingress {ingress.meta.namespace}/{ingress.meta.name}: Secret {entry[0]}/{entry[1]} exists and is not twingress's (no {label} label); not overwritten, nothing ordered")
        return False

    def _entries(self, ingress: Ingress) -> list[Entry]:
        name = f"{ingress.meta.namespace}/{ingress.meta.name}"
        if not ingress.tls:
            self._report(f"Ingress {name}: {ANNOTATION} needs spec.tls (the hosts and the secretName to put the certificate in); nothing ordered")
        entries = []
        for tls in ingress.tls:
            hosts = tuple(sorted({host.lower() for host in tls.hosts}))
            if not hosts or not tls.secret_name:
                self._report(f"Ingress {name}: a spec.tls entry without hosts or secretName; nothing ordered for it")
            elif any(host.startswith("*") for host in hosts):
                self._report(f"Ingress {name}: {', '.join(hosts)}: a wildcard needs the DNS-01 challenge, which twingress does not implement (out of scope); nothing ordered")
            else:
                entries.append((ingress.meta.namespace, tls.secret_name, hosts))
        return entries

    def _report(self, message: str) -> None:
        if message not in self._reported:  # once, not at each new state
            self._reported.add(message)
            log.error("acme: {message}", message=message)

    def _order(self, entry: Entry) -> None:
        self._busy = entry
        log.info("acme: ordering a certificate for {hosts} from {directory} by {challenge}", hosts=", ".join(entry[2]), directory=self.settings.directory, challenge=self.settings.challenge)
        d: Deferred[Issued] = deferToThreadPool(self.reactor, self._pool, self._issue, entry)
        d.addCallbacks(self._issued, self._failed, callbackArgs=(entry,), errbackArgs=(entry,))

    def _issue(self, entry: Entry) -> Issued:
        issued = order_certificate(self.settings, entry[2], self._publish, self._self_check)
        write_certificate(self.settings.storage, entry[0], entry[1], issued.chain_pem, issued.key_pem, entry[2], self.settings.directory)
        return issued

    def _publish(self, tokens: dict[str, tuple[str, str]]) -> None:
        """(Order thread.) The answers into the responder, the tokens into the challenges manifest, which the table reads."""
        if self.settings.challenge == "tls-alpn-01":  # the challenge certificates into their manifest instead
            publish_tls_alpn(self.settings.storage, tokens)
            return
        assert self._port is not None
        address = self._port.getHost()
        assert isinstance(address, (IPv4Address, IPv6Address))  # the responder listens on TCP
        self.responder.answers = {token: answer for token, (_, answer) in tokens.items()}  # replaced whole: the reactor reads it
        write_challenges(self.settings.storage, {token: host for token, (host, _) in tokens.items()}, f"{address.host}:{address.port}")

    def _self_check(self, host: str, token: str, answer: str) -> bool:
        if not self.running:  # stopping: end the order here rather than hold the shutdown up for the check's deadline
            raise ValueError("twingress is stopping")
        if self.settings.challenge == "tls-alpn-01":
            return answers_handshake(self.settings.tls_self_check_host, self.https_port, host, answer)
        return fetch_token(self.settings.self_check_host, self.http_port, host, token, answer)

    def _issued(self, issued: Issued, entry: Entry) -> None:
        self._busy = None
        if self.orders is not None:
            self.orders.labels("issued").inc()
        self._retry.pop(entry, None)
        log.info(
            "acme: certificate for {hosts} issued into Secret {namespace}/{name} in {seconds:.1f}s, {requests} requests to the ACME server",
            hosts=", ".join(entry[2]), namespace=entry[0], name=entry[1], seconds=issued.seconds, requests=issued.requests,
        )
        if issued.bad_nonces:
            log.info("acme: {count} badNonce answers retried with the server's fresh nonce in that order", count=issued.bad_nonces)
        self._again()

    def _failed(self, failure: Failure, entry: Entry) -> None:
        self._busy = None
        if self.orders is not None:
            self.orders.labels("failed").inc()
        _, backoff = self._retry.get(entry, (0.0, FIRST_BACKOFF))
        self._retry[entry] = (time.monotonic() + backoff, min(backoff * 2, LAST_BACKOFF))
        error = " ".join(str(failure.value).split()) or repr(failure.value)
        log.error("acme: ordering a certificate for {hosts} failed: {error}; trying again in {backoff:.0f}s", hosts=", ".join(entry[2]), error=error, backoff=backoff)
        self.reactor.callLater(backoff, self._again)
        self._again()

    def _again(self) -> None:
        if self._state is not None and self.running:
            self._consider(self._state)

