"""
An informer's part of the snapshot followed write by write (ingress.sources.kube.parts) holds what
ingress.model.parse.collect makes of the store's values, field for field and object for object,
after any sequence of writes, deletes, invalid objects and relists between any two snapshots.  (The
order may differ: an object that was invalid goes last when it becomes valid; nothing reads the order.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.model import ClusterState
from ingress.model.parse import KINDS, collect
from ingress.sources.kube.parts import CollectedPart, Snapshots
from ingress.sources.kube.reflector import Store, parse_item
from tests.unit.objects import endpoints, ingress, path, rule, service, tls_secret

NAMES = ("a", "b", "c", "d")


def _object(kind: str, name: str, variant: int) -> dict[str, Any]:
    """One of a few versions of an object of C{kind}; variant 2 is one the parser refuses (a Problem in the store)."""
    if kind == "Ingress":
        made = ingress(name, rule(f"{name}.test", path(f"/{variant}", "web")))
        if variant == 2:
            made["spec"]["rules"] = "not a list"
        return made
    if kind == "Service":
        made = service(name, ("http", 80 + variant))
        if variant == 2:
            made["spec"]["ports"] = [{"port": "eighty"}]
        return made
    if kind == "EndpointSlice":
        return endpoints(name, f"10.0.0.{variant + 1}", name=f"{name}-0")
    secret = tls_secret(name)  # a TLS Secret, or the same name as an Opaque one: another field of the part
    if variant == 1:
        secret = {**secret, "type": "Opaque", "stringData": {"password": "x"}}
    return secret


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


writes = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(NAMES), st.integers(0, 2)),
        st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just(0)),
        st.tuples(st.just("relist"), st.just(""), st.just(0)),
        st.tuples(st.just("snapshot"), st.just(""), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(("Ingress", "Service", "EndpointSlice", "Secret")), writes)
def test_a_followed_part_is_what_collect_makes(kind: str, sequence: list[tuple[str, str, int]]) -> None:
    handler = next(k for k in KINDS.values() if k.kind == kind and k.api_version in ("v1", "networking.k8s.io/v1", "discovery.k8s.io/v1"))
    store, part = Store(), CollectedPart(handler)
    last: ClusterState = _followed(store, part)
    for action, name, variant in [*sequence, ("snapshot", "", 0)]:
        if action == "put":
            obj = _object(kind, name, variant)
            store.put(_key(obj), parse_item(obj))
        elif action == "delete":
            store.delete(_key(_object(kind, name, 0)))
        elif action == "relist":
            store.replace(dict(store._items))  # a relist's items: the same, in a new dict
        else:
            state = _followed(store, part)
            expected = collect((handler, value) for value in store.values())
            for name in ("ingresses", "services", "endpoint_slices", "secrets", "opaque_secrets"):
                assert _by_key(getattr(state, name)) == _by_key(getattr(expected, name)), name
            assert state.problems == expected.problems
            last = state
    assert _followed(store, part) is last  # nothing written since: the very same part


def _by_key(values: Any) -> list[tuple[tuple[str, str], int]]:
    """The values by their namespace and name, as the very objects (their ids): the order of a kind's values is not part of what it says."""
    items = values.values() if isinstance(values, dict) else values
    return sorted(((value.meta.namespace, value.meta.name), id(value)) for value in items)


def _followed(store: Store, part: CollectedPart) -> ClusterState:
    whole, changes = store.take_changes()
    if whole:
        part.reset(changes)
    else:
        part.update(changes)
    return part.state()


def test_a_field_no_write_touched_stays_the_same_object() -> None:
    """The incremental build compares kinds by identity: a TLS Secret written leaves the Opaque ones' mapping as it was."""
    handler = KINDS[("v1", "Secret")]
    store, part = Store(), CollectedPart(handler)
    for name in ("a", "b"):
        store.put(_key(_object("Secret", name, 0)), parse_item(_object("Secret", name, 0)))
    store.put(_key(_object("Secret", "c", 1)), parse_item(_object("Secret", "c", 1)))
    first = _followed(store, part)
    store.put(_key(_object("Secret", "a", 0)), parse_item(_object("Secret", "a", 0)))
    second = _followed(store, part)
    assert second is not first and second.opaque_secrets is first.opaque_secrets and second.secrets is not first.secrets
    assert list(second.secrets) == [("default", "a"), ("default", "b")]  # a changed value keeps its place


def test_each_snapshot_says_what_was_written_since_the_one_before() -> None:
    """Numbered, each from the one before; a relist (or the first list) says nothing, so the build compares."""
    services, slices = Store(), Store()
    stores = [(KINDS[("v1", "Service")], services), (KINDS[("discovery.k8s.io/v1", "EndpointSlice")], slices)]
    snapshots = Snapshots()
    services.put(("default", "a"), parse_item(_object("Service", "a", 0)))
    first = snapshots.take(stores)
    assert first.changes is not None and first.changes.written is None and first.changes.serial == 1
    services.put(("default", "b"), parse_item(_object("Service", "b", 0)))
    services.delete(("default", "a"))
    slices.put(("default", "a-0"), parse_item(_object("EndpointSlice", "a", 0)))
    second = snapshots.take(stores)
    assert second.changes is not None and (second.changes.base, second.changes.serial) == (1, 2)
    assert second.changes.written == {
        "services": {("default", "b"): second.services[("default", "b")], ("default", "a"): None},
        "endpoint_slices": {("default", "a-0"): second.endpoint_slices[0]},
    }
    third = snapshots.take(stores)
    assert third.changes is not None and third.changes.written == {} and third.services is second.services
    slices.replace(dict(slices._items))
    fourth = snapshots.take(stores)
    assert fourth.changes is not None and fourth.changes.written is None
