"""
An informer's part of the snapshot followed write by write (ingress.sources.kube.parts) is what
ingress.model.parse.collect makes of the store's values, field for field and in the same order,
after any sequence of writes, deletes, invalid objects and relists between any two snapshots.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ingress.model import ClusterState
from ingress.model.parse import KINDS, collect
from ingress.sources.kube.parts import CollectedPart
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
            assert state == expected
            for name in ("ingresses", "services", "endpoint_slices", "secrets", "opaque_secrets"):
                value, wanted = getattr(state, name), getattr(expected, name)
                assert list(value.items() if isinstance(value, dict) else value) == list(wanted.items() if isinstance(wanted, dict) else wanted)
                assert all(a is b for a, b in zip(value.values() if isinstance(value, dict) else value, wanted.values() if isinstance(wanted, dict) else wanted, strict=True))
            assert state.problems == expected.problems
            last = state
    assert _followed(store, part) is last  # nothing written since: the very same part


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
