"""
The ingress-nginx Helm chart's IngressClass against the real apiserver: its Ingresses are skipped, and
twingress says how many and why (log, /debug/routes, metric); both ways of docs/migration.md
take them over: the same controller name (--controller-name k8s.io/ingress-nginx), or pointing the
Ingress at twingress's class while ingress-nginx keeps its own.

Spec: networking.k8s.io/v1 IngressClass ("spec.controller: the name of the controller that should
handle this class") and ingress-nginx's chart (charts/ingress-nginx/templates/controller-ingressclass.yaml:
controller k8s.io/ingress-nginx).
"""

from __future__ import annotations

import pytest

from tests.kube.twingress import host_for, wait_until

pytestmark = pytest.mark.kube

NGINX_CONTROLLER = "k8s.io/ingress-nginx"


def test_the_charts_class_is_skipped_with_why_and_taken_over_either_way(kube, namespace, echo, twingress, ingress_classes):
    nginx_class = f"nginx-{namespace}"[:63]
    ingress_classes(nginx_class, NGINX_CONTROLLER)
    pod = echo("pod-a")
    kube.backend(namespace, "web", [pod])
    chart_host, own_host = host_for(namespace, "chart"), host_for(namespace, "own")
    kube.create_ingress(namespace, "chart", chart_host, "web", class_name=nginx_class)
    kube.create_ingress(namespace, "own", own_host, "web")
    proxy = twingress("--watch-namespace", namespace)
    proxy.wait_status(own_host, 200)

    why = f"IngressClass {nginx_class} is claimed by controller {NGINX_CONTROLLER}; twingress is twingress.io/ingress-controller (--controller-name)"
    skipped = wait_until(lambda: proxy.routes()["skippedIngresses"] if proxy.routes()["skippedIngresses"]["count"] == 1 else None, what="the skipped Ingress counted")
    assert skipped["reasons"] == [{"reason": "ClassOfAnotherController", "message": why, "ingresses": 1, "names": [f"{namespace}/chart"]}]
    assert proxy.get(chart_host).status == 404
    assert proxy.metric("twingress_ingresses_skipped", reason="ClassOfAnotherController") == 1
    wait_until(lambda: f"1 Ingresses skipped, not served by twingress: 1: {why}" in proxy.log(), what="the skipped Ingresses in the log")

    # Way 1: the same controller name; this instance serves the chart's class (and now skips twingress's own).
    same_name = twingress("--watch-namespace", namespace, "--controller-name", NGINX_CONTROLLER, "--ingress-class", nginx_class, "--update-status", "false")
    same_name.wait_status(chart_host, 200, backend="pod-a")

    # Way 2: the Ingress moves to twingress's class (ingress-nginx, if still running, lets go of it).
    kube.replace_ingress(namespace, "chart", chart_host, "web")
    proxy.wait_status(chart_host, 200, backend="pod-a")
    wait_until(lambda: proxy.routes()["skippedIngresses"]["count"] == 0, what="no skipped Ingress any more")
    assert proxy.metric("twingress_ingresses_skipped", reason="ClassOfAnotherController") == 0
    wait_until(lambda: "no Ingress is skipped for its class any more" in proxy.log(), what="the change in the log")
