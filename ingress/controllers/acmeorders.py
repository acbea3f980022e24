# -*- test-case-name: tests.kube.test_acme_cluster -*-
"""
The ACME controller (leader only): certificates for the Ingresses that ask, by HTTP-01 or TLS-ALPN-01, answered by every node.

An Ingress of our class annotated C{twingress.io/acme: "true"} gets, for each C{spec.tls[]} entry, a
certificate for the entry's hosts in its C{secretName}.  Nothing else is touched: an Ingress without
the annotation is never read further; one carrying C{cert-manager.io/issuer} or
C{cert-manager.io/cluster-issuer} is cert-manager's (logged once); a Secret twingress did not
create is refused (a Warning Event on the Ingress, a log line, C{twingress_acme_refused_total}).
What cannot be ordered is a Warning Event and nothing else: an annotation without C{spec.tls}, a
wildcard host (HTTP-01 cannot prove one; DNS-01 is out of scope).
A Gateway with the same annotation asks the same for its HTTPS listeners' hostnames
(L{ingress.controllers.acmegateways}), ordered, renewed and refused by the same code.

An order (L{ingress.acme.client.order_certificate}, blocking: it runs in this controller's one loop
thread, so that one order at a time owns the tokens' ConfigMap) publishes its tokens, then fetches
each through every ready twingress pod's address (the pods the status controller publishes) on the
--http port until each answers it (TLS-ALPN-01: handshakes with each on --https offering only
C{acme-tls/1}, SNI the host, until each shows the certificate with the expected acmeIdentifier digest;
L{ingress.acme.tlsalpn_cluster}), and only then asks the server to validate: a node that does not
answer within the deadline fails the order with an Event naming it, before the CA spends a failed
validation.  A failed order is an Event with the server's error, and that certificate waits its
backoff (L{ingress.acme.schedule}: 30 s doubling to an hour, at least the server's C{Retry-After}):
a sync before then (an Ingress change, a status write, a resync) orders nothing and queues the key
again for the end of the wait.  An issued certificate is ordered again at its renewal time (the
Secret's C{acme.twingress.io/renew-after}: the server's renewalInfo, else two thirds of its
lifetime), the key queued for then; the Secret is replaced in one write, so every node serves the
old certificate until the new one is there.  The URL of an order in flight is kept on the account
Secret (L{ingress.controllers.acmesecrets}), so a new leader resumes it instead of placing another;
so is a failed certificate's backoff, which a new leader reads before it orders and waits out.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Union

from twisted.logger import Logger

from ingress.acme.client import SELF_CHECK_SECONDS, Attempt, Issued, fetch_token, order_certificate, renewal_again
from ingress.acme.issuer import ANNOTATION, CERT_MANAGER, RECHECK_SECONDS
from ingress.acme.options import AcmeSettings
from ingress.acme.schedule import RENEW_AFTER_ANNOTATION, RENEWAL_INFO_ANNOTATION, Backoff, pause_of, pause_text
from ingress.acme.storage import certificate_secret, renewal_of, renewal_poll_of
from ingress.acme.tlsalpn import answers_handshake
from ingress.controllers.acmesecrets import ClusterStore, is_ours
from ingress.controllers.events import NORMAL, WARNING, EventRecorder
from ingress.controllers.leader import NotLeader
from ingress.controllers.metrics import ControllerMetrics
from ingress.controllers.status import PublishedAddresses
from ingress.model import ClusterState, Ingress, IngressClass, Pod
from ingress.model.gateway import Gateway
from ingress.routing.selection import select_ingresses
from ingress.sources.kube.reflector import Store

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

HOSTS_ANNOTATION, ISSUER_ANNOTATION = "acme.twingress.io/hosts", "acme.twingress.io/issuer"
Subject = Union[Ingress, Gateway]
"""What asks for certificates: an Ingress (its spec.tls entries), a Gateway (L{ingress.controllers.acmegateways}: its HTTPS listeners)."""


def queue_key(subject: Subject) -> Hashable:
    """The ACME loop's key of C{subject}: an Ingress's informer key (namespace, name), a Gateway's reference."""
    return (subject.meta.namespace, subject.meta.name) if isinstance(subject, Ingress) else subject.ref


@dataclass(frozen=True)
class AcmeControllerOptions:
    """The issuer's settings, and the --http port every node's listener holds (where the check fetches the tokens)."""

    settings: AcmeSettings
    http_port: int
    https_port: int = 0  # where the TLS-ALPN-01 check handshakes (--acme-challenge tls-alpn-01)


def node_addresses(published: PublishedAddresses, own: str) -> tuple[str, ...]:
    """The ready twingress pods' addresses (hostNetwork: their nodes'); without the pod informer, this node's own listener."""
    if published.pods is None:
        return (own,)
    return tuple(sorted({pod.host_ip for pod in published.pods.values() if isinstance(pod, Pod) and pod.ready and pod.host_ip}))


class AcmeOrders:
    """The sync function of the ACME controller, one Ingress key at a time."""

    def __init__(
        self, store: ClusterStore, events: EventRecorder, options: AcmeControllerOptions, ingresses: Store, classes: Store,
        addresses: Callable[[], tuple[str, ...]], serves: tuple[str, str], metrics: ControllerMetrics,
    ) -> None:
        self.store = store
        self.events = events
        self.options = options
        self.ingresses = ingresses
        self.classes = classes
        self.addresses = addresses
        self.serves = serves  # class name, controller name
        self.metrics = metrics
        self.backoff = Backoff()
        self.requeue: Callable[[Hashable, float], None] = lambda key, delay: None  # the loop's queue.add_after (the manager sets it)
        self._said: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, key: tuple[str, str]) -> None:
        ingress = self.ingresses.get(key)
        if not isinstance(ingress, Ingress) or ingress.meta.annotations.get(ANNOTATION) != "true" or not self._served(ingress):
            return
        carried = [name for name in CERT_MANAGER if name in ingress.meta.annotations]
        if carried:
            self._say_once(key, f"acme: Ingress {key[0]}/{key[1]} carries {' and '.join(carried)}: cert-manager's, not ordered here")
            return
        if not ingress.tls:
            self._refuse(ingress, "no-tls", "AcmeNeedsTLS", f"{ANNOTATION} needs spec.tls (the hosts and the secretName to put the certificate in); nothing ordered")
        for tls in ingress.tls:
            hosts = tuple(sorted({host.lower() for host in tls.hosts}))
            if not hosts or not tls.secret_name:
                self._refuse(ingress, "no-hosts", "AcmeNeedsTLS", "a spec.tls entry without hosts or secretName; nothing ordered for it")
            elif any(host.startswith("*") for host in hosts):
                note = f"{', '.join(hosts)}: a wildcard needs the DNS-01 challenge, which twingress does not implement (out of scope); nothing ordered"
                self._refuse(ingress, "wildcard", "AcmeWildcard", note)
            else:
                self._entry(key, ingress, tls.secret_name, hosts)

    def _served(self, ingress: Ingress) -> bool:
        classes = tuple(c for c in self.classes.values() if isinstance(c, IngressClass))
        return bool(select_ingresses(ClusterState(ingresses=(ingress,), ingress_classes=classes), class_name=self.serves[0], controller_name=self.serves[1]))

    def order_into(self, key: Hashable, subject: Subject, name: str, hosts: tuple[str, ...]) -> None:
        """A certificate for C{hosts} in C{subject}'s Secret C{name} (issued, renewed, or nothing yet), as for a spec.tls entry; C{key}: the subject's queue key."""
        self._entry(key, subject, name, hosts)

    def refuse(self, subject: Subject, reason: str, event: str, note: str) -> None:
        """What C{subject} asks that cannot be ordered: its Warning Event, a log line and C{twingress_acme_refused_total{reason}}."""
        self._refuse(subject, reason, event, note)

    def say_once(self, key: Hashable, message: str) -> None:
        """A log line said once per C{key} (an object left to cert-manager)."""
        self._say_once(key, message)

    def _entry(self, key: Hashable, ingress: Subject, name: str, hosts: tuple[str, ...]) -> None:
        namespace, directory = ingress.meta.namespace, self.options.settings.directory
        waiting = self.backoff.remaining((namespace, name, hosts))
        if waiting > 0:  # a failure's backoff: this sync (a status write, a change) orders nothing
            self.requeue(key, waiting)
            return
        existing = self.store.get_secret(namespace, name)
        if existing is not None and not is_ours(existing):
            self._refuse(ingress, "secret-not-ours", "AcmeSecretNotOurs", f"Secret {namespace}/{name} exists and was not made by twingress; not overwritten, nothing ordered")
            return
        annotations = (existing or {}).get("metadata", {}).get("annotations") or {}
        renewal = annotations.get(HOSTS_ANNOTATION) == ",".join(hosts) and annotations.get(ISSUER_ANNOTATION) == directory
        if renewal and not self._due(key, existing or {}, annotations):
            return
        if self._kept_wait(key, namespace, name, hosts):
            return
        self._issue(ingress, name, hosts, existing, renewal)

    def _due(self, key: Hashable, existing: dict[str, Any], annotations: dict[str, str]) -> bool:
        """Whether an issued certificate is due for renewal; when not, its key is queued again for then."""
        try:
            renew_at = renewal_of(annotations, base64.b64decode((existing.get("data") or {}).get("tls.crt", ""), validate=True))
        except (binascii.Error, ValueError, TypeError):
            return True  # our Secret without a readable certificate: order one
        now = datetime.datetime.now(datetime.UTC)
        poll_at = renewal_poll_of(annotations)
        if poll_at is not None and poll_at <= now < renew_at:  # the server's window, asked for again (RFC 9773 4.3.3)
            renew_at, poll_at = self._ask_again(existing, renew_at)
        left = (renew_at - now).total_seconds()
        if left > 0:
            self.requeue(key, min(left, (poll_at - now).total_seconds() if poll_at else left, RECHECK_SECONDS))
            return False
        log.info("acme: the certificate in Secret {namespace}/{name} is due for renewal (at {when})",
                 namespace=existing["metadata"]["namespace"], name=existing["metadata"]["name"], when=renew_at.isoformat())
        return True

    def _kept_wait(self, key: Hashable, namespace: str, name: str, hosts: tuple[str, ...]) -> bool:
        """Whether a backoff kept by a leader before this one (or before a restart) is still running; if so, the key waits it out."""
        pause = pause_of(self.store.kept_backoff(namespace, name), hosts)
        if pause is None:
            return False
        self.backoff.restore((namespace, name, hosts), pause)
        waiting = self.backoff.remaining((namespace, name, hosts))
        if waiting <= 0:
            return False
        log.info("acme: the certificate for {hosts} waits the backoff kept on the account Secret ({failures} failed orders): the next order in {wait:.0f}s",
                 hosts=", ".join(hosts), failures=pause.failures, wait=waiting)
        self.requeue(key, waiting)
        return True

    def _ask_again(self, existing: dict[str, Any], renew_at: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime | None]:
        """The certificate's renewalInfo asked for again, and what it says written onto its Secret (its renew-after, its next check)."""
        metadata, data = existing["metadata"], existing.get("data") or {}
        key, _ = self.store.account_key()
        new_at, poll_at = renewal_again(self.options.settings, base64.b64decode(data.get("tls.crt", "")), key, renew_at)
        self.store.annotate_secret(existing, {
            RENEW_AFTER_ANNOTATION: new_at.isoformat(), RENEWAL_INFO_ANNOTATION: poll_at.isoformat() if poll_at else None,
        })
        log.info("acme: renewalInfo of the certificate in Secret {namespace}/{name} asked for again: renewal at {renew_at} (was {was}); next check {poll}",
                 namespace=metadata["namespace"], name=metadata["name"], renew_at=new_at.isoformat(), was=renew_at.isoformat(),
                 poll=poll_at.isoformat() if poll_at else "none")
        return new_at, poll_at

    def _issue(self, ingress: Subject, name: str, hosts: tuple[str, ...], existing: Any, renewal: bool) -> None:
        namespace, directory = ingress.meta.namespace, self.options.settings.directory
        log.info("acme: ordering a certificate for {hosts} from {directory}", hosts=", ".join(hosts), directory=directory)
        attempt = Attempt(on_order=lambda url: self.store.keep_order_url(namespace, name, url))
        try:
            issued = self._order(hosts, attempt, self.store.order_url(namespace, name))
            secret = certificate_secret(namespace, name, issued.chain_pem, issued.key_pem, hosts, directory, issued.renew_at, issued.poll_at)
            self.store.write_certificate(secret, existing)
            self.store.keep_order_url(namespace, name, "")
            self.store.keep_backoff(namespace, name, "")
        except NotLeader:
            raise
        except Exception as error:  # noqa: BLE001 - the server's or a node's error, said on the Ingress; the loop goes on
            self._failed(ingress, name, hosts, attempt, " ".join(str(error).split()) or repr(error))
            return
        self.backoff.succeeded((namespace, name, hosts))
        self.metrics.acme_orders.labels("issued").inc()
        log.info(
            "acme: certificate for {hosts} issued into Secret {namespace}/{name} in {seconds:.1f}s, {requests} requests to the ACME server{account}; renewal at {renew_at} ({source})",
            hosts=", ".join(hosts), namespace=namespace, name=name, seconds=issued.seconds, requests=issued.requests,
            account=" (a new account)" if issued.new_account else " (its existing account)",
            renew_at=issued.renew_at.isoformat() if issued.renew_at else "?", source=issued.renewal_source,
        )
        if issued.bad_nonces:
            log.info("acme: {count} badNonce answers retried with the server's fresh nonce in that order", count=issued.bad_nonces)
        reason, verb = ("AcmeRenewed", "renewed") if renewal else ("AcmeIssued", "issued")
        self.events.record(ingress.meta, ingress.ref.kind, NORMAL, reason, "Order", f"certificate for {', '.join(hosts)} from {directory} {verb} in Secret {name}")

    def _failed(self, ingress: Subject, name: str, hosts: tuple[str, ...], attempt: Attempt, message: str) -> None:
        """A failed order: its Event and line, and the backoff before the next one (the key queued for its end)."""
        wait = self.backoff.failed((ingress.meta.namespace, name, hosts), attempt.retry_after, attempt.rate_limited)
        self._keep_backoff(ingress.meta.namespace, name, hosts)
        self.requeue(queue_key(ingress), wait)
        self.metrics.acme_orders.labels("failed").inc()
        asked = f" (the server asked for {attempt.retry_after:.0f}s)" if attempt.retry_after is not None else " (rateLimited)" if attempt.rate_limited else ""
        log.error("acme: ordering a certificate for {hosts} failed: {error}; trying again in {wait:.0f}s{asked}, {requests} requests to the ACME server",
                  hosts=", ".join(hosts), error=message, wait=wait, asked=asked, requests=attempt.requests)
        self.events.record(ingress.meta, ingress.ref.kind, WARNING, "AcmeOrderFailed", "Order", f"certificate for {', '.join(hosts)}: {message}; trying again in {wait:.0f}s")

    def _keep_backoff(self, namespace: str, name: str, hosts: tuple[str, ...]) -> None:
        """The failed certificate's backoff onto the account Secret, for the next leader (L{_kept_wait})."""
        pause = self.backoff.pause((namespace, name, hosts))
        if pause is None:
            return
        try:
            self.store.keep_backoff(namespace, name, pause_text(pause, hosts))
        except NotLeader:
            raise
        except Exception as error:  # noqa: BLE001 - this leader still waits it; only a successor would order sooner
            log.error("acme: the backoff of {hosts} not kept on the account Secret ({error})", hosts=", ".join(hosts), error=" ".join(str(error).split()))

    def _order(self, hosts: tuple[str, ...], attempt: Attempt, resume: str) -> Issued:
        key, made = self.store.account_key()
        if made:
            log.info("acme: made the account key for {directory}", directory=self.options.settings.directory)
        publish = self.store.publish_tls_alpn if self.options.settings.challenge == "tls-alpn-01" else self.store.publish
        return order_certificate(self.options.settings, hosts, publish, self._every_node_answers, key=key, attempt=attempt, resume=resume)

    def _every_node_answers(self, host: str, token: str, answer: str) -> bool:
        """
        Blocks until every ready node answers C{token} (HTTP-01: on its --http listener; TLS-ALPN-01: its challenge
        certificate on --https, L{_check_of}), or raises naming the nodes that did not
        (after L{SELF_CHECK_SECONDS}): only then may the server be asked to validate.
        """
        check, port, own, what = self._check_of(host, token)
        deadline = time.monotonic() + SELF_CHECK_SECONDS
        checked = waiting = set(self.addresses()) or {own}
        while True:
            self.store.writer.check()  # a leader that lost the Lease stops waiting (NotLeader)
            waiting = {address for address in waiting if not check(address, port, host, token, answer)}
            if not waiting:
                log.info("acme: {what} answered by every ready node ({nodes})", what=what, nodes=", ".join(f"{address}:{port}" for address in sorted(checked)))
                return True
            if time.monotonic() > deadline:
                nodes = ", ".join(f"{address}:{port}" for address in sorted(waiting))
                raise ValueError(f"{what} not answered by the twingress node(s) {nodes} after {SELF_CHECK_SECONDS:.0f}s; nothing asked of the ACME server")
            time.sleep(0.2)

    def _check_of(self, host: str, token: str) -> tuple[Callable[[str, int, str, str, str], bool], int, str, str]:
        """
        How one node is checked, on which port, this node's own address, and what the error names: HTTP-01 fetches the
        token on --http; TLS-ALPN-01 handshakes on --https offering only acme-tls/1 with SNI = the host and checks the
        acmeIdentifier digest of the certificate it is shown (L{answers_handshake}).
        """
        settings = self.options.settings
        if settings.challenge == "tls-alpn-01":
            what = f"the TLS-ALPN-01 challenge of {host} (acme-tls/1, its acmeIdentifier digest)"
            return _handshakes, self.options.https_port, settings.tls_self_check_host, what
        return fetch_token, self.options.http_port, settings.self_check_host, f"http://{host}/.well-known/acme-challenge/{token}"

    def _refuse(self, ingress: Subject, reason: str, event: str, note: str) -> None:
        """An Event on the object, a log line and a metric (the Event and the line repeat only with a new version of the object)."""
        self.metrics.acme_refused.labels(reason).inc()
        if self._first(("refused:" + note, ingress.meta.resource_version)):
            log.error("acme: {kind} {namespace}/{name}: {note}", kind=ingress.ref.kind, namespace=ingress.meta.namespace, name=ingress.meta.name, note=note)
        self.events.record(ingress.meta, ingress.ref.kind, WARNING, event, "Order", note)

    def _say_once(self, key: Hashable, message: str) -> None:
        if self._first(key):
            log.info("{message}", message=message)

    def _first(self, key: Any) -> bool:
        with self._lock:
            if key in self._said:
                return False
            self._said.add(key)
            return True



def _handshakes(address: str, port: int, host: str, token: str, answer: str) -> bool:
    """L{answers_handshake} in L{fetch_token}'s shape (the token is not shown in a handshake: its key authorization's digest is)."""
    return answers_handshake(address, port, host, answer)
