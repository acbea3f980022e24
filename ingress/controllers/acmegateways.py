# -*- test-case-name: tests.kube.test_acme_gateway_cluster -*-
"""
What an annotated Gateway asks of the ACME controller: a certificate per HTTPS listener's hostname, in its Secret.

A Gateway of one of our GatewayClasses annotated C{twingress.io/acme: "true"} asks, for each listener of
protocol HTTPS (tls.mode Terminate) with a hostname, for a certificate of that hostname in the listener's
first certificateRef: a core Secret in the Gateway's own namespace.  Listeners that name one Secret share
one certificate (their hostnames together, as a spec.tls entry's hosts): a certificate per listener into
one Secret would have each order overwrite the other's.  Listeners of other protocols ask nothing.

Refused, each with a Warning Event on the Gateway that names the listener (and nothing ordered for it): a
listener without a hostname (no name to prove), a wildcard hostname (HTTP-01 cannot prove one; DNS-01 is
out of scope), no certificateRef, a certificateRef of another kind, or in another namespace (a
ReferenceGrant lets a Gateway read a Secret there; it is not a grant for twingress to write one).  A
Gateway carrying C{cert-manager.io/issuer} or C{cert-manager.io/cluster-issuer} is cert-manager's
(its gateway-shim reads those on Gateways), as for an Ingress.

The orders are the Ingresses' (L{AcmeOrders.order_into}): the same Secret labels and annotations,
backoff, renewal, resumed orders, and the same refusal of a Secret twingress did not create; in the
same loop thread, so one order at a time owns the tokens' ConfigMap.  The tokens are routed by host
alone (L{ingress.routing.acme_challenges}), so a listener's hostname is answered on --http with no
HTTPRoute there; the listener's status while its Secret is missing (ResolvedRefs False,
InvalidCertificateRef) turns True with the next table once the Secret is written.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Optional

from ingress.acme.issuer import ANNOTATION, CERT_MANAGER
from ingress.controllers.acmeorders import AcmeOrders
from ingress.model import ClusterState, ObjectRef
from ingress.model.gateway import Gateway, GatewayClass, Listener
from ingress.routing.gateway.listeners import our_gateways
from ingress.sources.kube.reflector import Store


@dataclass(frozen=True, slots=True)
class Wanted:
    """One certificate a Gateway asks for: its Secret, the hostnames in it, the listeners that name it."""

    secret: str
    hosts: tuple[str, ...]
    listeners: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Refused:
    """A listener whose certificate cannot be ordered: the metric's reason, the Event's reason, and its note."""

    listener: str
    reason: str
    event: str
    note: str


def gateway_wants(gateway: Gateway) -> tuple[list[Wanted], list[Refused]]:
    """The certificates C{gateway}'s HTTPS listeners ask for (one per Secret, oldest listener order), and the listeners refused."""
    by_secret: dict[str, list[Listener]] = {}
    refused: list[Refused] = []
    for listener in gateway.listeners:
        if listener.protocol != "HTTPS":
            continue
        problem = _refusal(gateway, listener)
        if problem is not None:
            refused.append(problem)
        else:
            by_secret.setdefault(listener.certificate_refs[0].name, []).append(listener)
    wanted = [
        Wanted(secret, tuple(sorted({listener.hostname for listener in listeners})), tuple(listener.name for listener in listeners))
        for secret, listeners in by_secret.items()
    ]
    return wanted, refused


def _refusal(gateway: Gateway, listener: Listener) -> Optional[Refused]:
    name, host = listener.name, listener.hostname
    if not host:
        return Refused(name, "no-hostname", "AcmeNeedsHostname", f"listener {name}: an HTTPS listener without a hostname has no name to order a certificate for; nothing ordered for it")
    if host.startswith("*"):
        note = f"listener {name}: {host}: a wildcard needs the DNS-01 challenge, which twingress does not implement (out of scope); nothing ordered for it"
        return Refused(name, "wildcard", "AcmeWildcard", note)
    if listener.tls_mode != "Terminate":
        note = f"listener {name}: tls.mode {listener.tls_mode or '(none)'}: a certificate is held only for a listener that terminates TLS; nothing ordered for it"
        return Refused(name, "not-terminated", "AcmeNeedsTerminate", note)
    if not listener.certificate_refs:
        return Refused(name, "no-certificate-ref", "AcmeNeedsCertificateRef", f"listener {name}: no certificateRef names the Secret to put the certificate in; nothing ordered for it")
    ref = listener.certificate_refs[0]
    if ref.group or ref.kind != "Secret":
        note = f"listener {name}: certificateRef {ref.group or 'core'}/{ref.kind} {ref.name} is not a Secret; nothing ordered for it"
        return Refused(name, "certificate-ref-kind", "AcmeCertificateRefNotSecret", note)
    if ref.namespace != gateway.meta.namespace:
        note = (
            f"listener {name}: certificateRef Secret {ref.namespace}/{ref.name} is in another namespace: twingress writes certificates only into"
            f" the Gateway's own ({gateway.meta.namespace}); a ReferenceGrant lets the Gateway read it, not twingress write it; nothing ordered for it"
        )
        return Refused(name, "certificate-ref-namespace", "AcmeCertificateRefNamespace", note)
    return None


class AcmeGatewayOrders:
    """
    The ACME loop's sync function once Gateways are watched: a Gateway's key (its L{ObjectRef}) here, an
    Ingress's (namespace, name) to the Ingresses' L{AcmeOrders}.
    """

    def __init__(self, orders: AcmeOrders, gateways: Store, classes: Store, controller_name: str) -> None:
        self.orders = orders
        self.gateways = gateways
        self.classes = classes
        self.controller_name = controller_name

    def __call__(self, key: Hashable) -> None:
        if isinstance(key, ObjectRef):
            if key.kind == "Gateway":
                self._gateway(key)
        elif isinstance(key, tuple):
            self.orders(key)

    def keys(self) -> Iterable[ObjectRef]:
        """Every Gateway's key (a resync, a GatewayClass changed)."""
        return [ObjectRef("Gateway", namespace, name) for namespace, name in self.gateways.keys()]

    def _gateway(self, key: ObjectRef) -> None:
        gateway = self.gateways.get((key.namespace, key.name))
        if not isinstance(gateway, Gateway) or gateway.meta.annotations.get(ANNOTATION) != "true" or not self._ours(gateway):
            return
        carried = [name for name in CERT_MANAGER if name in gateway.meta.annotations]
        if carried:
            self.orders.say_once(key, f"acme: Gateway {key.namespace}/{key.name} carries {' and '.join(carried)}: cert-manager's, not ordered here")
            return
        wanted, refused = gateway_wants(gateway)
        for problem in refused:
            self.orders.refuse(gateway, problem.reason, problem.event, problem.note)
        if not wanted and not refused:
            self.orders.refuse(gateway, "no-https-listener", "AcmeNeedsHTTPSListener", f"{ANNOTATION} needs an HTTPS listener with a hostname and a certificateRef; nothing ordered")
        for each in wanted:
            self.orders.order_into(key, gateway, each.secret, each.hosts)

    def _ours(self, gateway: Gateway) -> bool:
        classes = tuple(c for c in self.classes.values() if isinstance(c, GatewayClass))
        return bool(our_gateways(ClusterState(gateways=(gateway,), gateway_classes=classes), self.controller_name))
