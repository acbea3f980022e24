# -*- test-case-name: tests.unit.test_incremental -*-
"""
Which way a new snapshot becomes a table: the cheapest that gives what a full build would.

EndpointSlice-only changes update the endpoints of the previous table
(L{ingress.routing.endpoint_changes}); changes of Ingresses, Services and EndpointSlices build
again only the Ingresses that changed or name a changed Service, with those that share a host with
them (L{ingress.routing.ingress_changes}); Secret-only changes swap
the certificates' PEMs (L{with_renewed_secrets}); anything else is a full build.  The result must
equal a full build of the same state; tests/unit/test_incremental.py checks it on random sequences
of changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Optional, Union

from ingress.model import ClusterState
from ingress.routing.endpoint_changes import FIELDS, ServiceUses, SliceIndex, same_objects, with_new_endpoints
from ingress.routing.gateway import has_gateway_api
from ingress.routing.ingress_changes import Build, with_changed_ingresses
from ingress.routing.ingress_index import IngressIndex, ServiceKey
from ingress.routing.report import Built
from ingress.routing.table import RoutingTable


class IncrementalBuild:
    """
    A build function that remembers the last state and table: an EndpointSlice-only change is
    applied to that table (L{with_new_endpoints}), a change of Ingresses, Services and slices
    rebuilds just the hosts it touches (L{ingress.routing.ingress_changes}), anything else is a full build.
    """

    def __init__(self, full: Build, max_share: float = 0.25) -> None:
        """C{max_share}: the largest part of the Ingresses an Ingress-only change builds again, rather than all of them."""
        self.full = full
        self.max_share = max_share
        self._last: Optional[tuple[ClusterState, Built, Optional[ServiceUses]]] = None
        self._index: Optional[IngressIndex] = None  # follows the last state's Ingresses
        self._slices: Optional[SliceIndex] = None  # the last state's EndpointSlices by Service (made by the first endpoint update)
        self._written: Optional[Mapping[str, Mapping[tuple[str, str], object]]] = None  # what the source wrote since the last state (this build's)
        self.endpoint_updates = 0  # builds that were EndpointSlice-only (for tests and the log)
        self.ingress_updates = 0  # builds that were Ingress-only and built only the Ingresses they touch
        self.secret_updates = 0  # Secret contents renewed: the certificates swapped, nothing built
        self.ingress_fallback: Optional[str] = None  # why the last Ingress-only change took a full build (None: it did not)
        self.last_path = ""  # how the last table was made, for the build's log line

    def __call__(self, state: ClusterState, generation: int) -> Built:
        try:
            return self._build(state, generation)
        except BaseException:
            self._index = None  # it may follow a snapshot whose table was never made: made again from the last one
            raise

    def _build(self, state: ClusterState, generation: int) -> Built:
        if self._last is None:
            return self._full_build(state, generation)
        old, previous, uses = self._last
        written = _written_since(old, state)
        if written is not None:  # the source says what it wrote: no need to compare every object
            differ = [name for name in FIELDS if written.get(name)]
        else:
            differ = [name for name in FIELDS if not same_objects(getattr(old, name), getattr(state, name))]
        self._written = written
        self.last_path = f"full build: {', '.join(differ) or 'nothing'} changed"
        if differ in ([], ["endpoint_slices"]):
            uses = uses if uses is not None else ServiceUses.of(previous)
            slices = self._slice_index(old)
            table = with_new_endpoints(previous.table, old, state, generation, uses, slices, self._written_of("endpoint_slices"))
            self._slices = slices if slices.slices is state.endpoint_slices else None
            if table is not None:
                self.endpoint_updates += 1
                self.last_path = "endpoints only"
                built = Built(table, previous.report)  # what the build found about the objects is what it was
                self._last = (state, built, uses)  # the same hosts use the same Services
                return built
        elif _ROUTE_KINDS.issuperset(differ) and not has_gateway_api(state):  # they share hosts: one owner per host, problems on the routes
            found = self._with_changed_routes(old, previous, uses, state, generation, differ)
            if isinstance(found, tuple):
                self.ingress_updates += 1
                self.last_path = "Ingresses only" if differ == ["ingresses"] else f"the routes of the changed {', '.join(differ)}"
                self.ingress_fallback = None
                built, hosts, uses = found
                self._last = (state, built, uses.following(previous.table, built, hosts) if uses is not None else None)
                return built
            self.ingress_fallback = found
        elif differ == ["secrets"]:
            renewed = with_renewed_secrets(previous, old, state, generation)
            if renewed is not None:
                self.secret_updates += 1
                self.last_path = "Secrets only"
                built = Built(renewed, previous.report)
                self._last = (state, built, uses)  # the routes are the same: so are their Services
                return built
        elif "ingresses" in differ and self._index is not None:
            self._index.changed_to(state.ingresses, self._written_of("ingresses"))
        return self._full_build(state, generation)

    def _slice_index(self, old: ClusterState) -> SliceIndex:
        """The slice index of C{old}, kept or made, taken away until the caller gives it back (it is half moved on if the update raises)."""
        slices = self._slices if self._slices is not None and self._slices.slices is old.endpoint_slices else SliceIndex(old)
        self._slices = None
        return slices

    def _written_of(self, name: str) -> Optional[Mapping[tuple[str, str], object]]:
        """The keys of field C{name} the source wrote since the last snapshot built, when it says (else None: compare)."""
        return None if self._written is None else self._written.get(name, {})

    def _with_changed_routes(
        self, old: ClusterState, previous: Built, uses: Optional[ServiceUses], state: ClusterState, generation: int, differ: list[str]
    ) -> Union[tuple[Built, frozenset[str], Optional[ServiceUses]], str]:
        """
        The table with the Ingresses that changed, and those naming a Service whose object or slices
        changed, built again (L{with_changed_ingresses}), the hosts that may differ and the uses it was checked with; or why
        that needs a full build.  This is how a new application (its Service, its slices and its
        Ingress, created together) goes live at 10k Ingresses without a full build.
        """
        index = self._index if self._index is not None else IngressIndex.of(old.ingresses)
        self._index = index
        old_versions, new_versions = index.changed_to(state.ingresses, self._written_of("ingresses"))
        services = self._changed_services(old, state, differ)
        if services:
            uses = uses if uses is not None else ServiceUses.of(previous)
            reason = _services_read_elsewhere(previous, state, uses, services)
            if reason is not None:
                return reason
            for ref in index.naming(services):
                if ref not in old_versions and ref not in new_versions:  # unchanged itself: built again as it is
                    old_versions[ref] = new_versions[ref] = index.by_ref[ref]
        slices = self._slices if self._slices is not None and self._slices.slices is state.endpoint_slices else None
        found = with_changed_ingresses(
            previous, state, index, old_versions, new_versions, self.full, generation, self.max_share, slices.slices_of if slices is not None else None
        )
        return (*found, uses) if isinstance(found, tuple) else found

    def _changed_services(self, old: ClusterState, state: ClusterState, differ: list[str]) -> set[ServiceKey]:
        """The Services whose object or slices are not the same objects as in C{old} (the slice index moved on to C{state})."""
        changed: set[ServiceKey] = set()
        if "services" in differ:
            written = self._written_of("services")
            changed.update(written if written is not None else _changed_keys(old.services, state.services))
        if "endpoint_slices" in differ:
            slices = self._slice_index(old)
            changed |= slices.follow(state, self._written_of("endpoint_slices"))
            self._slices = slices
        elif self._slices is not None and self._slices.slices is old.endpoint_slices:
            self._slices.slices = state.endpoint_slices  # the same slices (a source's part is kept while unwritten)
        return changed

    def warm(self) -> None:
        """
        Make now what the next EndpointSlice-only update needs from the last table (where it uses
        each Service, its slices by Service): the build thread calls this when it has nothing to
        build, so that the first pod replaced after any other change does not pay for them (30 ms
        at 10k Ingresses, the p99 of the bench's endpoint moves).
        """
        if self._last is None:
            return
        state, built, uses = self._last
        if uses is None:
            self._last = (state, built, ServiceUses.of(built))
        if self._slices is None or self._slices.slices is not state.endpoint_slices:
            self._slices = SliceIndex(state)  # the slices changed along with other kinds (a snapshot keeps an unchanged kind's values)

    def _full_build(self, state: ClusterState, generation: int) -> Built:
        if self._last is None:
            self.last_path = "full build"
        built = self.full(state, generation)
        self._last = (state, built, None)
        if self._index is None or not self._index.consistent:
            # Made now, beside the full build it costs a tenth of, rather than in the first Ingress change;
            # made again after a snapshot with two Ingresses of one name, which this one may no longer have.
            self._index = IngressIndex.of(state.ingresses)
        return built


_ROUTE_KINDS = frozenset({"ingresses", "services", "endpoint_slices"})


def _written_since(old: ClusterState, new: ClusterState) -> Optional[Mapping[str, Mapping[tuple[str, str], object]]]:
    """What C{new}'s source wrote since C{old}, when it says so and C{old} is the snapshot it made before C{new}."""
    if new.changes is None or old.changes is None or new.changes.base != old.changes.serial:
        return None
    return new.changes.written


def _changed_keys(old: Mapping[ServiceKey, object], new: Mapping[ServiceKey, object]) -> set[ServiceKey]:
    """The keys whose values are not the same objects (both snapshots hold theirs: no two live objects share an id); no Python-level loop over every value."""
    before = dict(zip(map(id, old.values()), old.keys(), strict=True))
    after = dict(zip(map(id, new.values()), new.keys(), strict=True))
    return {before[key] for key in before.keys() - after.keys()} | {after[key] for key in after.keys() - before.keys()}


def _services_read_elsewhere(previous: Built, state: ClusterState, uses: ServiceUses, services: set[ServiceKey]) -> Optional[str]:
    """
    Why a change of C{services} may reach beyond the routes of the Ingresses that name them, or
    None: streams (StreamIngresses and the tcp/udp-services ConfigMaps name Services too, and a
    stream's conditions count endpoints), routes shaped by endpoints, a Service used outside the hosts.
    """
    table, report = previous.table, previous.report
    if state.stream_ingresses or table.streams or report.stream_conditions or any(problem.ref.kind == "ConfigMap" for problem in report.problems):
        return "streams name Services"
    if uses.shaped_by_endpoints:
        return "routes shaped by endpoints (a default-backend)"
    beyond = uses.beyond_hosts(services)
    return f"Service {beyond[0]}/{beyond[1]} is used beyond hosts" if beyond is not None else None


_SECRET_CONTENT_KEYS = tuple(f"{prefix}{key}" for prefix in ("twingress.io/", "nginx.ingress.kubernetes.io/") for key in ("proxy-ssl-secret", "auth-tls-secret"))


def with_renewed_secrets(previous: Built, old: ClusterState, new: ClusterState, generation: int) -> Optional[RoutingTable]:
    """
    C{previous} with the certificates of C{new}'s TLS Secrets, when only their contents changed (a
    certificate renewed, as cert-manager does): the same Secrets exist, so every host keeps the Secret
    it had, and only the certificate table's PEMs differ; None when that is not all (a Secret came or
    went, an Ingress reads a Secret's contents into a route: proxy-ssl-secret, auth-tls-secret, or
    Gateway listeners on ports of their own have certificate tables of their own, Gateways are judged:
    a listener's status says whether its Secret holds PEM).
    """
    status, previous_table = previous.report.gateway_status, previous.table
    if old.secrets.keys() != new.secrets.keys() or _reads_secret_contents(new) or previous_table.gateway_ports:
        return None
    if status is not None and status.gateways:
        return None
    certificates = previous_table.certificates
    secrets = {key: new.secrets[key] for key in certificates.secrets}
    if all(secrets[key] is certificates.secrets[key] for key in secrets):
        return replace(previous_table, generation=generation)
    return replace(previous_table, generation=generation, certificates=replace(certificates, secrets=secrets))


def _reads_secret_contents(state: ClusterState) -> bool:
    """Whether an Ingress names a Secret whose contents go into its routes or client-certificate checks."""
    return any(key in ingress.meta.annotations for ingress in state.ingresses for key in _SECRET_CONTENT_KEYS)
