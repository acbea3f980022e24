# -*- test-case-name: tests.unit.test_ingress_changes -*-
"""
Ingress-only changes applied to the previous table: only the hosts the changed Ingresses touch are built again.

At 10k Ingresses a full build costs far more than one new Ingress should.  When a snapshot differs
from the previous one in its Ingresses only (object for object, as L{ingress.routing.incremental}
compares), almost everything the full build decides for one host depends only on the Ingresses that
name that host: who wins a path (oldest first), its TLS redirect, its certificate, its client
certificate settings, its passthrough, the problems of those Ingresses.  So the hosts the changed
Ingresses name (before and after) are closed over "another Ingress names it too" until nothing is
added, and that group of Ingresses is built by the full build itself (the caller's build function,
so every option and every rule is the same) on a snapshot that holds just the group.  The new table
is the previous one with those hosts (and their certificates, passthrough and client-auth entries,
and the group's problems) taken from that small build; every other entry is the previous table's
object, so a worker receives a small change (L{ingress.routing.delta}).

What reaches beyond the hosts of its own Ingress takes a full build, for every Ingress of the group:
spec.defaultBackend (one default route for all), a rule without host (the rules of every host),
server-alias and from-to-www-redirect (hosts named by other Ingresses' annotations), and, to be
safe rather than clever, canary, use-regex/rewrite-target, ssl-passthrough, auth-tls-*,
default-backend and custom-http-errors.  So does a host that some Ingress outside the group might
alias, and a group too large for the shortcut to pay.  The Secrets of the certificate table are the
one entry shared across hosts: a Secret is there while any Ingress we serve names it, which is
decided with the index of who names it (L{IngressIndex}) and, if need be, a build of stand-ins.

The result must equal a full build of the same snapshot: tests/unit/test_incremental.py checks it
on random sequences of changes, tests/unit/test_ingress_changes.py case by case.  (Our own status
writes make new Ingress objects with the same spec: they take this path and change no entry.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from heapq import merge
from itertools import compress, islice
from operator import attrgetter
from typing import Optional, TypeVar, Union

from ingress.model import ClusterState, EndpointSlice, Ingress, IngressTLS, ObjectRef, Problem, TLSSecret
from ingress.routing.certs import SecretKey
from ingress.routing.ingress_index import IngressIndex, ServiceKey, annotation_name, names_of, secrets_of
from ingress.routing.report import Built
from ingress.routing.table import RoutingTable

Build = Callable[[ClusterState, int], Built]
_K = TypeVar("_K")
_V = TypeVar("_V")
# Annotation keys (without prefix) whose effect reaches beyond the Ingress's own hosts, or that we
# rather not reason about here: any of them on an Ingress of the group means a full build.
_FAR_REACHING = frozenset(
    {"server-alias", "from-to-www-redirect", "use-regex", "rewrite-target", "ssl-passthrough", "default-backend", "custom-http-errors"}
)
_FAR_REACHING_FAMILIES = ("canary", "auth-tls-")
_SERVICE_NAME = attrgetter("service_name")
_PROBED_NAMERS = 16  # Ingresses outside the group tried as stand-ins for one Secret before a full build


def with_changed_ingresses(
    previous: Built,
    new: ClusterState,
    index: IngressIndex,
    old_versions: Mapping[ObjectRef, Ingress],
    new_versions: Mapping[ObjectRef, Ingress],
    build: Build,
    generation: int,
    max_share: float,
    slices_of: Optional[Callable[[ServiceKey], Sequence[EndpointSlice]]] = None,
) -> Union[tuple[Built, frozenset[str]], str]:
    """
    C{previous} (the table and its report) with the Ingresses changed from C{old_versions} to C{new_versions} (C{index} already
    follows C{new}) and the hosts that may differ (as Ingresses name them: "*.suffix" for a
    wildcard), or why that needs a full build.  C{slices_of}: C{new}'s slices of a Service, when the
    caller has them by Service (else they are picked from every slice).
    """
    if not index.consistent:
        return "two Ingresses of one name"
    if not old_versions and not new_versions:
        return Built(replace(previous.table, generation=generation), previous.report), frozenset()
    group = _group(index, old_versions, new_versions, max_share)
    if isinstance(group, str):
        return group
    members, hosts = group
    for ingress in (*old_versions.values(), *members):
        reason = far_reaching(ingress)
        if reason is not None:
            return f"Ingress {ingress.ref.namespace}/{ingress.ref.name}: {reason}"
    aliased = hosts & index.aliases.keys()
    if aliased:
        return f"host {min(aliased)} may be an alias of another Ingress"
    refs = frozenset(old_versions) | frozenset(ingress.ref for ingress in members)
    sub = build(_sub_state(new, members, slices_of), generation)
    spliced = _spliced(previous.table, sub.table, hosts, generation)
    if spliced is None:
        return "the group's build has entries outside its hosts"
    secrets = _secrets_kept(previous.table, sub.table, new, index, old_versions, members, refs, build)
    if secrets is None:
        return "a Secret named outside the group, by no Ingress found served"
    if secrets is not previous.table.certificates.secrets:
        spliced = replace(spliced, certificates=replace(spliced.certificates, secrets=secrets))
    before, found = previous.report, sub.report
    report = replace(
        before,
        problems=_problems(before.problems, found.problems, refs, len(new.problems)),
        class_skipped=_skipped(before.class_skipped, found.class_skipped, refs),
    )
    return Built(spliced, report), hosts


def far_reaching(ingress: Ingress) -> Optional[str]:
    """Why C{ingress} may shape more than its own hosts, or None."""
    if ingress.default_backend is not None:
        return "spec.defaultBackend"
    if any(not rule.host for rule in ingress.rules) or any(not host for tls in ingress.tls for host in tls.hosts):
        return "a rule without host"
    for key in ingress.meta.annotations:
        name = annotation_name(key)
        if name is not None and (name in _FAR_REACHING or name.startswith(_FAR_REACHING_FAMILIES)):
            return f"annotation {key}"
    return None


def _group(
    index: IngressIndex, old_versions: Mapping[ObjectRef, Ingress], new_versions: Mapping[ObjectRef, Ingress], max_share: float
) -> Union[tuple[tuple[Ingress, ...], frozenset[str]], str]:
    """
    The Ingresses to build again (of the new snapshot) and their hosts: the changed ones, then
    every Ingress naming a host of the group, until no host is added.
    """
    hosts = {name for ingress in (*old_versions.values(), *new_versions.values()) for name in names_of(ingress)}
    refs = set(new_versions)
    limit = max(1, int(max_share * len(index.by_ref)))
    frontier = set(hosts)
    while frontier and len(refs) <= limit:
        found = {ref for name in frontier for ref in index.by_name.get(name, ())} - refs
        refs |= found
        frontier = {name for ref in found for name in names_of(index.by_ref[ref])} - hosts
        hosts |= frontier
    if len(refs) > limit:  # a full build costs about what building this many again does
        return f"the group passed {limit} Ingresses"
    return tuple(index.by_ref[ref] for ref in refs), frozenset(hosts)


def _sub_state(state: ClusterState, members: tuple[Ingress, ...], slices_of: Optional[Callable[[ServiceKey], Sequence[EndpointSlice]]] = None) -> ClusterState:
    """
    C{state} with just the group's Ingresses, and the slices of the Services their paths name (the
    only Services a group without far-reaching features asks for: indexing every slice would cost
    as much as the group).  No StreamIngresses and no source problems: those parts of the table are
    kept from the previous one, and problems of objects outside the group are not taken.
    """
    services = {(ingress.meta.namespace, path.backend.service_name) for ingress in members for rule in ingress.rules for path in rule.paths}
    if slices_of is not None:
        slices = tuple(s for service in services for s in slices_of(service))
    else:
        names = {name for _, name in services}
        named = compress(state.endpoint_slices, map(names.__contains__, map(_SERVICE_NAME, state.endpoint_slices)))  # over every slice: no Python-level loop
        slices = tuple(s for s in named if (s.meta.namespace, s.service_name) in services)
    return replace(state, ingresses=members, endpoint_slices=slices, stream_ingresses=(), problems=(), changes=None)


def _spliced(previous: RoutingTable, sub: RoutingTable, hosts: frozenset[str], generation: int) -> Optional[RoutingTable]:
    """The previous table with the group's hosts taken from C{sub}; None if C{sub} has entries elsewhere."""
    exact = frozenset(host for host in hosts if not host.startswith("*."))
    wildcards = frozenset(host[2:] for host in hosts if host.startswith("*."))
    certificates = previous.certificates
    found = sub.certificates
    replaced = (
        _replaced(previous.hosts, sub.hosts, exact),
        _replaced(previous.wildcards, sub.wildcards, wildcards),
        _replaced(previous.passthrough, sub.passthrough, hosts),
        _replaced(certificates.exact, found.exact, exact),
        _replaced(certificates.wildcards, found.wildcards, wildcards),
        _replaced(certificates.client_auth, found.client_auth, hosts),
    )
    if any(result is None for result in replaced) or sub.any_host is not None or sub.default_route is not None:
        return None
    by_host, by_suffix, passthrough, exact_certs, wildcard_certs, client_auth = replaced
    assert by_host is not None and by_suffix is not None and passthrough is not None
    assert exact_certs is not None and wildcard_certs is not None and client_auth is not None
    if exact_certs is not certificates.exact or wildcard_certs is not certificates.wildcards or client_auth is not certificates.client_auth:
        certificates = replace(certificates, exact=exact_certs, wildcards=wildcard_certs, client_auth=client_auth)
    return replace(
        previous,
        generation=generation,
        hosts=by_host,
        wildcards=by_suffix,
        passthrough=passthrough,
        certificates=certificates,
    )


def _skipped(previous: Mapping[ObjectRef, _V], built: Mapping[ObjectRef, _V], refs: frozenset[ObjectRef]) -> Mapping[ObjectRef, _V]:
    """The previous skipped Ingresses with the group's taken from the group build (the previous mapping itself when they did not change)."""
    if all(previous.get(ref) == built.get(ref) for ref in refs):
        return previous
    kept = {ref: why for ref, why in previous.items() if ref not in refs}
    kept.update((ref, why) for ref, why in built.items() if ref in refs)
    return kept


def _replaced(before: Mapping[str, _V], after: Mapping[str, _V], keys: frozenset[str]) -> Optional[Mapping[str, _V]]:
    """
    C{before} with C{keys} as in C{after} (removed when C{after} lacks them); an entry equal to the
    one before stays the object it was, and nothing changed gives C{before} itself.  None when
    C{after} has a key outside C{keys}: the group shaped what it should not have.
    """
    if not after.keys() <= keys:
        return None
    result: Optional[dict[str, _V]] = None
    for key in keys:
        old, value = before.get(key), after.get(key)
        if old is value or (old is not None and old == value):
            continue
        if result is None:
            result = dict(before)
        if value is None:
            del result[key]
        else:
            result[key] = value
    return before if result is None else result


def _problem_key(problem: Problem) -> tuple[ObjectRef, str, str]:
    return (problem.ref, problem.reason, problem.message)


def _problems(previous: tuple[Problem, ...], built: tuple[Problem, ...], refs: frozenset[ObjectRef], start: int) -> tuple[Problem, ...]:
    """
    The previous problems with those of the group's Ingresses replaced by the group build's (the
    first C{start} are the snapshot's own, the source's, unchanged here): sorted
    and unique as the build makes them (merged, not sorted again: a cluster may have thousands), and
    the previous tuple itself when the group's problems did not change (nothing to send).
    """
    kept: list[Problem] = []
    removed: list[Problem] = []
    for problem in previous[start:]:
        (removed if problem.ref in refs else kept).append(problem)
    ours = sorted({problem for problem in built if problem.ref in refs}, key=_problem_key)
    if ours == removed:
        return previous
    return previous[:start] + tuple(merge(kept, ours, key=_problem_key))


def _secrets_kept(
    previous: RoutingTable,
    sub: RoutingTable,
    state: ClusterState,
    index: IngressIndex,
    old_versions: Mapping[ObjectRef, Ingress],
    members: tuple[Ingress, ...],
    refs: frozenset[ObjectRef],
    build: Build,
) -> Optional[Mapping[SecretKey, TLSSecret]]:
    """
    The certificate table's Secrets: a Secret the group names is there while an Ingress we serve
    names it.  The group's own say so by the group's build; for the Ingresses outside the group
    (whose being served did not change), the previous table tells when no old version in the group
    named the Secret, else stand-ins of a few of them are built (L{_served_elsewhere}).  None: not
    decided (a full build).
    """
    before = previous.certificates.secrets
    result: Optional[dict[SecretKey, TLSSecret]] = None
    named_before = {key for ingress in old_versions.values() for key in secrets_of(ingress)}
    for key in named_before | {key for ingress in members for key in secrets_of(ingress)}:
        wanted: Optional[bool]
        if key in sub.certificates.secrets:
            wanted = True
        elif key not in state.secrets or not _outside(index.by_secret.get(key, set()), refs):
            wanted = False
        elif key not in named_before:
            wanted = key in before  # only Ingresses outside the group could have put it there
        else:
            wanted = _served_elsewhere(key, index.by_secret[key], refs, state, index, build)
            if wanted is None:
                return None
        if wanted == (key in before):
            continue
        if result is None:
            result = dict(before)
        if wanted:
            result[key] = state.secrets[key]
        else:
            del result[key]
    return before if result is None else result


def _outside(namers: set[ObjectRef], refs: frozenset[ObjectRef]) -> int:
    """How many of C{namers} are outside the group (without copying them: one Secret may be named by every Ingress)."""
    return len(namers) - sum(1 for ref in refs if ref in namers)


def _served_elsewhere(
    key: SecretKey, namers: set[ObjectRef], refs: frozenset[ObjectRef], state: ClusterState, index: IngressIndex, build: Build
) -> Optional[bool]:
    """
    Whether one of C{namers} outside the group (C{refs}) is served: a build of stand-ins, each the
    Ingress with its class and annotations (what decides whether we serve it) but no rules, naming
    only the Secret.  A few of them, any few (usually the first one we serve says yes); None when
    they say no and there are more.
    """
    probed = list(islice((ref for ref in namers if ref not in refs), _PROBED_NAMERS))
    stand_ins = tuple(replace(index.by_ref[ref], rules=(), default_backend=None, tls=(IngressTLS((), key[1]),)) for ref in probed)
    found = build(replace(state, ingresses=stand_ins, endpoint_slices=(), stream_ingresses=(), problems=()), 0)
    if key in found.table.certificates.secrets:
        return True
    return False if len(probed) == _outside(namers, refs) else None
