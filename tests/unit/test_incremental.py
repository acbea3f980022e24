"""
EndpointSlice-only changes and changes of Ingresses, Services and slices applied to the previous table
(ingress.routing.incremental, ingress.routing.ingress_changes): after any sequence of events, for every
kind, one at a time or several in one snapshot, the table must equal a full build of the same state.

The store (tests.unit.objects.Store) keeps each parsed object until its own event replaces it, as an
informer's store does, so that unchanged objects are the same objects from one snapshot to the next.
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingress.model import CONTROLLER_NAME
from ingress.routing import Built, build
from ingress.routing.build_options import BuildOptions
from ingress.routing.delta import applied, table_change
from ingress.routing.endpoint_changes import ServiceUses, SliceIndex
from ingress.routing.incremental import IncrementalBuild
from ingress.routing.ingress_index import IngressIndex
from tests.unit.objects import T0, T1, T2, FollowedStore, Store, endpoints, ingress, ingress_class, path, rule, service, tls_secret

NGINX = "nginx.ingress.kubernetes.io/"
SERVICES = ("web", "api", "admin", "gone")  # "gone" never exists: its routes answer 503
ADDRESSES = tuple(f"10.0.0.{n}" for n in range(1, 7))


PORTS = {80: "http"}  # a Gateway's HTTP listener on port 80 is served


def _full(state: Any, generation: int) -> Built:
    return build(state, BuildOptions(reserved_ports=PORTS), generation=generation)


def _full_with_options(state: Any, generation: int) -> Built:
    """The build with the options that change what a table holds for every host: a default certificate, no nginx keys."""
    return build(state, BuildOptions(default_certificate=("default", "cert"), nginx_annotations=False, reserved_ports=PORTS), generation=generation)


GW = "gateway.networking.k8s.io/v1"


def _http_route(name: str, hostnames: tuple[str, ...], weights: tuple[tuple[str, int], ...], header: bool) -> dict[str, Any]:
    """
    An HTTPRoute with a rule of weighted backends and, when asked, a rule that needs a header (a path slot with choices)
    and one with a RegularExpression path (the host's paths are a RegexPaths).
    """
    rules: list[dict[str, Any]] = [{"backendRefs": [{"name": svc, "port": 80, "weight": weight} for svc, weight in weights]}]
    if header:
        rules.insert(0, {"matches": [{"headers": [{"name": "x-v", "value": "2"}]}], "backendRefs": [{"name": "api", "port": 80}]})
        rules.append({"matches": [{"path": {"type": "RegularExpression", "value": "/r/[a-z]+"}}], "backendRefs": [{"name": "admin", "port": 80}]})
    return {"apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": name, "namespace": "default", "creationTimestamp": T0},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": list(hostnames), "rules": rules}}


def _gateway_objects() -> list[dict[str, Any]]:
    """A Gateway of ours with routes over an exact host, a Gateway wildcard (any number of labels) and an Ingress's host."""
    return [
        {"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "twingress"}, "spec": {"controllerName": "twingress.io/gateway-controller"}},
        {"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "gw", "namespace": "default"},
         "spec": {"gatewayClassName": "twingress", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}},
        _http_route("g", ("g.test", "*.deep.test"), (("web", 3), ("admin", 1), ("gone", 1)), True),
        _http_route("clash", ("shop.test",), (("web", 1),), False),  # an Ingress's host: reported, not served
    ]


def _cluster(error_pages: bool = False, gateway: bool = False, far_reaching: bool = True, followed: bool = False) -> Store:
    """
    C{far_reaching}: with the Ingresses whose changes (and their Services' changes) need a full build.
    C{followed}: snapshots made as the kube source makes them, saying what was written since the one before.
    """
    store = FollowedStore() if followed else Store()
    for obj in _gateway_objects() if gateway else ():
        store.put(obj)
    for name in SERVICES[:3]:
        store.put(service(name, ("http", 80), ("metrics", 9090)))
    store.put(tls_secret("cert"))
    store.put(tls_secret("cert2"))
    store.put(ingress("shop", rule("shop.test", path("/", "web"), path("/api", "api", "http"), path("/gone", "gone"))))
    store.refuse(ingress("shop"), "spec.rules: not a list; its last good version stays in use")  # the source's own problem
    if far_reaching:
        store.put(ingress("canary", rule("shop.test", path("/", "admin")), created=T1, annotations={NGINX + "canary": "true", NGINX + "canary-weight": "50"}))
    store.put(ingress("direct", rule("direct.test", path("/", "api")), annotations={NGINX + "service-upstream": "true"}))
    if far_reaching:
        store.put(ingress("pass", rule("pass.test", path("/", "admin", 80)), annotations={NGINX + "ssl-passthrough": "true"}))
        store.put(ingress("fallback", rule("fallback.test", path("/", "api")), default=("web", 80)))
    # Secrets that Ingresses outside a group name too: one we serve, one of another class
    store.put(ingress("keeper", rule("keep.test", path("/", "gone")), tls=((("keep.test",), "cert"),)))
    store.put(ingress("foreign", rule("foreign.test", path("/", "gone")), cls="other", tls=((("foreign.test",), "cert2"),)))
    # Hosts that an Ingress's annotations claim while no Ingress names them: b.test (server-alias), c.test (from www.c.test)
    if far_reaching:
        store.put(ingress("aliaser", rule("www.c.test", path("/", "gone")), annotations={NGINX + "server-alias": "b.test", NGINX + "from-to-www-redirect": "true"}))
    if error_pages:  # routes shaped by endpoints beyond their endpoint sets: every change is a full build
        store.put(ingress("pages", rule("pages.test", path("/", "web")), annotations={NGINX + "custom-http-errors": "404", NGINX + "default-backend": "admin"}))
    return store


slice_events = st.tuples(
    st.just("slice"),
    st.sampled_from(SERVICES),
    st.integers(0, 1),  # which of two slices of the Service
    st.lists(st.sampled_from(ADDRESSES), max_size=3, unique=True),
    st.lists(st.sampled_from(ADDRESSES), max_size=2, unique=True),  # not ready
    st.sampled_from(("http", "metrics", "other")),
)
other_events = st.one_of(
    st.tuples(st.just("delete-slice"), st.sampled_from(SERVICES), st.integers(0, 1)),
    st.tuples(st.just("service"), st.sampled_from(SERVICES), st.sampled_from((80, 8080))),
    st.tuples(st.just("delete-service"), st.sampled_from(SERVICES)),
    st.tuples(st.just("annotation"), st.sampled_from(("shop", "direct")), st.sampled_from(("true", "false"))),
    st.tuples(st.just("ingress"), st.sampled_from(SERVICES)),
    st.tuples(st.just("secret"), st.sampled_from(("cert", "cert2")), st.sampled_from((None, 0, 1))),  # deleted, or one of two contents
    st.tuples(st.just("lost")),  # a snapshot taken and never built (a build that failed): the next one's changes are not from the last built
    # The class "other" becomes ours (its Ingresses are served), the default class, or goes
    st.tuples(st.just("class"), st.sampled_from((None, "ours", "default", "foreign"))),
)
# Ingresses that come, change and go: a few names over a few hosts, so that they share hosts, conflict
# on paths (oldest wins), take TLS hosts from each other, and now and then do what needs a full build.
INGRESS_NAMES = ("i0", "i1", "i2", "i3")
HOSTS = ("a.test", "a.test", "b.test", "c.test", "*.w.test", "x.w.test", "direct.test", "keep.test", "shop.test", None)
PATHS = (("/", "Prefix"), ("/", "Prefix"), ("/api", "Prefix"), ("/x", "Exact"))
ANNOTATIONS: tuple[dict[str, str], ...] = (
    {}, {}, {},
    {NGINX + "ssl-redirect": "false"},
    {NGINX + "force-ssl-redirect": "true"},
    {"twingress.io/hsts-max-age": "60", NGINX + "proxy-read-timeout": "5"},
    {NGINX + "proxy-read-timeout": "soon"},  # unreadable: the Ingress's paths are not served
    {NGINX + "server-snippet": "return 200;", "twingress.io/typo": "1"},  # problems only
    {NGINX + "service-upstream": "true"},
    {NGINX + "proxy-ssl-secret": "default/cert"},  # a Secret's PEMs in a route: its renewal is built again
    {NGINX + "server-alias": "b.test,alias.test"},  # the ones below need a full build
    {NGINX + "from-to-www-redirect": "true"},
    {NGINX + "canary": "true", NGINX + "canary-by-header": "x-canary"},
    {NGINX + "use-regex": "true"},
)
tls_sections = st.lists(
    st.tuples(st.lists(st.sampled_from(HOSTS[:-1]), max_size=2, unique=True).map(tuple), st.sampled_from(("cert", "cert2", "missing"))),
    max_size=2,
).map(tuple)
ingress_events = st.one_of(
    st.tuples(
        st.just("put-ingress"),
        st.sampled_from(INGRESS_NAMES),
        st.lists(st.tuples(st.sampled_from(HOSTS), st.sampled_from(PATHS), st.sampled_from(SERVICES)), min_size=1, max_size=3),
        st.sampled_from((T0, T1, T2, "")),  # "" (no timestamp) sorts last
        tls_sections,
        st.sampled_from(ANNOTATIONS),
        st.sampled_from(("twingress", "twingress", "twingress", "other")),
        st.sampled_from((None, None, None, None, ("web", 80))),
    ),
    st.tuples(st.just("delete-ingress"), st.sampled_from(INGRESS_NAMES)),
)
route_events = st.one_of(
    st.tuples(
        st.just("put-route"),
        st.sampled_from(("g", "r1")),
        st.lists(st.sampled_from(("g.test", "*.deep.test", "a.test", "r.test")), min_size=1, max_size=2, unique=True).map(tuple),
        st.lists(st.tuples(st.sampled_from(SERVICES), st.integers(0, 3)), min_size=1, max_size=3).map(tuple),
        st.booleans(),
    ),
    st.tuples(st.just("delete-route"), st.sampled_from(("g", "r1"))),
)
# A new application, part by part: its Service, its slice, its Ingress (a host of its own, or a shared one).
app_events = st.tuples(st.just("app"), st.sampled_from(("n0", "n1")), st.sampled_from(("service", "slice", "ingress", "shared", "all")))
event = st.one_of(slice_events, slice_events, other_events, ingress_events, ingress_events, ingress_events, route_events, app_events)
# What one snapshot brings: mostly one event, often several of any kinds (the builder waits a few
# milliseconds and takes whatever came meanwhile, as when kubectl applies a file of objects).
steps = st.lists(st.lists(event, min_size=1, max_size=4), min_size=1, max_size=10)


def _apply(store: Store, event: tuple[Any, ...]) -> None:
    kind = event[0]
    if kind == "slice":
        _, name, n, ready, not_ready, port = event
        store.put(endpoints(name, *ready, not_ready=tuple(not_ready), ports=((port, 8000 + n),), name=f"{name}-{n}"))
    elif kind == "delete-slice":
        store.delete("EndpointSlice", endpoints(event[1], name=f"{event[1]}-{event[2]}"))
    elif kind == "service":
        store.put(service(event[1], ("http", event[2]), ("metrics", 9090)))
    elif kind == "delete-service":
        store.delete("Service", service(event[1]))
    elif kind == "annotation":  # an edit that value equality of the metadata would not see
        store.put(ingress(event[1], rule(f"{event[1]}.test", path("/", "api")), annotations={NGINX + "ssl-redirect": event[2]}))
    elif kind == "secret":
        if event[2] is None:
            store.delete("Secret", tls_secret(event[1]))
        else:
            renewed = tls_secret(event[1])
            renewed["stringData"] = {"tls.crt": f"certificate {event[2]} of {event[1]}", "tls.key": f"key {event[2]}"}
            store.put(renewed)
    elif kind == "put-ingress":
        _, name, rules, created, tls, annotations, cls, default = event
        made = [rule(host, path(p, svc, kind=path_type)) for host, (p, path_type), svc in rules]
        store.put(ingress(name, *made, created=created, tls=tls, annotations=dict(annotations), cls=cls, default=default))
    elif kind == "delete-ingress":
        store.delete("Ingress", ingress(event[1]))
    elif kind == "lost":
        store.state()
    elif kind == "class":
        if event[1] is None:
            store.delete("IngressClass", ingress_class("other"))
        else:
            store.put(ingress_class("other", CONTROLLER_NAME if event[1] != "foreign" else "example.com/other", default=event[1] == "default"))
    elif kind == "app":
        _, name, part = event
        if part in ("service", "all"):
            store.put(service(name, ("http", 80)))
        if part in ("slice", "all"):
            store.put(endpoints(name, "10.0.0.8", name=f"{name}-0"))
        if part in ("ingress", "shared", "all"):
            store.put(ingress(name, rule("a.test" if part == "shared" else f"{name}.test", path(f"/{name}", name))))
    elif kind == "put-route":
        store.put(_http_route(*event[1:]))
    elif kind == "delete-route":
        store.delete("HTTPRoute", _http_route(event[1], (), (), False))
    else:
        store.put(ingress("late", rule("late.test", path("/", event[1]))))


def test_after_every_event_the_table_is_the_full_builds() -> None:
    """
    And a worker, which holds its own (unpickled) copy of each table, gets the same table from the
    change the primary sends.  Over the run, a good share of the Ingress-only changes must have
    taken the Ingress path: the test cannot pass by always building in full.
    """
    counted = {"ingress_steps": 0, "ingress_updates": 0}
    ingress_kinds = ("put-ingress", "delete-ingress", "annotation", "ingress", "app")

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps, st.booleans(), st.sampled_from((_full, _full_with_options)), st.booleans(), st.booleans(), st.booleans())
    def run(sequence: list[list[tuple[Any, ...]]], error_pages: bool, full: Any, gateway: bool, far_reaching: bool, followed: bool) -> None:
        store = _cluster(error_pages, gateway, far_reaching, followed)
        incremental = IncrementalBuild(full, max_share=1.0)  # a tiny cluster: any group may take the Ingress path
        table = incremental(store.state(), 1)
        worker = _across(table.table)
        for generation, batch in enumerate(sequence, start=2):
            for event in batch:
                _apply(store, event)
            state = store.state()
            previous, table = table, incremental(state, generation)
            assert table == full(state, generation), (batch, incremental.ingress_fallback)
            _check_indexes(incremental, state, table)
            change = table_change(previous.table, table.table)
            worker = applied(worker, _across(change)) if change is not None else _across(table.table)
            assert worker == table.table, batch
        if not any(kind == "put-route" for batch in sequence for kind, *_ in batch) and not gateway:  # Gateway routes: Ingress changes build in full
            counted["ingress_steps"] += sum(1 for batch in sequence if any(event[0] in ingress_kinds for event in batch))
        counted["ingress_updates"] += incremental.ingress_updates

    run()
    assert counted["ingress_updates"] * 4 > counted["ingress_steps"], counted


def _check_indexes(incremental: IncrementalBuild, state: Any, table: Built) -> None:
    """
    What the next update trusts, kept up to date from one update to the next, is what it would be
    made from scratch: which hosts use which Service (the slice path), who names which host and
    Secret (the Ingress path).  Checked here because a stale entry only shows in a table later.
    """
    uses = incremental._last[2] if incremental._last is not None else None
    if uses is not None:
        fresh = ServiceUses.of(table)
        assert (uses.hosts, uses.wildcards, uses.deep_wildcards) == (fresh.hosts, fresh.wildcards, fresh.deep_wildcards)
        assert uses.shaped_by_endpoints >= fresh.shaped_by_endpoints  # it may stay on, which only costs full builds
    index = incremental._index
    if index is not None:
        fresh_index = IngressIndex.of(state.ingresses)
        assert (index.by_ref, index.by_name, index.by_secret, index.aliases, index.by_service) == (
            fresh_index.by_ref, fresh_index.by_name, fresh_index.by_secret, fresh_index.aliases, fresh_index.by_service
        )
        assert index.by_id.keys() == fresh_index.by_id.keys()  # what the next comparison of snapshots starts from
    slices = incremental._slices
    if slices is not None and slices.slices is state.endpoint_slices:
        fresh_slices = SliceIndex(state)
        assert {key: sorted(map(id, found)) for key, found in slices.by_service.items() if found} == {key: sorted(map(id, found)) for key, found in fresh_slices.by_service.items()}
        assert slices.by_key == fresh_slices.by_key


def _across(value: Any) -> Any:
    """What the channel does to a message."""
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_slice_change_is_applied_without_a_build() -> None:
    """The fast path is taken (not only correct when it is not): routes of other Services are the same objects."""
    store = _cluster()
    store.put(endpoints("api", "10.0.0.1", name="api-0"))
    incremental = IncrementalBuild(_full)
    before = incremental(store.state(), 1)
    store.put(endpoints("web", "10.0.0.2", "10.0.0.3", name="web-0"))
    after = incremental(store.state(), 2)
    assert incremental.endpoint_updates == 1 and after == _full(store.state(), 2)
    shop = after.table.match("shop.test", "/")
    assert shop is not None and shop.upstream.endpoints == (("10.0.0.2", 8080), ("10.0.0.3", 8080))
    assert after.table.hosts["direct.test"] is before.table.hosts["direct.test"] and after.table.certificates is before.table.certificates
    change = table_change(before.table, after.table)  # what the workers get: the one host and the default route (web's too)
    assert change is not None and change.replaced == {"default_route": after.table.default_route}
    assert change.entries == {"hosts": ({"shop.test": after.table.hosts["shop.test"]}, frozenset())}
    assert applied(before.table, change) == after.table


def test_a_full_build_goes_to_the_workers_whole() -> None:
    store = _cluster()
    first = _full(store.state(), 1)
    store.put(ingress("late", rule("late.test", path("/", "web"))))
    assert table_change(first.table, _full(store.state(), 2).table) is None


def test_an_annotation_edit_is_never_taken_for_no_change() -> None:
    """ObjectMeta's equality leaves annotations out: the change must be seen by object identity."""
    store = _cluster()
    incremental = IncrementalBuild(_full)
    incremental(store.state(), 1)
    store.put(ingress("direct", rule("direct.test", path("/", "api"))))  # service-upstream removed
    after = incremental(store.state(), 2)
    assert incremental.endpoint_updates == 0 and after == _full(store.state(), 2)


def test_a_default_backend_waiting_for_endpoints_takes_a_full_build() -> None:
    """A default-backend without endpoints is unused (NoEndpoints); its first endpoint brings it in."""
    store = _cluster(error_pages=True)
    incremental = IncrementalBuild(_full)
    incremental(store.state(), 1)
    store.put(endpoints("admin", "10.0.0.9", name="admin-0"))
    after = incremental(store.state(), 2)
    pages = after.table.match("pages.test", "/")
    assert pages is not None and pages.policies is not None and pages.policies.error_pages is not None
    assert pages.policies.error_pages.backend is not None and incremental.endpoint_updates == 0


def test_a_change_carries_removed_entries() -> None:
    """Entries gone from a mapping are named in the change and gone from the table it makes."""
    store = _cluster()
    old = _full(store.state(), 1)
    hosts = dict(old.table.hosts)
    del hosts["pass.test"]
    new = replace(old.table, generation=2, hosts=hosts)
    change = table_change(old.table, new)
    assert change is not None and change.entries == {"hosts": ({}, frozenset({"pass.test"}))}
    assert applied(_across(old.table), _across(change)) == new
    with pytest.raises(ValueError):
        applied(new, change)  # a change applies to its base generation only


def test_a_renewed_certificate_is_swapped_in_without_a_build() -> None:
    """A Secret's contents changed (cert-manager renews): the certificate table gets the new PEMs, the routes stay the very same."""
    store = _cluster()
    incremental = IncrementalBuild(_full)
    before = incremental(store.state(), 1)
    renewed = tls_secret("cert")
    renewed["stringData"] = {"tls.crt": "the renewed certificate", "tls.key": "its new key"}
    store.put(renewed)
    state = store.state()
    table = incremental(state, 2)
    assert incremental.secret_updates == 1 and incremental.last_path == "Secrets only"
    assert table == _full(state, 2)
    assert table.table.hosts is before.table.hosts  # nothing built again
    assert table.table.certificates.secrets[("default", "cert")] is state.secrets[("default", "cert")]


def test_a_secret_whose_contents_go_into_routes_takes_a_full_build() -> None:
    """proxy-ssl-secret (and auth-tls-secret) put a Secret's PEMs into a route's policies: those must be built again."""
    store = _cluster()
    store.put(ingress("mtls", rule("mtls.test", path("/", "web")), annotations={NGINX + "proxy-ssl-secret": "default/cert"}))
    incremental = IncrementalBuild(_full)
    incremental(store.state(), 1)
    store.put(tls_secret("cert"))
    state = store.state()
    assert incremental(state, 2) == _full(state, 2)
    assert incremental.secret_updates == 0


def test_warm_makes_what_the_next_endpoint_update_needs() -> None:
    """After warm() (the build thread's idle work) the endpoint update reuses the uses and the slice index it made, and equals a full build."""
    store = _cluster()
    incremental = IncrementalBuild(_full)
    incremental(store.state(), 1)
    incremental.warm()
    assert incremental._last is not None
    uses, slices = incremental._last[2], incremental._slices
    assert uses is not None and slices is not None
    store.put(endpoints("web", "10.0.0.7", name="web-0"))
    after = incremental(store.state(), 2)
    assert incremental.endpoint_updates == 1 and after == _full(store.state(), 2)
    assert incremental._last[2] is uses and incremental._slices is slices  # reused, moved on to the new snapshot
    assert slices.slices is incremental._last[0].endpoint_slices
