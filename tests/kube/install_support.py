"""
k8s/ installed on the test apiserver, and twingress run as its ServiceAccount.

- L{install}: render k8s/ (L{tests.kube.kustomize}) and server-side apply every object as the
  admin, as C{kubectl apply --server-side -k k8s/} would; L{uninstall} removes what the tests
  must not leave behind (the CRD stays: the cluster fixture installed it for every test).
- L{service_account_kubeconfig}: a token of the ServiceAccount from the TokenRequest API in a
  kubeconfig, so the process under test has exactly the permissions the manifests grant.
- L{set_rules}, L{wait_permissions}: change a role's rules and wait until the apiserver's
  authorizer agrees (a SubjectAccessReview per rule and verb), so a test never races RBAC's cache.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from tests.kube import kustomize
from tests.kube.api import gone
from tests.kube.twingress import wait_until
from tests.support import ROOT

BASE = ROOT / "k8s"
NAMESPACE = "twingress"
ACCOUNT = "twingress"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
FIELD_MANAGER = "twingress-tests"


@dataclass(frozen=True)
class Permission:
    """One verb of one rule: what a SubjectAccessReview asks about."""

    role: str  # "ClusterRole" or "Role"
    group: str
    resource: str  # "ingresses" or "ingresses/status"
    verb: str
    name: str = ""  # the rule's one resourceName, when it names one (the hand-over key's Secret)

    @property
    def id(self) -> str:
        return f"{self.role}-{self.resource.replace('/', '-')}-{self.verb}"


def rendered() -> list[dict]:
    """k8s/ as C{kubectl kustomize k8s/} renders it."""
    return kustomize.render(BASE)


def base_files() -> list[dict]:
    """
    The objects of k8s/base/'s resource files, read as plain YAML: what the tests parametrize on
    at collection, before any binary exists. A test checks that kubectl renders the same objects.
    """
    base = BASE / "base"
    objects: list[dict] = []
    for name in yaml.safe_load((base / "kustomization.yaml").read_text())["resources"]:
        objects.extend(document for document in yaml.safe_load_all((base / name).read_text()) if document)
    return objects


def permissions(objects: list[dict]) -> list[Permission]:
    """Every (rule, resource, verb) of our ClusterRole and Role, in manifest order."""
    found = []
    for kind in ("ClusterRole", "Role"):
        for rule in kustomize.find(objects, kind, ACCOUNT)["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    (name,) = rule.get("resourceNames", [""])  # one name at most, so that a review can ask for it
                    found.extend(Permission(kind, group, resource, verb, name) for verb in rule["verbs"])
    return found


def install(api: client.ApiClient, objects: list[dict], dry_run: bool = False) -> None:
    """Server-side apply each object; with C{dry_run} the apiserver validates and stores nothing."""
    dynamic = DynamicClient(api)
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        dynamic.server_side_apply(
            resource, body=obj, namespace=namespace, field_manager=FIELD_MANAGER, force_conflicts=True,
            dry_run="All" if dry_run else None,
        )


def uninstall(api: client.ApiClient) -> None:
    """Everything cluster-wide we applied but the CRD; the namespace goes with what is in it."""
    rbac, networking, core = client.RbacAuthorizationV1Api(api), client.NetworkingV1Api(api), client.CoreV1Api(api)
    for delete in (
        lambda: rbac.delete_cluster_role_binding(ACCOUNT),
        lambda: rbac.delete_cluster_role(ACCOUNT),
        lambda: networking.delete_ingress_class(ACCOUNT),
        lambda: core.delete_namespace(NAMESPACE),
    ):
        gone(delete)  # deletes; a 404 (already gone) is fine


def service_account_kubeconfig(api: client.ApiClient, admin_kubeconfig: Path, path: Path) -> Path:
    """A kubeconfig with a one-hour token of our ServiceAccount (the admin's CA and server)."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = client.CoreV1Api(api).create_namespaced_service_account_token(ACCOUNT, NAMESPACE, request).status.token
    document = json.loads(Path(admin_kubeconfig).read_text())  # cluster.py writes JSON
    document["users"] = [{"name": ACCOUNT, "user": {"token": token}}]
    document["contexts"] = [{"name": ACCOUNT, "context": {"cluster": document["clusters"][0]["name"], "user": ACCOUNT}}]
    document["current-context"] = ACCOUNT
    path.write_text(json.dumps(document, indent=2))
    path.chmod(0o600)
    return path


def without(objects: list[dict], removed: Permission) -> list[dict]:
    """The rules of C{removed.role} with that one verb taken out (an empty rule is dropped)."""
    rules = copy.deepcopy(kustomize.find(objects, removed.role, ACCOUNT)["rules"])
    for rule in rules:
        if removed.group in rule["apiGroups"] and removed.resource in rule["resources"] and removed.verb in rule["verbs"]:
            assert rule["apiGroups"] == [removed.group] and rule["resources"] == [removed.resource], (
                f"keep one resource per rule in k8s/ so each verb can be taken away alone: {rule}"
            )
            rule["verbs"].remove(removed.verb)
    return [rule for rule in rules if rule["verbs"]]


def set_rules(api: client.ApiClient, kind: str, rules: list[dict]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    patch = {"rules": rules}
    if kind == "ClusterRole":
        rbac.patch_cluster_role(ACCOUNT, patch)
    else:
        rbac.patch_namespaced_role(ACCOUNT, NAMESPACE, patch)


def allowed(api: client.ApiClient, permission: Permission, namespace: str) -> bool:
    resource, _, subresource = permission.resource.partition("/")
    attributes = {"group": permission.group, "resource": resource, "verb": permission.verb, "namespace": namespace}
    if subresource:
        attributes["subresource"] = subresource
    if permission.name:
        attributes["name"] = permission.name
    review = {"spec": {"user": USER, "groups": GROUPS, "resourceAttributes": attributes}}
    return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


def wait_permissions(api: client.ApiClient, every: list[Permission], denied: tuple[Permission, ...] = (), namespace: str = NAMESPACE) -> None:
    """Until the authorizer allows each of C{every} but C{denied}, and denies those."""

    def agrees() -> list[str]:
        wrong = [p.id for p in every if allowed(api, p, _scope(p, namespace)) == (p in denied)]
        if wrong:
            raise AssertionError(f"not yet as wanted: {wrong}")
        return ["ok"]

    wait_until(agrees, 30, "RBAC to agree with the roles")


def _scope(permission: Permission, namespace: str) -> str:
    return NAMESPACE if permission.role == "Role" else namespace
