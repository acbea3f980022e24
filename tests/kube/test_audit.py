"""
C{twingress audit} against the real apiserver, then the proxy on the same objects: ingress-nginx's
own docs/examples (tests/data/ingress-nginx-examples, SOURCE.md names the commit) and
examples/nginx-migration, with a controller ConfigMap that sets every key of ingress-nginx's
ConfigMap page (docs/user-guide/nginx-configuration/configmap.md) to its documented default.
Every annotation and key has a fate, the JSON is valid against docs/audit.schema.json, and the
fates are what C{twistd ingress --take-over-ingress-nginx true} then does, route by route: a
denied route answers its error (counted as closed), a served one is served, a skipped Ingress's
host answers as a host nobody serves.  Then the keys the audit denied are removed, and the two agree again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.audit_corpus import CONTROLLER_CONFIGMAP, corpus, documented_keys, our_annotations
from tests.audit_schema import validate
from tests.kube.controller_support import create_annotated_service, load_balancer, read_ingress, start_controller, wait_ingress, writes
from tests.kube.twingress import wait_until
from tests.support import ROOT

pytestmark = pytest.mark.kube

AUDIT = [str(Path(sys.executable).parent / "twingress"), "audit"]
CLOSED = ("twingress_http_denied_total", {"reason": "closed"})


@pytest.fixture
def placed(kube, echo) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The corpus in namespaces of this test's own (PREFIX-default, PREFIX-ingress-nginx...), every Service with one echo endpoint."""
    prefix = f"audit-{uuid.uuid4().hex[:5]}"
    objects = corpus()
    spaces = sorted({o["metadata"].get("namespace", "default") for o in objects})
    for space in spaces:
        kube.create_namespace(f"{prefix}-{space}")
    backend = echo("corpus")
    try:
        for obj in objects:
            obj["metadata"]["namespace"] = f"{prefix}-{obj['metadata'].get('namespace', 'default')}"
            _create(kube, obj)
            if obj["kind"] == "Service":
                port = obj["spec"]["ports"][0]
                kube.put_endpoint_slice(obj["metadata"]["namespace"], f"{obj['metadata']['name']}-audit", obj["metadata"]["name"], [backend.host], backend.port, port.get("name", ""))
        yield prefix, objects
    finally:
        for space in spaces:
            kube.delete_namespace(f"{prefix}-{space}")


def _create(kube, obj: dict[str, Any]) -> None:
    namespace = obj["metadata"]["namespace"]
    if obj["kind"] == "ConfigMap":  # YAML reads a key 404 as a number; the API takes strings, as kubectl sends them
        obj["data"] = {str(key): str(value) for key, value in (obj.get("data") or {}).items()}
    create = {
        "Service": kube.core.create_namespaced_service,
        "ConfigMap": kube.core.create_namespaced_config_map,
        "Secret": kube.core.create_namespaced_secret,
        "Ingress": kube.networking.create_namespaced_ingress,
    }[obj["kind"]]
    create(namespace, obj)


def _audit(kubeconfig: Path, configmap: str, *more: str) -> subprocess.CompletedProcess[str]:
    line = [*AUDIT, "--kubeconfig", str(kubeconfig), "--take-over-ingress-nginx", "true", "--nginx-configmap", configmap, *more]
    return subprocess.run(line, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _report(kubeconfig: Path, configmap: str, prefix: str) -> dict[str, Any]:
    result = _audit(kubeconfig, configmap, "--format", "json")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    report = json.loads(result.stdout)
    assert validate(report) == []
    report["ingresses"] = [i for i in report["ingresses"] if i["object"].startswith(prefix + "-")]
    return report


def test_the_audit_of_the_corpus_is_what_the_proxy_does(kube_cluster, kube, placed, twingress) -> None:
    prefix, objects = placed
    configmap = f"{prefix}-{CONTROLLER_CONFIGMAP[0]}/{CONTROLLER_CONFIGMAP[1]}"
    report = _report(kube_cluster.kubeconfig, configmap, prefix)

    ingresses = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objects if o["kind"] == "Ingress"}
    shown = {i["object"]: i for i in report["ingresses"]}
    assert set(shown) == set(ingresses)
    for name, obj in ingresses.items():
        assert [a["key"] for a in shown[name]["annotations"]] == our_annotations(obj), name
    assert sorted(k["key"] for k in report["configmap"]["keys"]) == sorted(key for key, _ in documented_keys())
    print("corpus on the apiserver:", json.dumps({k: report["summary"][k] for k in ("ingresses", "annotations", "configmap")}))
    for format_ in ("markdown", "html"):
        produced = _audit(kube_cluster.kubeconfig, configmap, "--format", format_)
        assert produced.returncode == 0 and all(name in produced.stdout for name in ingresses), format_

    proxy = twingress("--take-over-ingress-nginx", "true", "--nginx-configmap", configmap)
    assert [k["key"] for k in report["configmap"]["keys"] if k["fate"] == "denied"] == [], "documented defaults guard nothing"
    asked = wait_until(lambda: _agree(proxy, report, ingresses), what="the proxy serving what the audit says")
    assert asked["served"], asked
    print("routes asked of the proxy at the documented defaults:", asked)

    # a guard twingress cannot enforce, set: the audit says denied, and the proxy closes what it says
    kube.core.patch_namespaced_config_map(CONTROLLER_CONFIGMAP[1], f"{prefix}-{CONTROLLER_CONFIGMAP[0]}", {"data": {"modsecurity-snippet": "SecRuleEngine On"}})
    again = _report(kube_cluster.kubeconfig, configmap, prefix)
    assert [k["key"] for k in again["configmap"]["keys"] if k["fate"] == "denied"] == ["modsecurity-snippet"]
    closed_before = sum(1 for i in report["ingresses"] for r in i["routes"] if "denied" in r)
    closed_after = sum(1 for i in again["ingresses"] for r in i["routes"] if "denied" in r)
    assert closed_after > closed_before
    denied = wait_until(lambda: _agree(proxy, again, ingresses)["denied"], what="the proxy closing what the second audit denies")
    print("routes the proxy closed with modsecurity-snippet set:", denied)


def _agree(proxy, report: dict[str, Any], ingresses: dict[str, dict[str, Any]]) -> dict[str, int]:
    """
    Each route of the report, asked of the proxy: denied → its status and counted closed; served → not 404
    and not closed; a skipped Ingress's host → what a host nobody has gets (404, or the host-less rules').
    """
    tls_hosts = {host for obj in ingresses.values() for tls in obj["spec"].get("tls") or () for host in tls.get("hosts") or ()}
    served_hosts = {r["host"] for i in report["ingresses"] for r in i["routes"]}
    nobody = proxy.get("no-ingress-has-this-host.example", "/").status  # 404, or the host-less rules' answer
    checked = {"denied": 0, "served": 0, "skipped": 0}
    for ingress in report["ingresses"]:
        for route in ingress["routes"]:
            if route["host"] in tls_hosts or route["host"].startswith("*") or route["pathType"] not in ("Prefix", "Exact"):
                continue  # plain HTTP to a TLS host is redirected first; wildcards and regex paths have no one request to stand for them
            before = proxy.metric(CLOSED[0], **CLOSED[1])
            answer = proxy.get(route["host"], route["path"])
            closed = proxy.metric(CLOSED[0], **CLOSED[1]) - before
            if "denied" in route:
                assert (answer.status, closed) == (route["denied"]["status"], 1), (ingress["object"], route, answer)
                checked["denied"] += 1
            else:
                assert answer.status != 404 and closed == 0, (ingress["object"], route, answer)
                checked["served"] += 1
        if not ingress["served"]:
            hosts = {rule.get("host") for rule in ingresses[ingress["object"]]["spec"].get("rules") or ()}
            for host in hosts - served_hosts - tls_hosts - {None}:
                assert proxy.get(host, "/").status == nobody, (ingress["object"], host)
                checked["skipped"] += 1
    return checked


def test_a_kind_it_may_not_list_is_named_and_the_report_made(kube_cluster, kube, namespace, tmp_path: Path) -> None:
    """RBAC list on the kinds, nothing else: with the Gateway API kinds not listable the report is still made (exit 0) and says so."""
    rbac = client.RbacAuthorizationV1Api(kube.api)
    name = f"{namespace}-audit"
    rules = [
        {"apiGroups": [""], "resources": ["services", "secrets", "configmaps", "namespaces"], "verbs": ["list"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "ingressclasses"], "verbs": ["list"]},
    ]
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "auditor"}})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "auditor", "namespace": namespace}],
    })
    try:
        token = kube.core.create_namespaced_service_account_token("auditor", namespace, {"spec": {"expirationSeconds": 600}}).status.token
        kubeconfig = _token_kubeconfig(kube_cluster.kubeconfig, token, tmp_path / "auditor.kubeconfig")
        result = subprocess.run([*AUDIT, "--kubeconfig", str(kubeconfig), "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        refused = json.loads(result.stdout)["source"]["refused"]
        assert any(line.startswith("Gateway ") and "403" in line for line in refused), refused
        assert any(line.startswith("StreamIngress ") for line in refused), refused
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


def _token_kubeconfig(admin: Path, token: str, path: Path) -> Path:
    import yaml

    config = yaml.safe_load(admin.read_text())
    config["users"] = [{"name": user["name"], "user": {"token": token}} for user in config["users"]]
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_take_over_preset_serves_the_charts_class_with_its_configmap(kube_cluster, kube, namespace, echo, twingress, ingress_classes) -> None:
    """
    --take-over-ingress-nginx true, and nothing else: the chart's IngressClass nginx (controller
    k8s.io/ingress-nginx) is served, and ingress-nginx's ConfigMap is read where the chart puts it
    (ingress-nginx/ingress-nginx-controller: add-headers names a map there); the audit with the same
    line says the same.
    """
    ingress_classes("nginx", "k8s.io/ingress-nginx")
    created = _ensure_namespace(kube, "ingress-nginx")
    headers = f"audit-headers-{namespace}"[:63]
    try:
        kube.core.create_namespaced_config_map("ingress-nginx", {"metadata": {"name": "ingress-nginx-controller"}, "data": {"add-headers": f"ingress-nginx/{headers}"}})
        kube.core.create_namespaced_config_map("ingress-nginx", {"metadata": {"name": headers}, "data": {"X-Taken-Over": "yes"}})
        pod = echo("pod-a")
        kube.backend(namespace, "web", [pod])
        host = f"web.{namespace}.example"
        kube.create_ingress(namespace, "web", host, "web", class_name="nginx")

        proxy = twingress("--watch-namespace", namespace, "--take-over-ingress-nginx", "true")
        response = proxy.wait_status(host, 200, backend="pod-a")
        assert response.headers["x-taken-over"] == "yes"

        result = _audit_line(kube_cluster.kubeconfig, "--watch-namespace", namespace, "--take-over-ingress-nginx", "true", "--format", "json")
        report = json.loads(result.stdout)
        assert report["options"] == {"ingressClass": "nginx", "controllerName": "k8s.io/ingress-nginx", "nginxConfigmap": "ingress-nginx/ingress-nginx-controller", "nginxAnnotations": True}
        (ingress,) = report["ingresses"]
        assert (ingress["object"], ingress["served"], ingress["routes"]) == (f"{namespace}/web", True, [{"host": host, "path": "/", "pathType": "Prefix"}])
        assert report["configmap"]["keys"] == [{"key": "add-headers", "fate": "applied", "message": f"read: 'ingress-nginx/{headers}'"}]
    finally:
        if created:
            kube.delete_namespace("ingress-nginx")
        else:
            for name in ("ingress-nginx-controller", headers):
                _ignore_missing(lambda n=name: kube.core.delete_namespaced_config_map(n, "ingress-nginx"))


def _audit_line(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*AUDIT, "--kubeconfig", str(kubeconfig), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result


def _ensure_namespace(kube, name: str) -> bool:
    """Create the namespace unless it is there; whether this made it."""
    try:
        kube.create_namespace(name)
    except client.ApiException as error:
        if error.status != 409:
            raise
        return False
    return True


def _ignore_missing(call) -> None:
    try:
        call()
    except client.ApiException as error:
        if error.status != 404:
            raise


def test_the_take_over_preset_writes_no_status_while_ingress_nginx_runs(kube, namespace, echo, twingress, ingress_classes) -> None:
    """
    The preset's --update-status false: the leader's controllers run (the annotated Service's Ingress
    is created: it leads), but neither that Ingress nor ingress-nginx's own gets a status from twingress
    while ingress-nginx still writes it (two controllers would overwrite each other's addresses).
    """
    ingress_classes("nginx", "k8s.io/ingress-nginx")
    pod = echo("pod-a")
    kube.backend(namespace, "web", [pod])
    host = f"web.{namespace}.example"
    kube.create_ingress(namespace, "web", host, "web", class_name="nginx")
    proxy = start_controller(twingress, namespace, "--take-over-ingress-nginx", "true", "--publish-status-address", "192.0.2.20")
    proxy.wait_status(host, 200, backend="pod-a")
    create_annotated_service(kube, namespace, "generated")
    wait_ingress(kube, namespace, "generated", what="the leader's generated Ingress (its controllers run)")
    assert writes(proxy, kind="Ingress", verb="create") == 1
    proxy.wait_status(f"generated.{namespace}.example.com", 503)  # the generated route is in the table (no endpoints): the status loop had a table
    assert writes(proxy, kind="Ingress", verb="patch-status") == 0
    assert [load_balancer(read_ingress(kube, namespace, name) or {}) for name in ("web", "generated")] == [[], []]
