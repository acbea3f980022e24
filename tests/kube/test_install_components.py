"""
k8s/components/ and the overlay that uses them, applied as an operator applies them:
C{kubectl apply --server-side -k DIR} (testenv's kubectl, strict field validation) to the real
apiserver, then read back from it (issue 61 point 10).

- metrics: C{--metrics} (a /metrics-only listener) appended to the DaemonSet's args on the node's IP
  and port 10254 (hostNetwork), and a headless Service with the prometheus.io/ scrape annotations
  whose selector is the DaemonSet's pod labels and whose target port is that one, by number (the
  pod declares no ports).
- servicemonitor: the Prometheus Operator's ServiceMonitor, selecting that Service and its port by
  name. The operator's CRD cannot be fetched here (no registry, no GitHub), so a minimal CRD with
  the operator's types for the fields the component uses (tests/data/servicemonitor-crd.yaml) is
  installed first, and kubectl's strict validation refuses any field it does not declare.
- acme: RBAC only (Secrets cluster-wide, the HTTP-01 tokens' ConfigMap and the delete of the TLS-ALPN-01
  challenge Secret in twingress's namespace), checked by
  SubjectAccessReviews before and after it is applied.
- nginx-configmap: the ingress-nginx controller ConfigMap in the twingress namespace and
  C{--nginx-configmap} appended to the DaemonSet's args; twingress, run as the ServiceAccount with
  those args, enforces the ConfigMap's C{proxy-body-size}.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.kube import install_support as install
from tests.kube import kustomize
from tests.kube.api import Kube, gone
from tests.kube.twingress import KubeTwingress, host_for, wait_until
from tests.support import ROOT

COMPONENTS = ROOT / "k8s" / "components"
MONITORED = ROOT / "k8s" / "overlays" / "monitored"
CRD = ROOT / "tests" / "data" / "servicemonitor-crd.yaml"
CRD_NAME = "servicemonitors.monitoring.coreos.com"


def kubectl(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run([str(kustomize.kubectl()), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def overlay(tmp_path: Path, *components: str) -> Path:
    """An operator's overlay: the base plus C{components}, by relative paths as kustomize wants them."""
    directory = tmp_path / ("overlay-" + "-".join(components))
    directory.mkdir()
    relative = os.path.relpath(ROOT / "k8s", directory)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{relative}/base"],
        "components": [f"{relative}/components/{name}" for name in components],
    }))
    return directory


@pytest.fixture(scope="module")
def applied(kube_cluster) -> Iterator[client.ApiClient]:
    """The ServiceMonitor CRD stand-in, then k8s/overlays/monitored/ applied with kubectl; removed afterwards."""
    kubeconfig = kube_cluster.kubeconfig
    api = config.new_client_from_config(config_file=str(kubeconfig))
    wait_until(lambda: not terminating(api), timeout=120, what="the twingress namespace of an earlier module gone")  # test_install.py's uninstall does not wait
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(CRD))
    kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    kubectl(kubeconfig, "apply", "--server-side", "--field-manager", install.FIELD_MANAGER, "-k", str(MONITORED))
    yield api
    install.uninstall(api)
    gone(lambda: client.ApiextensionsV1Api(api).delete_custom_resource_definition(CRD_NAME))
    wait_until(lambda: gone(lambda: client.CoreV1Api(api).read_namespace(install.NAMESPACE)), timeout=120, what="the twingress namespace gone")
    api.close()


def terminating(api: client.ApiClient) -> bool:
    """The twingress namespace is being deleted (objects cannot be created in it until it is gone)."""
    try:
        return client.CoreV1Api(api).read_namespace(install.NAMESPACE).status.phase == "Terminating"
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise


def test_every_component_renders_on_the_base_with_kubectl(tmp_path: Path) -> None:
    """Each k8s/components/NAME, alone on the base, renders with kubectl's kustomize; the base's objects stay."""
    names = sorted(path.name for path in COMPONENTS.iterdir() if (path / "kustomization.yaml").exists())
    assert names == ["acme", "metrics", "nginx-configmap", "servicemonitor", "take-over-ingress-nginx"]
    base = {(o["kind"], o["metadata"]["name"]) for o in install.rendered()}
    for name in names:
        objects = kustomize.render(overlay(tmp_path, name))
        assert base <= {(o["kind"], o["metadata"]["name"]) for o in objects}, name
        # the take-over's Role and RoleBinding are in ingress-nginx's namespace: its ConfigMap is read there
        elsewhere = ("ingress-nginx",) if name == "take-over-ingress-nginx" else ()
        assert all(o["metadata"].get("namespace") in (None, install.NAMESPACE, *elsewhere) for o in objects), name


def test_the_take_over_component_adds_the_flag_and_a_role_in_ingress_nginx_s_namespace(tmp_path: Path) -> None:
    """k8s/components/take-over-ingress-nginx: the one-line switch on the DaemonSet, and reading ConfigMaps where ingress-nginx keeps its own."""
    objects = kustomize.render(overlay(tmp_path, "take-over-ingress-nginx"))
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    assert "--take-over-ingress-nginx=true" in daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == "ingress-nginx"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}]
    (binding,) = [o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == "ingress-nginx"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "twingress", "namespace": install.NAMESPACE}]


ACME_SECRETS = [install.Permission("ClusterRole", "", "secrets", verb) for verb in ("get", "create", "update")]
ACME_TOKENS = [
    install.Permission("Role", "", "configmaps", "update", "twingress-acme-challenges"), install.Permission("Role", "", "configmaps", "create"),
    install.Permission("Role", "", "secrets", "delete", "twingress-acme-tls-alpn"),  # the TLS-ALPN-01 challenge certificates, when the order ends
    install.Permission("Role", "", "secrets", "patch"),  # the account Secret's kept order URL and backoff (acmesecrets.keep_order_url, keep_backoff)
]


def test_the_acme_component_adds_only_rbac(tmp_path: Path) -> None:
    """k8s/components/acme: Secrets cluster-wide and the tokens' ConfigMap in twingress's namespace; the DaemonSet as the base has it."""
    base = {(o["kind"], o["metadata"]["name"]): o for o in install.rendered()}
    objects = {(o["kind"], o["metadata"]["name"]): o for o in kustomize.render(overlay(tmp_path, "acme"))}
    assert sorted(set(objects) - set(base)) == [("ClusterRole", "twingress-acme"), ("ClusterRoleBinding", "twingress-acme"), ("Role", "twingress-acme"), ("RoleBinding", "twingress-acme")]
    assert objects[("DaemonSet", "twingress")] == base[("DaemonSet", "twingress")]
    assert objects[("ClusterRole", "twingress-acme")]["rules"][0] == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "create", "update"]}


def test_the_acme_component_lets_the_service_account_write_certificates_and_tokens(applied: client.ApiClient, namespace: str, tmp_path: Path) -> None:
    """
    Applied: before it the ServiceAccount may not create or update a Secret in an application's namespace, nor write the
    tokens' ConfigMap, nor delete the TLS-ALPN-01 challenge Secret; after it, it may, and still no other ConfigMap of
    twingress's namespace, nor delete any other Secret there.
    """
    objects = [o for o in kustomize.render(overlay(tmp_path, "acme")) if o["metadata"]["name"] == "twingress-acme"]
    wanted = [(p, namespace) for p in ACME_SECRETS] + [(p, install.NAMESPACE) for p in ACME_TOKENS]
    other_map = install.Permission("Role", "", "configmaps", "update", "someone-elses")
    other_secret = install.Permission("Role", "", "secrets", "delete", "twingress-handover")
    assert not any(install.allowed(applied, p, scope) for p, scope in wanted)
    rbac = client.RbacAuthorizationV1Api(applied)
    try:
        install.install(applied, objects)
        wait_until(lambda: all(install.allowed(applied, p, scope) for p, scope in wanted), 30, "the component's roles in effect")
        assert not install.allowed(applied, other_map, install.NAMESPACE)
        assert not install.allowed(applied, other_secret, install.NAMESPACE)
    finally:
        gone(lambda: rbac.delete_cluster_role("twingress-acme"))
        gone(lambda: rbac.delete_cluster_role_binding("twingress-acme"))
        gone(lambda: rbac.delete_namespaced_role("twingress-acme", install.NAMESPACE))
        gone(lambda: rbac.delete_namespaced_role_binding("twingress-acme", install.NAMESPACE))


def test_the_metrics_service_selects_the_pods_metrics_port(applied: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(applied), client.AppsV1Api(applied)
    service = core.read_namespaced_service("twingress-metrics", install.NAMESPACE)
    annotations = service.metadata.annotations
    assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == ("true", "10254", "/metrics")
    assert service.spec.cluster_ip == "None"
    pod = apps.read_namespaced_daemon_set("twingress", install.NAMESPACE).spec.template
    assert service.spec.selector.items() <= pod.metadata.labels.items()
    (container,) = pod.spec.containers
    (port,) = service.spec.ports
    assert (port.name, port.target_port, port.port) == ("metrics", 10254, 10254) and container.ports is None
    assert "--metrics=tcp:10254:interface=$(HOST_IP)" in container.args  # scraped at the node's IP: hostNetwork
    assert "--admin=unix:/run/twingress/admin.sock" in container.args  # the admin listener stays off the network


def test_the_servicemonitor_scrapes_the_metrics_service(applied: client.ApiClient) -> None:
    custom, core = client.CustomObjectsApi(applied), client.CoreV1Api(applied)
    monitor = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", install.NAMESPACE, "servicemonitors", "twingress")
    service = core.read_namespaced_service("twingress-metrics", install.NAMESPACE)
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service.metadata.labels.items()
    assert spec["namespaceSelector"]["matchNames"] == [install.NAMESPACE]
    assert [(e["port"], e["path"]) for e in spec["endpoints"]] == [(p.name, "/metrics") for p in service.spec.ports]


def test_a_field_the_crd_does_not_know_is_refused(applied: client.ApiClient, kube_cluster, tmp_path: Path) -> None:
    """The CRD stand-in is strict, so the tests above would catch a misspelt field in the component."""
    wrong = yaml.safe_load((COMPONENTS / "servicemonitor" / "servicemonitor.yaml").read_text())
    wrong["spec"]["endpoints"][0]["intervall"] = "30s"
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(wrong))
    done = subprocess.run(
        [str(kustomize.kubectl()), "--kubeconfig", str(kube_cluster.kubeconfig), "apply", "--server-side", "--dry-run=server", "-f", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "intervall" in done.stderr, done


def test_the_nginx_configmap_component_is_read_by_twingress_as_deployed(applied: client.ApiClient, kube_cluster, kube: Kube, namespace: str, echo, monkeypatch, tmp_path: Path) -> None:
    """twingress as the ServiceAccount, with the DaemonSet's --nginx-configmap: the ConfigMap's proxy-body-size (8m) is every route's limit."""
    apps = client.AppsV1Api(applied)
    (container,) = apps.read_namespaced_daemon_set("twingress", install.NAMESPACE).spec.template.spec.containers
    (option,) = [arg for arg in container.args if arg.startswith("--nginx-configmap=")]
    assert option == "--nginx-configmap=twingress/ingress-nginx-controller"
    data = client.CoreV1Api(applied).read_namespaced_config_map("ingress-nginx-controller", install.NAMESPACE).data
    assert data["proxy-body-size"] == "8m"
    install.wait_permissions(applied, install.permissions(install.rendered()))
    kubeconfig = install.service_account_kubeconfig(applied, kube_cluster.kubeconfig, tmp_path / "kubeconfig")
    monkeypatch.setenv("POD_NAMESPACE", install.NAMESPACE)
    monkeypatch.setenv("POD_NAME", f"twingress-{uuid.uuid4().hex[:5]}")
    host = host_for(namespace, "web")
    kube.backend(namespace, "web", [echo("web-1")])
    kube.create_ingress(namespace, "web", host, "web")
    proxy = KubeTwingress(kubeconfig, "--watch-namespace", namespace, "--leader-election-id", f"lease-{namespace}"[:63], option, log_path=tmp_path / "twingress.log")
    try:
        proxy.wait_status(host, 200, backend="web-1")
        assert declared_body_status(proxy.http_port, host, 8 * 1024 * 1024 + 1) == 413, proxy.log()  # twingress alone takes 1 GiB
        assert declared_body_status(proxy.http_port, host, 2 * 1024 * 1024, send=True) == 200  # ingress-nginx's default without the key: 1m
    finally:
        proxy.stop()


def declared_body_status(port: int, host: str, length: int, send: bool = False) -> int:
    """The status of a POST that declares C{length} body bytes (sending them only when C{send})."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        head = f"POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n".encode()
        connection.sendall(head + (b"x" * length if send else b""))
        return int(connection.recv(1024).split(b" ", 2)[1])


TAKE_OVER_NAMESPACE = "ingress-nginx"


def active_namespace(core: client.CoreV1Api, name: str) -> bool:
    """The namespace exists and is not being deleted (an earlier test's may be terminating); whether this made it."""
    def settled() -> bool:
        return gone(lambda: core.read_namespace(name)) or core.read_namespace(name).status.phase != "Terminating"

    wait_until(settled, timeout=120, what=f"namespace {name} not terminating")
    if not gone(lambda: core.read_namespace(name)):
        return False
    core.create_namespace({"metadata": {"name": name}})
    return True


def test_the_take_over_component_lets_twingress_read_ingress_nginx_s_configmap(
    applied: client.ApiClient, kube_cluster, kube: Kube, namespace: str, echo, ingress_classes, monkeypatch, tmp_path: Path,
) -> None:
    """
    k8s/components/take-over-ingress-nginx's Role and RoleBinding, applied: before them the ServiceAccount
    may not list ConfigMaps in ingress-nginx's namespace, after them it may, and twingress as the
    ServiceAccount with --take-over-ingress-nginx=true serves class nginx with ingress-nginx's ConfigMap
    (proxy-body-size 8m: a larger body is refused).
    """
    core = client.CoreV1Api(applied)
    made = active_namespace(core, TAKE_OVER_NAMESPACE)
    objects = [o for o in kustomize.render(overlay(tmp_path, "take-over-ingress-nginx")) if o["metadata"].get("namespace") == TAKE_OVER_NAMESPACE]
    assert sorted(o["kind"] for o in objects) == ["Role", "RoleBinding"]
    rbac = client.RbacAuthorizationV1Api(applied)
    reading = [install.Permission("Role", "", "configmaps", verb) for verb in ("list", "watch")]
    assert not any(install.allowed(applied, p, TAKE_OVER_NAMESPACE) for p in reading)
    try:
        install.install(applied, objects)
        wait_until(lambda: all(install.allowed(applied, p, TAKE_OVER_NAMESPACE) for p in reading), 30, "the component's Role in effect")
        core.create_namespaced_config_map(TAKE_OVER_NAMESPACE, {"metadata": {"name": "ingress-nginx-controller"}, "data": {"proxy-body-size": "8m"}})
        ingress_classes("nginx", "k8s.io/ingress-nginx")
        host = host_for(namespace, "web")
        kube.backend(namespace, "web", [echo("web-1")])
        kube.create_ingress(namespace, "web", host, "web", class_name="nginx")
        install.wait_permissions(applied, install.permissions(install.rendered()))
        kubeconfig = install.service_account_kubeconfig(applied, kube_cluster.kubeconfig, tmp_path / "kubeconfig")
        monkeypatch.setenv("POD_NAMESPACE", install.NAMESPACE)
        monkeypatch.setenv("POD_NAME", f"twingress-{uuid.uuid4().hex[:5]}")
        proxy = KubeTwingress(kubeconfig, "--watch-namespace", namespace, "--leader-election-id", f"lease-{namespace}"[:63],
                              "--take-over-ingress-nginx=true", log_path=tmp_path / "twingress.log")
        try:
            proxy.wait_status(host, 200, backend="web-1")
            wait_until(lambda: declared_body_status(proxy.http_port, host, 8 * 1024 * 1024 + 1) == 413, 30, "ingress-nginx's proxy-body-size in force")
        finally:
            proxy.stop()
    finally:
        for obj in objects:
            kind = obj["kind"]
            gone(lambda k=kind: (rbac.delete_namespaced_role if k == "Role" else rbac.delete_namespaced_role_binding)("twingress-take-over", TAKE_OVER_NAMESPACE))
        gone(lambda: core.delete_namespaced_config_map("ingress-nginx-controller", TAKE_OVER_NAMESPACE))
        if made:
            gone(lambda: core.delete_namespace(TAKE_OVER_NAMESPACE))
