# -*- test-case-name: tests.proxy.test_acme -*-
"""
The ACME issuer without a cluster: which Ingresses need a certificate, one order at a time in a thread,
and the loopback responder the challenge routes send the validation requests to.

An Ingress annotated C{twingress.io/acme: "true"} gets, for each C{spec.tls[]} entry, a certificate for
the entry's hosts in its C{secretName} (a Secret manifest in the storage directory, which the manifests
source reads: the certificate store serves it by SNI from the next table on, no restart).  What cannot
be ordered (no C{spec.tls}, a wildcard host: HTTP-01 cannot prove one, DNS-01 is out of scope) is
logged once; a failed order is logged with the server's error and tried again after a backoff
(30 s, doubling to an hour, at least the server's C{Retry-After}: L{ingress.acme.schedule}), never in
a loop.  A stored certificate is ordered again at its renewal time (the server's renewalInfo, else two
thirds of its lifetime); the new one replaces it in one rename, so the old one is served until then.
The URL of an order in flight is kept in the storage directory, and so is a failed certificate's
backoff (its next order's time and its failures in a row): a restart resumes the order, and not
before that time.
"""

from __future__ import annotations

import base64
import datetime
from typing import Optional

from prometheus_client import Counter
from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.web.server import Site

from ingress.acme.answers import TokenAnswers
from ingress.acme.client import Attempt, Issued, fetch_token, order_certificate, renewal_again
from ingress.acme.options import AcmeSettings
from ingress.acme.schedule import POLL_FLOOR, Backoff, pause_of, pause_text
from ingress.acme.storage import (
    MANAGED_BY,
    account_key,
    renewal_poll_of,
    stored_backoff,
    stored_hosts,
    stored_order_url,
    stored_renewal,
    stored_secret,
    write_backoff,
    write_certificate,
    write_challenges,
    write_order_url,
)
from ingress.acme.tlsalpn import answers_handshake, publish_tls_alpn, write_tls_alpn
from ingress.model import ClusterState, Ingress
from ingress.routing.selection import select_ingresses
from ingress.runtime.reactor import IProcessReactor

log = Logger(namespace=__name__)
ANNOTATION = "twingress.io/acme"
CERT_MANAGER = ("cert-manager.io/issuer", "cert-manager.io/cluster-issuer")
RECHECK_SECONDS = 3600.0  # the longest sleep before renewal times are looked at again (a wall clock may jump)
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
        self._backoff = Backoff(clock=reactor.seconds)
        self._wake: Optional[IDelayedCall] = None  # the next renewal time
        self._reported: set[str] = set()
        self._restored: set[Entry] = set()  # the entries whose kept backoff this process has read
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
        if self._wake is not None and self._wake.active():
            self._wake.cancel()
        self._pool.stop()

    def consider(self, state: ClusterState) -> None:
        """Called from the build thread with each new state of the manifests."""
        self.reactor.callFromThread(self._consider, state)

    def _consider(self, state: ClusterState) -> None:
        self._state = state
        if self._busy is not None or self._port is None:
            return
        now = datetime.datetime.fromtimestamp(self.reactor.seconds(), datetime.UTC)
        renewals: list[datetime.datetime] = []
        for entry in self._wanted(state):
            self._restore(entry)
            if self._backoff.remaining(entry) > 0:  # its failure's callLater comes back for it
                continue
            if stored_hosts(self.settings.storage, entry[0], entry[1]) == entry[2]:
                renew_at = stored_renewal(self.settings.storage, entry[0], entry[1])
                if renew_at is None or renew_at > now:
                    poll_at = self._poll_time(entry)
                    if renew_at is not None and poll_at is not None and poll_at <= now:  # the server's window, asked for again
                        self._ask_again(entry, renew_at)
                        return
                    renewals.extend(when for when in (renew_at, poll_at) if when is not None)
                    continue
                log.info("acme: the certificate in Secret {namespace}/{name} is due for renewal (at {when})", namespace=entry[0], name=entry[1], when=renew_at.isoformat())
            self._order(entry)
            return
        self._wake_at(min(renewals) if renewals else None, now)

    def _poll_time(self, entry: Entry) -> Optional[datetime.datetime]:
        secret = stored_secret(self.settings.storage, entry[0], entry[1]) or {}
        return renewal_poll_of((secret.get("metadata") or {}).get("annotations") or {})

    def _ask_again(self, entry: Entry, renew_at: datetime.datetime) -> None:
        """The stored certificate's renewalInfo asked for again in the thread (RFC 9773 4.3.3); its Secret rewritten with what it says."""
        self._busy = entry
        d: Deferred[tuple[datetime.datetime, Optional[datetime.datetime]]] = deferToThreadPool(self.reactor, self._pool, self._renewal_again, entry, renew_at)
        d.addCallbacks(self._asked_again, self._not_asked_again, callbackArgs=(entry, renew_at), errbackArgs=(entry,))

    def _renewal_again(self, entry: Entry, renew_at: datetime.datetime) -> tuple[datetime.datetime, Optional[datetime.datetime]]:
        storage, (namespace, name, hosts) = self.settings.storage, entry
        secret = stored_secret(storage, namespace, name)
        if secret is None:
            raise ValueError(f"Secret {namespace}/{name}: not readable in the storage directory")
        chain_pem, key_pem = (base64.b64decode(secret["data"][field]) for field in ("tls.crt", "tls.key"))
        key, _ = account_key(storage, self.settings.directory)
        new_at, poll_at = renewal_again(self.settings, chain_pem, key, renew_at)
        write_certificate(storage, namespace, name, chain_pem, key_pem, hosts, self.settings.directory, new_at, poll_at)
        return new_at, poll_at

    def _asked_again(self, answer: tuple[datetime.datetime, Optional[datetime.datetime]], entry: Entry, was: datetime.datetime) -> None:
        self._busy = None
        log.info("acme: renewalInfo of the certificate in Secret {namespace}/{name} asked for again: renewal at {renew_at} (was {was}); next check {poll}",
                 namespace=entry[0], name=entry[1], renew_at=answer[0].isoformat(), was=was.isoformat(), poll=answer[1].isoformat() if answer[1] else "none")
        self._again()

    def _not_asked_again(self, failure: Failure, entry: Entry) -> None:
        self._busy = None
        log.error("acme: renewalInfo of the certificate in Secret {namespace}/{name} not asked for again: {error}", namespace=entry[0], name=entry[1], error=str(failure.value))
        self.reactor.callLater(POLL_FLOOR, self._again)  # not at once: the same error would come back

    def _restore(self, entry: Entry) -> None:
        """Once per entry and process: take up the backoff a process before this one kept (a restart orders no sooner)."""
        if entry in self._restored:
            return
        self._restored.add(entry)
        pause = pause_of(stored_backoff(self.settings.storage, entry[0], entry[1]), entry[2])
        if pause is None:
            return
        self._backoff.restore(entry, pause)
        wait = self._backoff.remaining(entry)
        if wait > 0:
            log.info("acme: the certificate for {hosts} waits the backoff kept from before ({failures} failed orders): the next order in {wait:.0f}s",
                     hosts=", ".join(entry[2]), failures=pause.failures, wait=wait)
            self.reactor.callLater(wait, self._again)

    def _wake_at(self, when: Optional[datetime.datetime], now: datetime.datetime) -> None:
        """Look again at the next renewal time (at most an hour from now)."""
        if self._wake is not None and self._wake.active():
            self._wake.cancel()
        self._wake = None
        if when is not None:
            self._wake = self.reactor.callLater(min(max((when - now).total_seconds(), 0.0), RECHECK_SECONDS), self._again)

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
        storage, namespace, name = self.settings.storage, entry[0], entry[1]
        attempt = Attempt(on_order=lambda url: write_order_url(storage, namespace, name, url))
        d: Deferred[Issued] = deferToThreadPool(self.reactor, self._pool, self._issue, entry, attempt)
        d.addCallbacks(self._issued, self._failed, callbackArgs=(entry,), errbackArgs=(entry, attempt))

    def _issue(self, entry: Entry, attempt: Attempt) -> Issued:
        storage, (namespace, name, hosts) = self.settings.storage, entry
        resume = stored_order_url(storage, namespace, name)
        issued = order_certificate(self.settings, hosts, self._publish, self._self_check, attempt=attempt, resume=resume)
        write_certificate(storage, namespace, name, issued.chain_pem, issued.key_pem, hosts, self.settings.directory, issued.renew_at, issued.poll_at)
        write_order_url(storage, namespace, name, "")  # finished: nothing to resume
        write_backoff(storage, namespace, name, "")  # and nothing to wait for
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
        self._backoff.succeeded(entry)
        log.info(
            "acme: certificate for {hosts} issued into Secret {namespace}/{name} in {seconds:.1f}s, {requests} requests to the ACME server; renewal at {renew_at} ({source})",
            hosts=", ".join(entry[2]), namespace=entry[0], name=entry[1], seconds=issued.seconds, requests=issued.requests,
            renew_at=issued.renew_at.isoformat() if issued.renew_at else "?", source=issued.renewal_source,
        )
        if issued.bad_nonces:
            log.info("acme: {count} badNonce answers retried with the server's fresh nonce in that order", count=issued.bad_nonces)
        self._again()

    def _failed(self, failure: Failure, entry: Entry, attempt: Attempt) -> None:
        self._busy = None
        if self.orders is not None:
            self.orders.labels("failed").inc()
        wait = self._backoff.failed(entry, attempt.retry_after, attempt.rate_limited)
        self._keep_backoff(entry)
        error = " ".join(str(failure.value).split()) or repr(failure.value)
        asked = f" (the server asked for {attempt.retry_after:.0f}s)" if attempt.retry_after is not None else " (rateLimited)" if attempt.rate_limited else ""
        log.error(
            "acme: ordering a certificate for {hosts} failed: {error}; trying again in {wait:.0f}s{asked}, {requests} requests to the ACME server",
            hosts=", ".join(entry[2]), error=error, wait=wait, asked=asked, requests=attempt.requests,
        )
        self.reactor.callLater(wait, self._again)
        self._again()

    def _keep_backoff(self, entry: Entry) -> None:
        """The failed entry's backoff into the storage directory, where a restarted process reads it (L{_restore})."""
        pause = self._backoff.pause(entry)
        if pause is None:
            return
        try:
            write_backoff(self.settings.storage, entry[0], entry[1], pause_text(pause, entry[2]))
        except OSError as error:
            log.error("acme: the backoff of {hosts} not kept ({error}): a restart would order sooner", hosts=", ".join(entry[2]), error=str(error))

    def _again(self) -> None:
        if self._state is not None and self.running:
            self._consider(self._state)

