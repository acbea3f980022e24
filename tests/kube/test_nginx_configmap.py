"""
--nginx-configmap against the real apiserver: the ingress-nginx ConfigMap and the header-field
ConfigMaps it names are read from its namespace, and edits to either apply live
(docs/user-guide/nginx-configuration/configmap.md, "add-headers", "proxy-body-size").
"""

from __future__ import annotations

import pytest

from tests.kube.controller_support import start_controller, wait_event
from tests.kube.twingress import host_for, wait_until

pytestmark = pytest.mark.kube


def test_the_configmap_and_the_maps_it_names_apply_live(kube, namespace, echo, twingress):
    core = kube.core
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "ingress-nginx-controller"}, "data": {"add-headers": f"{namespace}/custom-headers"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "custom-headers"}, "data": {"X-Frame-Options": "DENY"}})
    pod = echo("pod-a")
    host = host_for(namespace, "web")
    kube.backend(namespace, "web", [pod])
    kube.create_ingress(namespace, "web", host, "web")
    proxy = twingress("--nginx-configmap", f"{namespace}/ingress-nginx-controller")

    response = proxy.wait_status(host, 200, backend="pod-a")
    assert response.headers["x-frame-options"] == "DENY"

    core.patch_namespaced_config_map("custom-headers", namespace, {"data": {"X-Frame-Options": "SAMEORIGIN"}})
    wait_until(lambda: proxy.get(host).headers.get("x-frame-options") == "SAMEORIGIN", what="the edited header field")

    core.patch_namespaced_config_map("ingress-nginx-controller", namespace, {"data": {"add-headers": None, "enable-brotli": "true"}})
    wait_until(lambda: "x-frame-options" not in proxy.get(host).headers, what="no header field once add-headers is gone")
    problems = {(p["object"], p["reason"]) for p in proxy.routes()["problems"]}
    assert (f"ConfigMap/{namespace}/ingress-nginx-controller", "UnsupportedConfigKey") in problems


def test_a_global_guard_it_cannot_enforce_closes_and_warns_on_the_configmap(kube, namespace, echo, twingress):
    """
    configmap.md "global-auth-url" with a "global-auth-method" ingress-nginx would refuse: every route
    global auth covers answers 503 (never 200 unauthenticated), the reason is in /debug/routes, and the
    Lease holder records a Warning Event on the ConfigMap; fixing the key opens the route's guard as written.
    """
    core = kube.core
    data = {"global-auth-url": "http://127.0.0.1:9/auth", "global-auth-method": "FETCH"}
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "ingress-nginx-controller"}, "data": data})
    pod = echo("pod-a")
    host = host_for(namespace, "web")
    kube.backend(namespace, "web", [pod])
    kube.create_ingress(namespace, "web", host, "web")
    proxy = start_controller(twingress, namespace, "--nginx-configmap", f"{namespace}/ingress-nginx-controller")

    proxy.wait_status(host, 503)
    assert "global-auth-method" in proxy.route(host)["policies"]["deny"]["reason"]  # type: ignore[index]
    event = wait_event(kube, namespace, "ingress-nginx-controller", "UnenforcedGuard")
    assert (event["type"], event["regarding"]["kind"], event["regarding"]["apiVersion"]) == ("Warning", "ConfigMap", "v1")
    assert "global-auth-method" in event["note"] and "503" in event["note"]

    core.patch_namespaced_config_map("ingress-nginx-controller", namespace, {"data": {"global-auth-method": "GET"}})
    proxy.wait_status(host, 500)  # the auth service at 127.0.0.1:9 does not answer: nginx's auth_request says 500
