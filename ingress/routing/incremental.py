# -*- test-case-name: tests.unit.test_incremental -*-
"""
Which way a new snapshot becomes a table: the cheapest that gives what a full build would.

EndpointSlice-only changes update the endpoints of the previous table
(L{ingress.routing.endpoint_changes}); Ingress-only changes build again only the Ingresses that
share a host with the changed ones (L{ingress.routing.ingress_changes}); Secret-only changes swap
the certificates' PEMs (L{with_renewed_secrets}); anything else is a full build.  The result must
equal a full build of the same state; tests/unit/test_incremental.py checks it on random sequences
of changes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ingress.model import ClusterState
from ingress.routing.endpoint_changes import FIELDS, ServiceUses, SliceIndex, same_objects, with_new_endpoints
from ingress.routing.gateway import has_gateway_api
from ingress.routing.ingress_changes import Build, IngressIndex, with_changed_ingresses
from ingress.routing.table import RoutingTable


class IncrementalBuild:
    """
    A build function that remembers the last state and table: an EndpointSlice-only change is
    applied to that table (L{with_new_endpoints}), an Ingress-only change rebuilds just the hosts it
    touches (L{ingress.routing.ingress_changes}), anything else is a full build.
    """

    def __init__(self, full: Build, max_share: float = 0.25) -> None:
        """C{max_share}: the largest part of the Ingresses an Ingress-only change builds again, rather than all of them."""
        self.full = full
        self.max_share = max_share
        self._last: Optional[tuple[ClusterState, RoutingTable, Optional[ServiceUses]]] = None
        self._index: Optional[IngressIndex] = None  # follows the last state's Ingresses
        self._slices: Optional[SliceIndex] = None  # the last state's EndpointSlices by Service (made by the first endpoint update)
        self.endpoint_updates = 0  # builds that were EndpointSlice-only (for tests and the log)
        self.ingress_updates = 0  # builds that were Ingress-only and built only the Ingresses they touch
        self.secret_updates = 0  # Secret contents renewed: the certificates swapped, nothing built
        self.ingress_fallback: Optional[str] = None  # why the last Ingress-only change took a full build (None: it did not)
        self.last_path = ""  # how the last table was made, for the build's log line

    def __call__(self, state: ClusterState, generation: int) -> RoutingTable:
        try:
            return self._build(state, generation)
        except BaseException:
            self._index = None  # it may follow a snapshot whose table was never made: made again from the last one
            raise

    def _build(self, state: ClusterState, generation: int) -> RoutingTable:
        if self._last is None:
            return self._full_build(state, generation)
        old, previous, uses = self._last
        differ = [name for name in FIELDS if not same_objects(getattr(old, name), getattr(state, name))]
        self.last_path = f"full build: {', '.join(differ) or 'nothing'} changed"
        if differ in ([], ["endpoint_slices"]):
            uses = uses if uses is not None else ServiceUses.of(previous)
            slices = self._slices if self._slices is not None and self._slices.slices is old.endpoint_slices else SliceIndex(old)
            self._slices = None
            table = with_new_endpoints(previous, old, state, generation, uses, slices)
            self._slices = slices if slices.slices is state.endpoint_slices else None
            if table is not None:
                self.endpoint_updates += 1
                self.last_path = "endpoints only"
                self._last = (state, table, uses)  # the same hosts use the same Services
                return table
        elif differ == ["ingresses"] and not has_gateway_api(state):  # they share hosts: one owner per host, problems on the routes
            index = self._index if self._index is not None else IngressIndex.of(old.ingresses)
            self._index = index
            old_versions, new_versions = index.changed_to(state.ingresses)
            found = with_changed_ingresses(previous, state, index, old_versions, new_versions, self.full, generation, self.max_share)
            if isinstance(found, RoutingTable):
                self.ingress_updates += 1
                self.last_path = "Ingresses only"
                self.ingress_fallback = None
                self._last = (state, found, uses.following(previous, found) if uses is not None else None)
                return found
            self.ingress_fallback = found
        elif differ == ["secrets"]:
            renewed = with_renewed_secrets(previous, old, state, generation)
            if renewed is not None:
                self.secret_updates += 1
                self.last_path = "Secrets only"
                self._last = (state, renewed, uses)  # the routes are the same: so are their Services
                return renewed
        elif "ingresses" in differ and self._index is not None:
            self._index.changed_to(state.ingresses)
        return self._full_build(state, generation)

    def warm(self) -> None:
        """
        Make now what the next EndpointSlice-only update needs from the last table (where it uses
        each Service, its slices by Service): the build thread calls this when it has nothing to
        build, so that the first pod replaced after any other change does not pay for them (30 ms
        at 10k Ingresses, the p99 of the bench's endpoint moves).
        """
        if self._last is None:
            return
        state, table, uses = self._last
        if uses is None:
            self._last = (state, table, ServiceUses.of(table))
        if self._slices is None or self._slices.slices is not state.endpoint_slices:
            self._slices = SliceIndex(state)  # the slices changed along with other kinds (a snapshot keeps an unchanged kind's values)

    def _full_build(self, state: ClusterState, generation: int) -> RoutingTable:
        if self._last is None:
            self.last_path = "full build"
        table = self.full(state, generation)
        self._last = (state, table, None)
        if self._index is None or not self._index.consistent:
            # Made now, beside the full build it costs a tenth of, rather than in the first Ingress change;
            # made again after a snapshot with two Ingresses of one name, which this one may no longer have.
            self._index = IngressIndex.of(state.ingresses)
        return table


_SECRET_CONTENT_KEYS = tuple(f"{prefix}{key}" for prefix in ("twingress.io/", "nginx.ingress.kubernetes.io/") for key in ("proxy-ssl-secret", "auth-tls-secret"))


def with_renewed_secrets(previous: RoutingTable, old: ClusterState, new: ClusterState, generation: int) -> Optional[RoutingTable]:
    """
    C{previous} with the certificates of C{new}'s TLS Secrets, when only their contents changed (a
    certificate renewed, as cert-manager does): the same Secrets exist, so every host keeps the Secret
    it had, and only the certificate table's PEMs differ; None when that is not all (a Secret came or
    went, an Ingress reads a Secret's contents into a route: proxy-ssl-secret, auth-tls-secret, or
    Gateway listeners on ports of their own have certificate tables of their own).
    """
    if old.secrets.keys() != new.secrets.keys() or _reads_secret_contents(new) or previous.gateway_ports:
        return None
    certificates = previous.certificates
    secrets = {key: new.secrets[key] for key in certificates.secrets}
    if all(secrets[key] is certificates.secrets[key] for key in secrets):
        return replace(previous, generation=generation)
    return replace(previous, generation=generation, certificates=replace(certificates, secrets=secrets))


def _reads_secret_contents(state: ClusterState) -> bool:
    """Whether an Ingress names a Secret whose contents go into its routes or client-certificate checks."""
    return any(key in ingress.meta.annotations for ingress in state.ingresses for key in _SECRET_CONTENT_KEYS)
