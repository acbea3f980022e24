"""
Routing follows the cluster live: twingress against a real kube-apiserver, real HTTP requests
through the proxy to real echo backends on pod-like addresses (10.244.0.N), addressed by
EndpointSlices the tests write. Each test has its own namespace and hosts named after it.
"""

from __future__ import annotations

import pytest

from tests.kube.twingress import CONTROLLER, host_for, wait_until

pytestmark = pytest.mark.kube


def test_create_routes_to_the_backend(kube, namespace, echo, twingress):
    proxy = twingress()
    pod = echo("pod-a")
    host = host_for(namespace, "web")
    assert proxy.get(host).status == 404

    kube.backend(namespace, "web", [pod])
    kube.create_ingress(namespace, "web", host, "web")

    response = proxy.wait_status(host, 200, "/hello?x=1", backend="pod-a")
    assert response.json["path"] == "/hello"
    assert response.json["host"] == host
    route = wait_until(lambda: proxy.route(host, "/"), what=f"{host} in /debug/routes")
    assert route["route"] == f"{namespace}/web"
    assert route["upstream"] == f"{namespace}/web:80"
    assert route["endpoints"] == [f"{pod.host}:{pod.port}"]


def test_objects_that_exist_at_startup_are_routed_once_ready(kube, namespace, echo, twingress):
    """Readiness means synced: what the initial lists returned is live when /readyz is 200."""
    pod = echo("pod-a")
    host = host_for(namespace, "early")
    kube.backend(namespace, "early", [pod])
    kube.create_ingress(namespace, "early", host, "early")

    proxy = twingress()

    response = proxy.get(host)
    assert response.status == 200, response
    assert response.backend == "pod-a"
    status, readyz = proxy.readyz()
    assert status == 200
    for kind in ("Ingress", "IngressClass", "Service", "EndpointSlice", "Secret"):
        assert readyz["informers"][kind]["synced"] is True, readyz
        assert readyz["informers"][kind]["connected"] is True, readyz


def test_update_ingress_host_and_path_then_delete(kube, namespace, echo, twingress):
    proxy = twingress()
    pod = echo("pod-a")
    first, second = host_for(namespace, "first"), host_for(namespace, "second")
    kube.backend(namespace, "web", [pod])
    kube.create_ingress(namespace, "web", first, "web")
    proxy.wait_status(first, 200, backend="pod-a")

    # The host changes: the old one is gone, the new one routes.
    kube.replace_ingress(namespace, "web", second, "web")
    proxy.wait_status(second, 200, backend="pod-a")
    proxy.wait_status(first, 404)
    assert not proxy.has_host(first)

    # The path changes to a prefix: only paths under it route.
    kube.replace_ingress(namespace, "web", second, "web", path="/v2")
    proxy.wait_status(second, 404, "/other")
    assert proxy.get(second, "/v2").status == 200
    response = proxy.get(second, "/v2/items")
    assert response.status == 200 and response.backend == "pod-a", response
    assert proxy.get(second, "/v2x").status == 404  # prefixes match whole path elements
    routes = proxy.routes()["hosts"][second]
    assert list(routes["prefix"]) == ["/v2"], routes

    # Deleted: 404, and the host leaves the table.
    kube.delete_ingress(namespace, "web")
    proxy.wait_status(second, 404, "/v2")
    wait_until(lambda: not proxy.has_host(second), what=f"{second} gone from /debug/routes")


def test_two_ingresses_two_services(kube, namespace, echo, twingress):
    """Separate Ingresses and Services stay separate, and deleting one leaves the other."""
    proxy = twingress()
    a, b = echo("pod-a"), echo("pod-b")
    host_a, host_b = host_for(namespace, "a"), host_for(namespace, "b")
    kube.backend(namespace, "svc-a", [a])
    kube.backend(namespace, "svc-b", [b])
    kube.create_ingress(namespace, "a", host_a, "svc-a")
    kube.create_ingress(namespace, "b", host_b, "svc-b")
    proxy.wait_status(host_a, 200, backend="pod-a")
    proxy.wait_status(host_b, 200, backend="pod-b")

    kube.delete_ingress(namespace, "a")
    proxy.wait_status(host_a, 404)
    assert proxy.backends_hit(host_b, 5) == {"pod-b": 5}


def test_endpoint_slice_scaled_to_four_gets_round_robin(kube, namespace, echo, twingress):
    proxy = twingress()
    first = echo("pod-0")
    pods = [first] + [echo(f"pod-{i}", port=first.port) for i in range(1, 4)]
    host = host_for(namespace, "scaled")
    kube.backend(namespace, "web", pods[:1])
    kube.create_ingress(namespace, "web", host, "web")
    proxy.wait_status(host, 200, backend="pod-0")
    assert proxy.backends_hit(host, 10) == {"pod-0": 10}

    kube.put_endpoint_slice(namespace, "web-1", "web", [p.host for p in pods], first.port)
    expected = sorted(f"{p.host}:{p.port}" for p in pods)
    wait_until(lambda: sorted(proxy.route(host, "/")["endpoints"]) == expected, what="four endpoints in /debug/routes")

    hits = proxy.backends_hit(host, 40)
    assert set(hits) == {p.name for p in pods}, hits
    assert all(count >= 5 for count in hits.values()), hits

    # Scaled back to two: the removed ones get nothing.
    kube.put_endpoint_slice(namespace, "web-1", "web", [p.host for p in pods[2:]], first.port)
    wait_until(lambda: len(proxy.route(host, "/")["endpoints"]) == 2, what="two endpoints in /debug/routes")
    hits = proxy.backends_hit(host, 20)
    assert set(hits) == {"pod-2", "pod-3"}, hits


def test_endpoints_of_several_slices_are_merged(kube, namespace, echo, twingress):
    """A Service's endpoints are the union of all its EndpointSlices; deleting one slice drops its endpoints."""
    proxy = twingress()
    a = echo("pod-a")
    b = echo("pod-b", port=a.port)
    host = host_for(namespace, "multi")
    kube.create_service(namespace, "web", target_port=a.port)
    kube.put_endpoint_slice(namespace, "web-1", "web", [a.host], a.port)
    kube.put_endpoint_slice(namespace, "web-2", "web", [b.host], b.port)
    kube.create_ingress(namespace, "web", host, "web")
    wait_until(lambda: len(proxy.route(host, "/")["endpoints"]) == 2, what="both slices' endpoints")
    assert set(proxy.backends_hit(host, 10)) == {"pod-a", "pod-b"}

    kube.delete_endpoint_slice(namespace, "web-2")
    wait_until(lambda: proxy.route(host, "/")["endpoints"] == [f"{a.host}:{a.port}"], what="web-2 endpoints gone")
    assert proxy.backends_hit(host, 10) == {"pod-a": 10}


def test_not_ready_endpoint_gets_no_traffic(kube, namespace, echo, twingress):
    proxy = twingress()
    a = echo("pod-a")
    b = echo("pod-b", port=a.port)
    host = host_for(namespace, "ready")
    kube.create_service(namespace, "web", target_port=a.port)
    kube.put_endpoint_slice(namespace, "web-1", "web", [a.host, (b.host, False)], a.port)
    kube.create_ingress(namespace, "web", host, "web")
    wait_until(lambda: proxy.route(host, "/")["endpoints"] == [f"{a.host}:{a.port}"], what="only pod-a in /debug/routes")
    assert proxy.backends_hit(host, 20) == {"pod-a": 20}

    # b becomes ready: it gets traffic; a becomes not ready: it gets none.
    kube.put_endpoint_slice(namespace, "web-1", "web", [a.host, b.host], a.port)
    wait_until(lambda: len(proxy.route(host, "/")["endpoints"]) == 2, what="both endpoints ready")
    assert set(proxy.backends_hit(host, 20)) == {"pod-a", "pod-b"}

    kube.put_endpoint_slice(namespace, "web-1", "web", [(a.host, False), b.host], a.port)
    wait_until(lambda: proxy.route(host, "/")["endpoints"] == [f"{b.host}:{b.port}"], what="only pod-b in /debug/routes")
    assert proxy.backends_hit(host, 20) == {"pod-b": 20}

    # None ready: the route stays and answers 503.
    kube.put_endpoint_slice(namespace, "web-1", "web", [(a.host, False), (b.host, False)], a.port)
    proxy.wait_status(host, 503)
    assert proxy.route(host, "/")["endpoints"] == []


def test_deleted_service_answers_503_and_recreated_service_routes_again(kube, namespace, echo, twingress):
    proxy = twingress()
    pod = echo("pod-a")
    host = host_for(namespace, "svc")
    kube.backend(namespace, "web", [pod])
    kube.create_ingress(namespace, "web", host, "web")
    proxy.wait_status(host, 200, backend="pod-a")

    kube.delete_service(namespace, "web")
    proxy.wait_status(host, 503)
    route = proxy.route(host, "/")
    assert route is not None and route["endpoints"] == [], route
    problems = proxy.routes()["problems"]
    assert any(p["reason"] == "ServiceNotFound" and namespace in p["object"] for p in problems), problems

    kube.create_service(namespace, "web", target_port=pod.port)  # the EndpointSlice is still there
    proxy.wait_status(host, 200, backend="pod-a")


def test_backend_port_by_name(kube, namespace, echo, twingress):
    """An Ingress backend can name the Service port; the EndpointSlice port of that name is used."""
    proxy = twingress()
    pod = echo("pod-a")
    host = host_for(namespace, "named")
    kube.create_service(namespace, "web", port=8080, port_name="web", target_port=pod.port)
    kube.put_endpoint_slice(namespace, "web-1", "web", [pod.host], pod.port, port_name="web")
    body = kube.ingress_body(namespace, "web", host, "web")
    body["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] = {"name": "web"}
    kube.networking.create_namespaced_ingress(namespace, body)
    proxy.wait_status(host, 200, backend="pod-a")


def test_ingress_of_another_class_is_ignored(kube, namespace, echo, twingress, ingress_classes):
    other_class = f"other-{namespace[-6:]}"
    ingress_classes(other_class, controller="example.com/other-controller")
    proxy = twingress()
    pod = echo("pod-a")
    theirs, ours = host_for(namespace, "theirs"), host_for(namespace, "ours")
    kube.backend(namespace, "web", [pod])

    kube.create_ingress(namespace, "theirs", theirs, "web", class_name=other_class)
    kube.create_ingress(namespace, "ours", ours, "web")  # after theirs: once it routes, theirs was seen
    proxy.wait_status(ours, 200, backend="pod-a")
    assert proxy.get(theirs).status == 404
    assert not proxy.has_host(theirs)
    assert not any(theirs in str(p) for p in proxy.routes()["problems"])  # other controllers' objects are not problems

    # Its class changes to ours: now it is served.
    kube.replace_ingress(namespace, "theirs", theirs, "web", class_name="twingress")
    proxy.wait_status(theirs, 200, backend="pod-a")

    # An IngressClass that exists decides by its controller, whatever its name.
    kube.replace_ingress(namespace, "theirs", theirs, "web", class_name=other_class)
    proxy.wait_status(theirs, 404)


def test_classless_ingress_is_served_only_when_our_class_is_default(kube, namespace, echo, twingress, ingress_classes):
    ingress_classes("twingress", controller=CONTROLLER, default=False)
    proxy = twingress()
    pod = echo("pod-a")
    classless, marker = host_for(namespace, "classless"), host_for(namespace, "marker")
    kube.backend(namespace, "web", [pod])

    kube.create_ingress(namespace, "classless", classless, "web", class_name=None)
    # No default class at creation, so the DefaultIngressClass admission plugin left it class-less.
    assert "ingressClassName" not in kube.read_ingress(namespace, "classless")["spec"]
    kube.create_ingress(namespace, "marker", marker, "web")
    proxy.wait_status(marker, 200, backend="pod-a")
    assert proxy.get(classless).status == 404
    assert not proxy.has_host(classless)

    kube.set_default_class("twingress", True)
    proxy.wait_status(classless, 200, backend="pod-a")

    kube.set_default_class("twingress", False)
    proxy.wait_status(classless, 404)
    assert proxy.get(marker).status == 200  # ours by name, default or not

    # A default class of another controller does not make class-less Ingresses ours.
    other_class = f"other-{namespace[-6:]}"
    ingress_classes(other_class, controller="example.com/other-controller", default=True)
    kube.replace_ingress(namespace, "marker", marker, "web", path="/marker2")  # a change to wait for
    proxy.wait_status(marker, 200, "/marker2", backend="pod-a")
    assert proxy.get(classless).status == 404

    # Our class becomes default again, then is deleted: class-less Ingresses go with it.
    kube.set_default_class("twingress", True)
    proxy.wait_status(classless, 200, backend="pod-a")
    kube.delete_ingress_class("twingress")
    proxy.wait_status(classless, 404)
    assert proxy.get(marker, "/marker2").status == 200  # our class name alone, when no class of that name exists


def test_watch_namespace_limits_what_is_seen(kube, namespace, echo, twingress):
    other = f"{namespace[:50]}-other"
    kube.create_namespace(other)
    try:
        pod = echo("pod-a")
        seen, unseen = host_for(namespace, "seen"), host_for(other, "unseen")
        for ns, host in ((other, unseen), (namespace, seen)):
            kube.backend(ns, "web", [pod])
            kube.create_ingress(ns, "web", host, "web")

        proxy = twingress("--watch-namespace", namespace)
        proxy.wait_status(seen, 200, backend="pod-a")
        assert proxy.get(unseen).status == 404
        assert not proxy.has_host(unseen)

        # Live changes too: the other namespace first, then ours; once ours shows, theirs would have.
        unseen2, seen2 = host_for(other, "unseen2"), host_for(namespace, "seen2")
        kube.create_ingress(other, "web2", unseen2, "web")
        kube.create_ingress(namespace, "web2", seen2, "web")
        proxy.wait_status(seen2, 200, backend="pod-a")
        assert proxy.get(unseen2).status == 404
        hosts = set(proxy.routes()["hosts"])
        assert {h for h in hosts if h.endswith(".test")} == {seen, seen2}, hosts

        # An unwatched proxy sees both, so the objects in the other namespace were routable.
        everything = twingress()
        everything.wait_status(unseen, 200, backend="pod-a")
        everything.wait_status(unseen2, 200, backend="pod-a")
    finally:
        kube.delete_namespace(other)


def test_burst_of_changes_converges(kube, namespace, echo, twingress):
    """Many writes in a row end in a table with all of them (whatever the builds coalesced)."""
    proxy = twingress()
    pod = echo("pod-a")
    kube.backend(namespace, "web", [pod])
    hosts = [host_for(namespace, f"burst-{i}") for i in range(30)]
    generation = proxy.generation()
    for i, host in enumerate(hosts):
        kube.create_ingress(namespace, f"burst-{i}", host, "web")
    wait_until(lambda: set(hosts) <= set(proxy.routes()["hosts"]), what="all 30 hosts in /debug/routes")
    assert proxy.generation() > generation
    for host in hosts[::7]:
        response = proxy.get(host)
        assert response.status == 200 and response.backend == "pod-a", (host, response)
    for i in range(0, 30, 2):
        kube.delete_ingress(namespace, f"burst-{i}")
    wait_until(lambda: set(proxy.routes()["hosts"]) & set(hosts) == set(hosts[1::2]), what="even hosts removed")
    assert proxy.get(hosts[0]).status == 404
    assert proxy.get(hosts[1]).status == 200
    assert proxy.metric("twingress_table_generation") >= generation
