"""
C{helm template} of charts/twingress against C{kubectl kustomize} of k8s/ (testenv's kubectl):
where the two should render the same thing they must, so that a change to one that the other
lacks fails here. Release C{twingress} in namespace C{twingress}, which gives k8s/'s names.

What may differ, and why:
- k8s/'s Namespace: Helm installs into C{--namespace} (C{--create-namespace}) and renders none.
- Labels: the chart adds Helm's (C{app.kubernetes.io/instance}, C{managed-by}, C{version},
  C{helm.sh/chart}); the selector and the pod labels carry C{app.kubernetes.io/instance} too, so
  that two releases' pods stay apart, and the args say so with C{--status-pod-selector}.
- C{revisionHistoryLimit}: the chart writes the API's default (10) out.
- The nginx ConfigMap's name: C{<fullname>-nginx} (the chart's, one per release) where
  components/nginx-configmap names ingress-nginx's C{ingress-nginx-controller}.
- With the take-over preset, the IngressClass: the chart renders none (ingress-nginx's release
  owns class nginx), where components/take-over-ingress-nginx keeps the base's.
- Comments (YAML comments are not objects).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from tests.chart import helm
from tests.kube import kustomize
from tests.support import ROOT, unavailable

K8S = ROOT / "k8s"
HELM_ONLY_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart")
POD_SELECTOR_ARG = "--status-pod-selector=app.kubernetes.io/name=twingress,app.kubernetes.io/instance=twingress"


def _kustomize(directory: str) -> list[dict[str, Any]]:
    """C{kubectl kustomize k8s/DIRECTORY}."""
    return _kustomize_path(K8S / directory)


def _kustomize_path(path: Path) -> list[dict[str, Any]]:
    """C{kubectl kustomize PATH} (skip, or fail under TWINGRESS_REQUIRE_KUBE=1, without kubectl)."""
    try:
        return kustomize.render(path)
    except kustomize.KustomizeError as error:
        if "does not exist" in str(error):
            unavailable(str(error))
        raise


def _without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with Helm's labels taken off its metadata, its selector and its pod template."""
    obj = copy.deepcopy(obj)
    places = [obj["metadata"].get("labels")]
    spec = obj.get("spec", {})
    if "template" in spec:
        places += [spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"]]
    if isinstance(spec.get("selector"), dict) and "matchLabels" not in spec["selector"] and "template" not in spec:
        places.append(spec["selector"])  # a Service's selector
    if isinstance(spec.get("selector"), dict) and "matchLabels" in spec["selector"] and "template" not in spec:
        places.append(spec["selector"]["matchLabels"])  # a ServiceMonitor's
    for labels in places:
        for label in HELM_ONLY_LABELS:
            (labels or {}).pop(label, None)
    spec.pop("revisionHistoryLimit", None)
    return obj


def _pod_args(daemonset: dict[str, Any]) -> list[str]:
    return list(daemonset["spec"]["template"]["spec"]["containers"][0]["args"])


def _chart_daemonset(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The chart's DaemonSet, its Helm labels and its --status-pod-selector taken off (both named above)."""
    daemonset = _without_helm_labels(helm.find(objects, "DaemonSet", "twingress"))
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    assert POD_SELECTOR_ARG in args
    args.remove(POD_SELECTOR_ARG)
    return daemonset


def _kinds_and_names(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", "")) for o in objects}


def test_the_same_objects_but_the_namespace() -> None:
    """The chart renders every object k8s/ does, by kind, name and namespace, and nothing else, but the Namespace."""
    chart = helm.template()
    base = [o for o in _kustomize(".") if o["kind"] != "Namespace"]
    assert _kinds_and_names(chart) == _kinds_and_names(base)


def test_daemonset_the_same() -> None:
    """The DaemonSet: pod spec (args, probes, security, volumes, grace), update strategy and selector."""
    chart = _chart_daemonset(helm.template())
    base = kustomize.find(_kustomize("."), "DaemonSet", "twingress")
    assert chart["spec"]["template"]["spec"] == base["spec"]["template"]["spec"]
    assert chart["spec"] == base["spec"]
    assert chart["metadata"] == base["metadata"]


@pytest.mark.parametrize(("kind", "name"), [("ClusterRole", "twingress"), ("Role", "twingress")])
def test_rbac_rules_the_same(kind: str, name: str) -> None:
    """The ClusterRole's and the Role's rules, rule by rule."""
    chart = helm.find(helm.template(), kind, name)
    base = kustomize.find(_kustomize("."), kind, name)
    assert chart["rules"] == base["rules"]


@pytest.mark.parametrize(("kind", "name"), [("ClusterRoleBinding", "twingress"), ("RoleBinding", "twingress")])
def test_bindings_the_same(kind: str, name: str) -> None:
    """The bindings: the same role, the same ServiceAccount."""
    chart = helm.find(helm.template(), kind, name)
    base = kustomize.find(_kustomize("."), kind, name)
    assert (chart["roleRef"], chart["subjects"]) == (base["roleRef"], base["subjects"])


@pytest.mark.parametrize(("kind", "name"), [("IngressClass", "twingress"), ("ServiceAccount", "twingress")])
def test_other_objects_the_same(kind: str, name: str) -> None:
    """The IngressClass and the ServiceAccount, whole but Helm's labels."""
    chart = _without_helm_labels(helm.find(helm.template(), kind, name))
    base = kustomize.find(_kustomize("."), kind, name)
    assert chart == base


def test_crd_the_same() -> None:
    """The StreamIngress CRD in crds/ is k8s/'s, whole."""
    name = "streamingresses.twingress.io"
    chart = helm.find(helm.template(), "CustomResourceDefinition", name)
    base = kustomize.find(_kustomize("."), "CustomResourceDefinition", name)
    assert chart == base


def test_monitored_overlay_the_same() -> None:
    """k8s/overlays/monitored (metrics, servicemonitor, nginx-configmap) against the values that ask for the same."""
    config = kustomize.find(_kustomize("overlays/monitored"), "ConfigMap", "ingress-nginx-controller")
    sets = ["controller.metrics.enabled=true", "controller.metrics.serviceMonitor.enabled=true"]
    sets += [f"controller.config.{key}={value}" for key, value in config["data"].items()]
    chart = helm.template(sets=sets)
    base = _kustomize("overlays/monitored")
    daemonset = _chart_daemonset(chart)
    renamed = [arg.replace("twingress/twingress-nginx", "twingress/ingress-nginx-controller") for arg in _pod_args(daemonset)]
    assert renamed == _pod_args(kustomize.find(base, "DaemonSet", "twingress"))
    chart_config = helm.find(chart, "ConfigMap", "twingress-nginx")
    assert chart_config["data"] == config["data"]
    for kind, name in [("Service", "twingress-metrics"), ("ServiceMonitor", "twingress")]:
        assert _without_helm_labels(helm.find(chart, kind, name)) == kustomize.find(base, kind, name)


def test_edge_overlay_the_same() -> None:
    """k8s/overlays/edge against controller.twingress.edgeNodes: the same placement, the same pod otherwise."""
    chart = _chart_daemonset(helm.template(sets=["controller.twingress.edgeNodes=true"]))
    base = kustomize.find(_kustomize("overlays/edge"), "DaemonSet", "twingress")
    assert chart["spec"]["template"]["spec"] == base["spec"]["template"]["spec"]


def test_take_over_component_the_same(tmp_path: Path) -> None:
    """k8s/components/take-over-ingress-nginx on the base against controller.twingress.takeOverIngressNginx: the same
    pod, Role and RoleBinding in ingress-nginx's namespace. The chart then renders no IngressClass (the class served is
    ingress-nginx's nginx, owned by its release), where the component leaves the base's twingress class in place."""
    relative = os.path.relpath(K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{relative}/base]\ncomponents: [{relative}/components/take-over-ingress-nginx]\n"
    )
    base = _kustomize_path(tmp_path)
    chart = helm.template(sets=["controller.twingress.takeOverIngressNginx=true"])
    assert _pod_args(_chart_daemonset(chart)) == _pod_args(kustomize.find(base, "DaemonSet", "twingress"))
    for kind in ["Role", "RoleBinding"]:
        assert _without_helm_labels(helm.find(chart, kind, "twingress-take-over")) == kustomize.find(base, kind, "twingress-take-over")
    assert _kinds_and_names(chart) == _kinds_and_names(base) - {("Namespace", "twingress", ""), ("IngressClass", "twingress", "")}


def test_acme_component_the_same(tmp_path: Path) -> None:
    """k8s/components/acme on the base against controller.twingress.acmeRBAC: the same four RBAC objects, the pod unchanged."""
    relative = os.path.relpath(K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{relative}/base]\ncomponents: [{relative}/components/acme]\n"
    )
    base = _kustomize_path(tmp_path)
    chart = helm.template(sets=["controller.twingress.acmeRBAC=true"])
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]:
        assert _without_helm_labels(helm.find(chart, kind, "twingress-acme")) == kustomize.find(base, kind, "twingress-acme")
    assert _chart_daemonset(chart)["spec"]["template"]["spec"] == _chart_daemonset(helm.template())["spec"]["template"]["spec"]
    assert _kinds_and_names(chart) == _kinds_and_names(base) - {("Namespace", "twingress", "")}
