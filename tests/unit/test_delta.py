"""
What the workers are sent (ingress.routing.delta): the certificate table goes mapping by mapping, so that
one host's new certificate does not send every other host's Secret again.
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import Any

from ingress.model.parse import state_from_objects
from ingress.routing import build
from ingress.routing.delta import _entries, applied, table_change
from tests.unit.objects import ingress, path, rule, service, tls_secret


def _across(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_certificate_change_sends_only_the_entries_that_changed() -> None:
    objects = [service("web"), tls_secret("a-tls"), tls_secret("b-tls"), tls_secret("c-tls")]
    objects += [ingress(name, rule(f"{name}.test", path("/", "web")), tls=(((f"{name}.test",), f"{name}-tls"),)) for name in ("a", "b", "c")]
    state = state_from_objects(objects)
    old = build(state, generation=1)
    certificates = old.table.certificates
    exact = {**certificates.exact, "b.test": ("default", "c-tls")}
    secrets = {key: secret for key, secret in certificates.secrets.items() if key != ("default", "b-tls")}
    new = replace(old.table, generation=2, certificates=replace(certificates, exact=exact, secrets=secrets, default=("default", "a-tls")))
    change = table_change(old.table, new)
    assert change is not None
    assert change.replaced == {"certificates.default": ("default", "a-tls")}
    assert change.entries == {
        "certificates.exact": ({"b.test": ("default", "c-tls")}, frozenset()),
        "certificates.secrets": ({}, frozenset({("default", "b-tls")})),
    }
    assert applied(_across(old.table), _across(change)) == new


def test_an_unchanged_certificate_table_is_not_sent() -> None:
    old = build(state_from_objects([service("web"), ingress("a", rule("a.test", path("/", "web")))]), generation=1)
    hosts = {**old.table.hosts, "b.test": old.table.hosts["a.test"]}
    change = table_change(old.table, replace(old.table, generation=2, hosts=hosts))
    assert change is not None and change.replaced == {} and set(change.entries) == {"hosts"}


def test_the_entries_are_found_whether_or_not_the_keys_keep_their_order() -> None:
    a, b, c, d = object(), object(), object(), object()
    before = {"a": a, "b": b, "c": c}
    assert _entries(before, {"a": a, "b": d, "c": c}) == ({"b": d}, frozenset())  # a copy, one value replaced
    assert _entries(before, {"c": c, "a": a, "b": d}) == ({"b": d}, frozenset())  # the same keys in another order
    assert _entries(before, {"a": a, "d": d, "c": c}) == ({"d": d}, frozenset({"b"}))  # as many keys, one of them another
    assert _entries(before, {"a": a}) == ({}, frozenset({"b", "c"}))
