"""
Ingress-only changes (ingress.routing.ingress_changes), case by case: the shortcut is taken where it should
be, its table is the full build's, everything it did not touch is the previous table's very object (so the
workers get a small change), and what it cannot be sure of takes a full build.

tests/unit/test_incremental.py checks the same on random sequences of events.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from ingress.routing import Built, build
from ingress.routing.delta import applied, table_change
from ingress.routing.incremental import IncrementalBuild
from tests.unit.objects import T0, T1, T2, Store, endpoints, ingress, path, rule, service, target, tls_secret

NGINX = "nginx.ingress.kubernetes.io/"


def _full(state: Any, generation: int) -> Built:
    return build(state, generation=generation)


def _cluster() -> Store:
    """A few Ingresses, each on its own host, with their Services, endpoints, a certificate and a problem."""
    store = Store()
    for name in ("web", "api", "other"):
        store.put(service(name))
        store.put(endpoints(name, "10.0.0.1", name=f"{name}-a"))
    store.put(tls_secret("shop-tls"))
    store.put(ingress("shop", rule("shop.test", path("/", "web")), created=T0, tls=((("shop.test",), "shop-tls"),)))
    store.put(ingress("api", rule("api.test", path("/", "api")), created=T0))
    store.put(ingress("pages", rule("*.pages.test", path("/", "web")), created=T0))
    store.put(ingress("noisy", rule("noisy.test", path("/", "web")), created=T0, annotations={NGINX + "server-snippet": "return 200;"}))
    return store


class _Run:
    """An IncrementalBuild fed from a store, each table checked against the full build and the change a worker gets."""

    def __init__(self, store: Store, max_share: float = 1.0) -> None:
        self.store = store
        self.incremental = IncrementalBuild(_full, max_share=max_share)
        self.built = self.incremental(store.state(), 1)
        self.worker = _across(self.built.table)

    def next(self) -> tuple[Built, Built]:
        """The previous build and the new one (each a table and its report)."""
        state = self.store.state()
        previous, self.built = self.built, self.incremental(state, self.built.table.generation + 1)
        assert self.built == _full(state, self.built.table.generation), self.incremental.ingress_fallback
        change = table_change(previous.table, self.built.table)
        self.worker = applied(self.worker, _across(change)) if change is not None else _across(self.built.table)
        assert self.worker == self.built.table
        return previous, self.built


def _across(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _problems(table: Built) -> list[tuple[str, str]]:
    return [(p.ref.name, p.reason) for p in table.report.problems]


def test_a_new_ingress_on_a_new_host_builds_only_that_host() -> None:
    run = _Run(_cluster())
    run.store.put(ingress("new", rule("new.test", path("/", "other")), created=T2))
    before, after = run.next()
    assert run.incremental.ingress_updates == 1 and target(after.table, "new.test") == "default/other:80"
    assert all(after.table.hosts[host] is before.table.hosts[host] for host in ("shop.test", "api.test"))
    assert after.table.wildcards is before.table.wildcards and after.table.certificates is before.table.certificates and after.report.problems is before.report.problems
    assert _problems(after) == [("noisy", "UnsupportedAnnotation")]
    change = table_change(before.table, after.table)
    assert change is not None and change.replaced == {} and change.entries == {"hosts": ({"new.test": after.table.hosts["new.test"]}, frozenset())}


def test_a_younger_ingress_on_a_taken_path_is_told_it_lost() -> None:
    """Oldest wins: the route stays the older Ingress's, and the loser gets the Conflict problem."""
    run = _Run(_cluster())
    run.store.put(ingress("late", rule("api.test", path("/", "other"), path("/late", "other")), created=T2))
    before, after = run.next()
    assert run.incremental.ingress_updates == 1
    assert target(after.table, "api.test", "/") == "default/api:80" and target(after.table, "api.test", "/late") == "default/other:80"
    assert _problems(after) == [("late", "Conflict"), ("noisy", "UnsupportedAnnotation")]
    assert "Ingress default/api claimed it first" in after.report.problems[0].message
    assert after.table.hosts["shop.test"] is before.table.hosts["shop.test"]


def test_deleting_the_older_ingress_hands_the_path_to_the_younger() -> None:
    store = _cluster()
    store.put(ingress("late", rule("api.test", path("/", "other")), created=T2))
    run = _Run(store)
    assert _problems(run.built) == [("late", "Conflict"), ("noisy", "UnsupportedAnnotation")]
    store.delete("Ingress", ingress("api"))
    _, after = run.next()
    assert run.incremental.ingress_updates == 1
    assert target(after.table, "api.test") == "default/other:80" and _problems(after) == [("noisy", "UnsupportedAnnotation")]


def test_an_edit_that_changes_nothing_keeps_every_entry() -> None:
    """A status write (our own, after each change) makes a new object with the same spec: nothing to send."""
    store = _cluster()
    run = _Run(store)
    store.put({**ingress("api", rule("api.test", path("/", "api")), created=T0), "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})
    before, after = run.next()
    assert run.incremental.ingress_updates == 1 and after.table.hosts is before.table.hosts and after.report.problems is before.report.problems
    change = table_change(before.table, after.table)
    assert change is not None and change.replaced == {} and change.entries == {}


def test_hosts_shared_through_other_ingresses_are_built_together() -> None:
    """A host of an Ingress that shares a host with the changed one is built again too (and stays right)."""
    store = _cluster()
    store.put(ingress("bridge", rule("api.test", path("/bridge", "web")), rule("far.test", path("/", "web")), created=T1))
    store.put(ingress("far", rule("far.test", path("/", "other")), created=T2))
    run = _Run(store)
    assert target(run.built.table, "far.test") == "default/web:80"
    store.delete("Ingress", ingress("bridge"))
    before, after = run.next()
    assert run.incremental.ingress_updates == 1 and target(after.table, "far.test") == "default/other:80"
    assert after.table.hosts["shop.test"] is before.table.hosts["shop.test"]


def test_a_wildcard_host_is_replaced_and_removed() -> None:
    run = _Run(_cluster())
    run.store.put(ingress("pages", rule("*.pages.test", path("/", "other")), created=T0))
    _, after = run.next()
    assert target(after.table, "a.pages.test") == "default/other:80"
    run.store.delete("Ingress", ingress("pages"))
    _, after = run.next()
    assert run.incremental.ingress_updates == 2 and target(after.table, "a.pages.test") is None and after.table.wildcards == {}


def test_certificates_follow_their_ingresses_and_go_to_workers_entry_by_entry() -> None:
    """The Secrets of other hosts are not sent again: the change names the one host and Secret."""
    store = _cluster()
    store.put(tls_secret("api-tls"))
    run = _Run(store)
    store.put(ingress("api", rule("api.test", path("/", "api")), created=T0, tls=((("api.test",), "api-tls"),)))
    before, after = run.next()
    assert run.incremental.ingress_updates == 1 and after.table.certificates.secret_for("api.test") == ("default", "api-tls")
    change = table_change(before.table, after.table)
    assert change is not None and set(change.entries) == {"hosts", "certificates.exact", "certificates.secrets"}
    assert change.entries["certificates.secrets"] == ({("default", "api-tls"): store.state().secrets[("default", "api-tls")]}, frozenset())
    store.put(ingress("api", rule("api.test", path("/", "api")), created=T0))
    _, after = run.next()
    assert run.incremental.ingress_updates == 2 and ("default", "api-tls") not in after.table.certificates.secrets


def test_a_secret_named_elsewhere_stays_while_an_ingress_we_serve_names_it() -> None:
    """Whether another Ingress naming the Secret is served decides it: ours keeps it, another class's does not."""
    for cls, kept in (("twingress", True), ("other", False)):
        store = _cluster()
        store.put(ingress("elsewhere", rule("elsewhere.test", path("/", "web")), cls=cls, tls=((("elsewhere.test",), "shop-tls"),)))
        run = _Run(store)
        store.delete("Ingress", ingress("shop"))
        _, after = run.next()
        assert run.incremental.ingress_updates == 1 and (("default", "shop-tls") in after.table.certificates.secrets) is kept, cls


def test_a_missing_secret_is_the_ingress_s_problem_until_it_goes() -> None:
    run = _Run(_cluster())
    run.store.put(ingress("new", rule("new.test", path("/", "web")), tls=((("new.test",), "nowhere"),)))
    _, after = run.next()
    assert _problems(after) == [("new", "SecretNotFound"), ("noisy", "UnsupportedAnnotation")]
    run.store.delete("Ingress", ingress("new"))
    _, after = run.next()
    assert run.incremental.ingress_updates == 2 and _problems(after) == [("noisy", "UnsupportedAnnotation")]


def test_what_reaches_beyond_its_hosts_takes_a_full_build() -> None:
    cases = [
        (ingress("new", rule("new.test", path("/", "web")), default=("web", 80)), "spec.defaultBackend"),
        (ingress("new", rule(None, path("/", "web"))), "a rule without host"),
        (ingress("new", rule("new.test", path("/", "web")), annotations={NGINX + "server-alias": "api.test"}), "server-alias"),
        (ingress("new", rule("api.test", path("/x", "web")), annotations={"twingress.io/canary": "true"}), "canary"),
        (ingress("new", rule("new.test", path("/", "web")), annotations={NGINX + "auth-tls-secret": "default/ca"}), "auth-tls-secret"),
    ]
    for obj, reason in cases:
        run = _Run(_cluster())
        run.store.put(obj)
        run.next()
        assert run.incremental.ingress_updates == 0 and run.incremental.ingress_fallback is not None
        assert reason in run.incremental.ingress_fallback, (reason, run.incremental.ingress_fallback)


def test_an_unchanged_ingress_of_the_group_can_make_it_fall_back() -> None:
    """The api host has a canary: a new path on api.test is built in full."""
    store = _cluster()
    store.put(ingress("canary", rule("api.test", path("/", "other")), created=T1, annotations={NGINX + "canary": "true"}))
    run = _Run(store)
    store.put(ingress("new", rule("api.test", path("/new", "other")), created=T2))
    run.next()
    assert run.incremental.ingress_updates == 0 and "default/canary" in (run.incremental.ingress_fallback or "")


def test_a_host_another_ingress_may_alias_takes_a_full_build() -> None:
    """Deleting the Ingress of alias.test lets the server-alias of shop claim it: no group build can know."""
    store = _cluster()
    store.put(ingress("shop", rule("shop.test", path("/", "web")), annotations={NGINX + "server-alias": "alias.test"}))
    store.put(ingress("own", rule("alias.test", path("/", "other"))))
    run = _Run(store)
    assert target(run.built.table, "alias.test") == "default/other:80"
    store.delete("Ingress", ingress("own"))
    _, after = run.next()
    assert run.incremental.ingress_updates == 0 and "alias" in (run.incremental.ingress_fallback or "")
    assert target(after.table, "alias.test") == "default/web:80"


def test_a_group_past_its_share_takes_a_full_build() -> None:
    store = _cluster()
    run = _Run(store, max_share=0.25)  # five Ingresses: a group of two is too many
    store.put(ingress("late", rule("api.test", path("/late", "other")), created=T2))
    run.next()
    assert run.incremental.ingress_updates == 0 and "passed" in (run.incremental.ingress_fallback or "")
    store.put(ingress("alone", rule("alone.test", path("/", "other"))))
    run.next()
    assert run.incremental.ingress_updates == 1


def test_a_slice_change_after_an_ingress_change_reaches_the_new_host() -> None:
    """The slice path's index of which hosts use which Service follows the Ingress change."""
    store = _cluster()
    run = _Run(store)
    store.put(endpoints("other", "10.0.0.2", name="other-a"))
    run.next()
    store.put(ingress("new", rule("new.test", path("/", "other"))))
    run.next()
    store.put(endpoints("other", "10.0.0.3", name="other-a"))
    _, after = run.next()
    route = after.table.match("new.test", "/")
    assert run.incremental.endpoint_updates == 2 and run.incremental.ingress_updates == 1
    assert route is not None and route.upstream.endpoints == (("10.0.0.3", 8080),)


def test_a_failed_build_leaves_nothing_stale() -> None:
    """The index of who names what had moved on to a snapshot whose table was never made: it must not be trusted."""
    store = _cluster()
    failing = False

    def flaky(state: Any, generation: int) -> Built:
        if failing:
            raise RuntimeError("a bug in the build")
        return _full(state, generation)

    incremental = IncrementalBuild(flaky, max_share=1.0)
    incremental(store.state(), 1)
    store.put(ingress("a", rule("a.test", path("/", "web"))))
    failing = True
    with pytest.raises(RuntimeError):
        incremental(store.state(), 2)
    failing = False
    store.put(ingress("b", rule("b.test", path("/", "web"))))
    table = incremental(store.state(), 3)
    assert incremental.ingress_updates == 1 and table == _full(store.state(), 3) and target(table.table, "a.test") == "default/web:80"


def test_a_secret_named_by_many_ingresses_we_do_not_serve_takes_a_full_build() -> None:
    """A few stand-ins are built to find one we serve; when all of those are another class's and there are more, a full build decides."""
    store = _cluster()
    for n in range(17):
        store.put(ingress(f"foreign{n}", rule(f"foreign{n}.test", path("/", "web")), cls="other", tls=(((f"foreign{n}.test",), "shop-tls"),)))
    run = _Run(store)
    store.delete("Ingress", ingress("shop"))
    _, after = run.next()
    assert run.incremental.ingress_updates == 0 and "Secret" in (run.incremental.ingress_fallback or "")
    assert ("default", "shop-tls") not in after.table.certificates.secrets


def test_a_new_application_created_together_builds_only_its_host() -> None:
    """Its Service, its slice and its Ingress in one snapshot (as kubectl apply -f app.yaml does): no full build."""
    run = _Run(_cluster())
    run.store.put(service("new"))
    run.store.put(endpoints("new", "10.0.0.9", name="new-a"))
    run.store.put(ingress("new", rule("new.test", path("/", "new")), created=T2))
    before, after = run.next()
    assert run.incremental.ingress_updates == 1 and run.incremental.last_path == "the routes of the changed ingresses, services, endpoint_slices"
    assert target(after.table, "new.test") == "default/new:80" and after.table.match("new.test", "/").upstream.endpoints == (("10.0.0.9", 8080),)  # type: ignore[union-attr]
    assert all(after.table.hosts[host] is before.table.hosts[host] for host in ("shop.test", "api.test", "noisy.test"))


def test_a_service_that_comes_late_rebuilds_the_ingresses_naming_it() -> None:
    """An Ingress whose Service did not exist (its route answers 503, its problem says why) is built again when the Service comes, with it."""
    run = _Run(_cluster())
    run.store.put(ingress("early", rule("early.test", path("/", "late")), created=T2))
    _, first = run.next()
    assert _problems(first) == [("early", "ServiceNotFound"), ("noisy", "UnsupportedAnnotation")]
    run.store.put(service("late"))
    run.store.put(endpoints("late", "10.0.0.7", name="late-a"))
    run.store.put(ingress("api", rule("api.test", path("/", "api"), path("/v2", "other")), created=T0))  # and an unrelated edit
    before, after = run.next()
    assert run.incremental.ingress_updates == 2 and _problems(after) == [("noisy", "UnsupportedAnnotation")]
    assert after.table.match("early.test", "/").upstream.endpoints == (("10.0.0.7", 8080),)  # type: ignore[union-attr]
    assert after.table.hosts["shop.test"] is before.table.hosts["shop.test"] and after.table.wildcards is before.table.wildcards


def test_a_service_edit_rebuilds_the_hosts_that_use_it() -> None:
    """A Service's port renamed: the Ingresses naming it (and only they) are built again; the edit alone is a change of routes."""
    run = _Run(_cluster())
    run.store.put(service("api", ("grpc", 80)))
    before, after = run.next()
    assert run.incremental.ingress_updates == 1 and after.table.hosts["shop.test"] is before.table.hosts["shop.test"]


def test_a_changed_service_used_beyond_hosts_takes_a_full_build() -> None:
    """A Service behind the default route (spec.defaultBackend) is used by every host's misses: a full build."""
    store = _cluster()
    store.put(ingress("fallback", rule("fallback.test", path("/", "api")), default=("other", 80)))
    run = _Run(store)
    store.put(endpoints("other", "10.0.0.5", name="other-b"))
    store.put(ingress("new", rule("new.test", path("/", "web")), created=T2))
    run.next()
    assert run.incremental.ingress_updates == 0 and "default/other is used beyond hosts" in (run.incremental.ingress_fallback or "")


def test_a_service_named_by_a_stream_takes_a_full_build() -> None:
    """A StreamIngress names Services outside every Ingress: their changes are built in full."""
    store = _cluster()
    store.put(
        {"apiVersion": "twingress.io/v1alpha1", "kind": "StreamIngress", "metadata": {"name": "db", "namespace": "default"},
         "spec": {"protocol": "TCP", "listen": 5432, "upstream": {"service": "db", "port": 5432}}}
    )
    run = _Run(store)
    store.put(service("db", ("pg", 5432)))
    store.put(ingress("new", rule("new.test", path("/", "web")), created=T2))
    run.next()
    assert run.incremental.ingress_updates == 0 and "streams" in (run.incremental.ingress_fallback or "")
