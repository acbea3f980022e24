"""
Issue 65's differences from ingress-nginx against the real apiserver, as a take-over finds them: the
chart's IngressClass (controller k8s.io/ingress-nginx), an Ingress with a path "/p/" and the controller
ConfigMap.  Sources: kubernetes/ingress-nginx at dbb11b92ddb77bee9c35e462479129354c84f939,
internal/ingress/controller/controller.go (the 301 for a location ending in "/", quoted over
updateServerLocations) and internal/ingress/controller/config/config.go (EnableAuthAccessLog).
"""

from __future__ import annotations

import pytest

from tests.kube.twingress import host_for

pytestmark = pytest.mark.kube

NGINX_CONTROLLER = "k8s.io/ingress-nginx"


def test_a_take_over_redirects_slash_paths_and_auth_access_logging_closes_nothing(kube, namespace, echo, twingress, ingress_classes):
    nginx_class = f"nginx-{namespace}"[:63]
    ingress_classes(nginx_class, NGINX_CONTROLLER)
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "ingress-nginx-controller"}, "data": {"enable-auth-access-log": "true"}})
    pod = echo("pod-a")
    kube.backend(namespace, "web", [pod])
    taken, own = host_for(namespace, "taken"), host_for(namespace, "own")
    kube.create_ingress(namespace, "taken", taken, "web", path="/p/", class_name=nginx_class)
    kube.create_ingress(namespace, "own", own, "web", path="/p/")
    nginx = twingress("--watch-namespace", namespace, "--controller-name", NGINX_CONTROLLER, "--ingress-class", nginx_class,
                      "--update-status", "false", "--nginx-configmap", f"{namespace}/ingress-nginx-controller")
    nginx.wait_status(taken, 200, path="/p/", backend="pod-a")  # served: enable-auth-access-log only changes logging
    answer = nginx.get(taken, "/p")
    assert (answer.status, answer.headers.get("location")) == (301, f"http://{taken}/p/")
    problems = [p["message"] for p in nginx.routes()["problems"] if p["object"] == f"ConfigMap/{namespace}/ingress-nginx-controller"]
    assert len(problems) == 1 and problems[0].startswith("enable-auth-access-log")
    ours = twingress("--watch-namespace", namespace)
    ours.wait_status(own, 200, path="/p", backend="pod-a")  # twingress's class: the Kubernetes Prefix rule
