"""
--nginx-configmap against the real apiserver: the ingress-nginx ConfigMap and the header-field
ConfigMaps it names are read from its namespace, and edits to either apply live
(docs/user-guide/nginx-configuration/configmap.md, "add-headers", "proxy-body-size").
"""

from __future__ import annotations

import pytest

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
