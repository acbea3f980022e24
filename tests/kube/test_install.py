"""
k8s/ as an operator installs it, proven on the real apiserver with RBAC on.

The rendered base is applied as the admin; twingress then runs with a token of the
ServiceAccount k8s/ makes and the DaemonSet's configuration where it makes sense in a test:
POD_NAME and POD_NAMESPACE=twingress (so its Lease and its pods are in twingress), the
node-address default for Ingress status, an explicit --https; listeners on loopback, and
--watch-namespace only so that this module's controllers leave other tests' objects alone.

First everything works and nothing is refused; then the roles are shown minimal: each verb of
each rule, taken away alone, breaks something a user would notice (readiness, an informer's
error in /readyz, or a write refused with 403 in the log and missing from the API).
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from ingress import tap
from ingress.process.adoption import HANDOVER_WAIT
from tests.kube import install_support as install
from tests.kube import kustomize
from tests.kube.api import Kube, gone
from tests.kube.controller_support import (
    create_annotated_service,
    events_about,
    lease_holder,
    load_balancer,
    read_ingress,
    set_annotations,
    wait_event,
    wait_ingress,
)
from tests.kube.streams_support import Streams, stream_body, wait_conditions, wait_stream
from tests.kube.twingress import KubeTwingress, free_port, host_for, log_sections, wait_until
from tests.proxy.certs import CertificateAuthority, tls_secret

FORBIDDEN = re.compile(r"\b403: |forbidden", re.IGNORECASE)
STREAM_MAP = "tcp-services"
STREAM_MAP_ARGS = ("--tcp-services-configmap", f"{install.NAMESPACE}/{STREAM_MAP}")
NODE_ADDRESS = "203.0.113.7"
EVERY = install.permissions(install.base_files())  # at collection: no kubectl needed yet


@pytest.fixture(scope="module")
def installed(kube_cluster, tmp_path_factory) -> Iterator[tuple[client.ApiClient, Path]]:
    """k8s/ applied; the admin's API client and a kubeconfig of the ServiceAccount."""
    api = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    install.install(api, install.rendered())
    install.wait_permissions(api, EVERY)
    kubeconfig = install.service_account_kubeconfig(api, kube_cluster.kubeconfig, tmp_path_factory.mktemp("sa") / "kubeconfig")
    yield api, kubeconfig
    install.uninstall(api)
    api.close()


class Answering(KubeTwingress):
    """Started but not necessarily ready: for the runs where readiness must never come."""

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_until(lambda: self.process.poll() is None and self.admin("/healthz")[0] == 200, timeout, "admin answers")


@dataclass
class Run:
    """What a case needs: the API as admin, its namespace, and a way to start twingress."""

    kube: Kube
    namespace: str
    start: Callable[..., KubeTwingress]
    lease: str
    admin_kubeconfig: Path


@pytest.fixture
def run(kube_cluster, installed, kube: Kube, namespace: str, monkeypatch, request, tmp_path: Path) -> Iterator[Run]:
    """C{run.start(*args, ready=True)}: twingress as the ServiceAccount, leading a Lease of its
    own in twingress; with C{ready=False} it is returned as soon as its admin port answers.
    A failing test's report carries the logs."""
    _, kubeconfig = installed
    monkeypatch.setenv("POD_NAMESPACE", install.NAMESPACE)
    monkeypatch.setenv("POD_NAME", f"twingress-{uuid.uuid4().hex[:5]}")
    lease = f"lease-{namespace}"[:63]
    started: list[KubeTwingress] = []
    log_sections(request.config).by_item[request.node.nodeid] = started

    def start(*args: str, ready: bool = True) -> KubeTwingress:
        options = ("--watch-namespace", namespace, "--leader-election-id", lease, *args)
        process = (KubeTwingress if ready else Answering)(kubeconfig, *options, log_path=tmp_path / f"twingress-{len(started)}.log")
        started.append(process)
        return process

    yield Run(kube, namespace, start, lease, kube_cluster.kubeconfig)
    for process in started:
        process.stop()


# --- what the manifests say ------------------------------------------------------------------------


PROBE = ["/opt/twingress/bin/python3", "-m", "ingress.probe"]


def test_the_updates_surge_and_hand_over() -> None:
    """A new pod beside the old one, which hands over its sockets: nothing unavailable at any moment of an update."""
    strategy = kustomize.find(install.rendered(), "DaemonSet", "twingress")["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def daemonset(objects: list[dict]) -> dict:
    return kustomize.find(objects, "DaemonSet", "twingress")["spec"]["template"]


def test_the_daemonset_runs_hardened_on_the_node_network(kube_cluster) -> None:
    pod = daemonset(install.rendered())
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "twingress"  # --status-pod-selector's default
    assert (spec["hostNetwork"], spec["dnsPolicy"], spec["serviceAccountName"]) == (True, "ClusterFirstWithHostNet", "twingress")
    defaults = tap.Options()
    assert spec["terminationGracePeriodSeconds"] > max(defaults["shutdown-delay"], HANDOVER_WAIT) + defaults["drain-timeout"]
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert "ports" not in container  # with hostNetwork each would be a hostPort, and a surge pod could not be scheduled
    assert "--admin=unix:/run/twingress/admin.sock" in container["args"]  # nothing on the network but :80 and :443
    probes = [container[probe]["exec"]["command"] for probe in ("livenessProbe", "readinessProbe")]
    assert probes == [[*PROBE, "/run/twingress/admin.sock", path] for path in ("/healthz", "/readyz")]
    assert {"name": "run", "mountPath": "/run/twingress"} in container["volumeMounts"]
    assert {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in spec["volumes"]  # the pod's own: its admin socket
    assert pod["spec"]["securityContext"]["seLinuxOptions"]["level"]  # pinned: pods of one MCS level may pass descriptors
    handover = ["--handover=@twingress-handover", "--handover-key-secret=$(POD_NAMESPACE)/twingress-handover", "--after-handover=wait"]
    assert all(arg in container["args"] for arg in handover)
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert fields == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "HOST_IP": "status.hostIP"}
    assert set(container["resources"]) == {"requests", "limits"}
    tap.Options().parseOptions(["--kubeconfig", str(kube_cluster.kubeconfig), *container["args"]])  # twistd accepts them


def test_kubectl_renders_the_base_files_unchanged(kube_cluster) -> None:
    """C{kubectl apply -k k8s/} applies exactly the files of k8s/base/ (what the tests parametrize on)."""
    def key(o: dict) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]

    assert sorted(install.rendered(), key=key) == sorted(install.base_files(), key=key)


def test_every_overlay_renders_with_kubectl(kube_cluster) -> None:
    """Each overlay under k8s/overlays/ renders with kubectl's kustomize (an overlay inside its base did not)."""
    overlays = sorted(path for path in (install.BASE / "overlays").iterdir() if (path / "kustomization.yaml").exists())
    assert overlays
    for overlay in overlays:
        assert kustomize.find(kustomize.render(overlay), "DaemonSet", "twingress")


def test_the_edge_overlay_adds_placement_and_is_valid(installed) -> None:
    api, _ = installed
    objects = kustomize.render(install.BASE / "overlays" / "edge")
    spec = daemonset(objects)["spec"]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/edge": ""}
    assert spec["tolerations"][0]["key"] == "node-role.kubernetes.io/edge"
    assert spec["containers"] == daemonset(install.rendered())["spec"]["containers"]  # the rest is the base's
    install.install(api, objects, dry_run=True)  # the apiserver validates every object


# --- everything works as the ServiceAccount -----------------------------------------------------


def test_twingress_serves_everything_as_its_service_account(kube_cluster, run: Run, echo, node_and_pod: str, tmp_path: Path) -> None:
    kube, namespace = run.kube, run.namespace
    streams = Streams(kube_cluster.kubeconfig)
    stream_port, map_port, https_port = free_port(), free_port(), free_port()
    streams.put_config_map(install.NAMESPACE, STREAM_MAP, {str(map_port): f"{namespace}/web:80"})
    proxy = run.start("--https", f"tcp:{https_port}:interface=127.0.0.1", *STREAM_MAP_ARGS)

    # routing by an Ingress to an echo backend
    backend = echo("web-1")
    kube.create_service(namespace, "web", target_port=backend.port)
    kube.put_endpoint_slice(namespace, "web-1", "web", [backend.host], backend.port)
    kube.create_ingress(namespace, "web", host_for(namespace, "web"), "web")
    proxy.wait_status(host_for(namespace, "web"), 200, backend="web-1")

    # a TLS Secret served for its host, verified up to its root
    authority = CertificateAuthority("install test root")
    secure = host_for(namespace, "secure")
    kube.core.create_namespaced_secret(namespace, tls_secret("secure-tls", authority.issue([secure]), namespace=namespace))
    body = kube.ingress_body(namespace, "secure", secure, "web")
    body["spec"]["tls"] = [{"hosts": [secure], "secretName": "secure-tls"}]
    kube.networking.create_namespaced_ingress(namespace, body)
    root = authority.write(tmp_path / "root.pem")
    wait_until(lambda: https_get(https_port, secure, root).startswith(b"HTTP/1.1 200"), what="HTTPS with the Secret's certificate")

    # the Lease held; an annotated Service's Ingress and its Event; status from our pod's node
    wait_until(lambda: lease_holder(kube, install.NAMESPACE, run.lease).startswith(os.environ["POD_NAME"]), what="the Lease held")
    create_annotated_service(kube, namespace, "app", host=host_for(namespace, "app"))
    wait_ingress(kube, namespace, "app", what="the generated Ingress")
    wait_event(kube, namespace, "app", "IngressCreated")
    wait_ingress(kube, namespace, "web", lambda i: load_balancer(i) == [NODE_ADDRESS], "status from our pod's node")

    # a StreamIngress accepted, and the ingress-nginx map's entry served
    kube.create_service(namespace, "db", target_port=15432)
    kube.put_endpoint_slice(namespace, "db-1", "db", ["10.244.0.20"], 15432)
    streams.create(stream_body(namespace, "pg", stream_port, service="db", port=80))
    wait_conditions(proxy, namespace, "pg", {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")})
    wait_until(lambda: stream_status(streams, namespace, "pg").get("Accepted") == "True", what="the StreamIngress's status written")
    wait_stream(proxy, f"TCP/{map_port}", lambda e: e is not None, "the ConfigMap's stream")
    streams.close()

    assert proxy.readyz()[0] == 200
    assert not FORBIDDEN.findall(proxy.log()), "a request was refused"


def https_get(port: int, host: str, cafile: Path) -> bytes:
    """GET / over TLS with SNI C{host}, verified against C{cafile}; the start of the response."""
    context = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            return tls.recv(65536)


def stream_status(streams: Streams, namespace: str, name: str) -> dict[str, str]:
    """The StreamIngress's status conditions as written to the API: {type: status}."""
    conditions = (streams.read(namespace, name).get("status") or {}).get("conditions") or []
    return {c["type"]: c["status"] for c in conditions}


@pytest.fixture
def node_and_pod(installed, kube: Kube, namespace: str) -> Iterator[str]:
    """A Node with an ExternalIP and a ready twingress pod on it in twingress (no kubelet runs)."""
    node = f"edge-{namespace}"[:63]
    kube.core.create_node({"metadata": {"name": node}})
    kube.core.patch_node_status(node, {"status": {"addresses": [{"type": "ExternalIP", "address": NODE_ADDRESS}]}})
    pod = {
        "metadata": {"name": node, "labels": {"app.kubernetes.io/name": "twingress"}},
        "spec": {
            "nodeName": node, "serviceAccountName": install.ACCOUNT, "automountServiceAccountToken": False,
            "containers": [{"name": "twingress", "image": "twingress:test"}],
        },
    }
    kube.core.create_namespaced_pod(install.NAMESPACE, pod)
    status = {"phase": "Running", "hostIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "True"}]}
    kube.core.patch_namespaced_pod_status(node, install.NAMESPACE, {"status": status})
    yield node
    kube.core.delete_namespaced_pod(node, install.NAMESPACE, grace_period_seconds=0)
    kube.core.delete_node(node)


# --- each verb is needed -------------------------------------------------------------------------


def informer_refused(kind: str, verb: str, *args: str) -> Callable[[Run], None]:
    """Without list, the informer never syncs (and a required one holds readiness back); without
    watch, it lists but stays disconnected. Either way /readyz shows the 403."""

    def check(run: Run) -> None:
        proxy = run.start(*args, ready=False)

        def refused() -> bool:
            status, detail = proxy.readyz()
            informer = detail["informers"][kind]
            optional = kind in OPTIONAL or kind.startswith("ConfigMap")
            return (
                informer.get("lastError", "").startswith("403")
                and informer["synced"] is (verb == "watch")
                and (status == 200) is (verb == "watch" or optional)
            )

        wait_until(refused, what=f"{kind} {verb} refused in /readyz")

    return check


def logged(proxy: KubeTwingress, pattern: str, what: str) -> None:
    wait_until(lambda: re.search(pattern, proxy.log()), what=what)


def reflector_refused(kind: str) -> Callable[[Run], None]:
    """The status addresses' informers (Pod, Node) report to the log only."""

    def check(run: Run) -> None:
        proxy = run.start()
        logged(proxy, rf"{kind}: list/watch failed: 403", f"the {kind} informer refused")

    return check


def lease_refused(run: Run) -> None:
    proxy = run.start()
    logged(proxy, rf"leader election: {run.lease} not renewed: 403", "the Lease refused")
    assert not lease_holder(run.kube, install.NAMESPACE, run.lease).startswith(os.environ["POD_NAME"])


def lease_update_refused(run: Run) -> None:
    """The Lease exists (held by nobody): taking it is an update."""
    body = {"metadata": {"name": run.lease}, "spec": {"leaseDurationSeconds": 1}}
    client.CoordinationV1Api(run.kube.api).create_namespaced_lease(install.NAMESPACE, body)
    lease_refused(run)


def generated(run: Run) -> KubeTwingress:
    proxy = run.start()
    create_annotated_service(run.kube, run.namespace, "app")
    return proxy


def create_refused(run: Run) -> None:
    proxy = generated(run)
    logged(proxy, r"sync of .* failed, retrying: 403", "the create refused")
    assert read_ingress(run.kube, run.namespace, "app") is None


def patch_refused(run: Run) -> None:
    proxy = generated(run)
    before = wait_ingress(run.kube, run.namespace, "app")
    set_annotations(run.kube, run.namespace, "app", {"ingress/host": host_for(run.namespace, "moved")})
    logged(proxy, r"sync of .* failed, retrying: 403", "the patch refused")
    assert read_ingress(run.kube, run.namespace, "app")["spec"] == before["spec"]


def delete_refused(run: Run) -> None:
    proxy = generated(run)
    wait_ingress(run.kube, run.namespace, "app")
    set_annotations(run.kube, run.namespace, "app", {"ingress/http": "false"})
    logged(proxy, r"sync of .* failed, retrying: 403", "the delete refused")
    assert read_ingress(run.kube, run.namespace, "app") is not None


def handover_key_refused(present: bool) -> Callable[[Run], None]:
    """--handover-key-secret (the DaemonSet's): the key's Secret not readable (it exists), or not creatable (it does not): no hand-over."""

    def check(run: Run) -> None:
        core = client.CoreV1Api(run.kube.api)
        gone(lambda: core.delete_namespaced_secret(HANDOVER_SECRET, install.NAMESPACE))
        if present:
            core.create_namespaced_secret(install.NAMESPACE, {"metadata": {"name": HANDOVER_SECRET}, "data": {"key": "a2V5LWtleS1rZXkta2V5LWtleS1rZXk="}})
        proxy = run.start("--handover", f"@twingress-rbac-{uuid.uuid4().hex[:8]}", "--handover-key-secret", f"{install.NAMESPACE}/{HANDOVER_SECRET}")
        logged(proxy, rf"no hand-over key from Secret {install.NAMESPACE}/{HANDOVER_SECRET} \(403", "the key refused")
        assert "a successor may take" not in proxy.log()

    return check


HANDOVER_SECRET = "twingress-handover"


def event_refused(run: Run) -> None:
    proxy = generated(run)
    wait_ingress(run.kube, run.namespace, "app")
    logged(proxy, r"event IngressCreated about .* not recorded: 403", "the Event refused")
    assert not events_about(run.kube, run.namespace, "app")


def status_refused(run: Run) -> None:
    proxy = run.start("--publish-status-address", "192.0.2.1")
    run.kube.create_ingress(run.namespace, "web", host_for(run.namespace, "web"), "web")
    logged(proxy, r"sync of .* failed, retrying: 403", "the status patch refused")
    assert load_balancer(read_ingress(run.kube, run.namespace, "web")) == []


def stream_status_refused(run: Run) -> None:
    proxy = run.start()
    streams = Streams(run.admin_kubeconfig)
    try:
        streams.create(stream_body(run.namespace, "pg", free_port(), external=True, upstream={"host": "192.0.2.9", "port": 5432}))
        logged(proxy, r"streamstatus: sync of .* failed, retrying: 403", "the StreamIngress status patch refused")
        assert stream_status(streams, run.namespace, "pg") == {}
    finally:
        streams.close()


def gateway_status_refused(route_kind: str) -> Callable[[Run], None]:
    """A Gateway API status patch refused: logged for an object whose status the build judged (a GatewayClass,
    a Gateway and a route of C{route_kind}; a GRPCRoute on an HTTP listener without h2c is judged too: not accepted)."""

    def check(run: Run) -> None:
        proxy = run.start()
        custom = client.CustomObjectsApi(run.kube.api)
        group, version = "gateway.networking.k8s.io", "v1"
        typed = {"apiVersion": f"{group}/{version}"}
        name = f"refused-{uuid.uuid4().hex[:8]}"
        custom.create_cluster_custom_object(group, version, "gatewayclasses", {
            **typed, "kind": "GatewayClass", "metadata": {"name": name}, "spec": {"controllerName": "twingress.io/gateway-controller"},
        })
        try:
            listeners = [{"name": "http", "port": proxy.http_port, "protocol": "HTTP"}]
            gateway = {**typed, "kind": "Gateway", "metadata": {"name": "gw"}, "spec": {"gatewayClassName": name, "listeners": listeners}}
            custom.create_namespaced_custom_object(group, version, run.namespace, "gateways", gateway)
            spec: dict = {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}
            if route_kind == "TLSRoute":
                spec["hostnames"] = ["tls.example"]  # required by its CRD
            custom.create_namespaced_custom_object(group, version, run.namespace, f"{route_kind.lower()}s", {**typed, "kind": route_kind, "metadata": {"name": "web"}, "spec": spec})
            logged(proxy, r"gatewaystatus: sync of .* failed, retrying: 403", "a Gateway API status patch refused")
        finally:
            custom.delete_cluster_custom_object(group, version, "gatewayclasses", name)

    return check


INFORMERS = {
    "ingresses": "Ingress", "ingressclasses": "IngressClass", "services": "Service", "endpointslices": "EndpointSlice",
    "secrets": "Secret", "streamingresses": "StreamIngress", "gatewayclasses": "GatewayClass", "gateways": "Gateway",
    "httproutes": "HTTPRoute", "grpcroutes": "GRPCRoute", "tlsroutes": "TLSRoute", "tcproutes": "TCPRoute", "udproutes": "UDPRoute",
    "referencegrants": "ReferenceGrant", "namespaces": "Namespace",
}
OPTIONAL = {"StreamIngress", "GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute", "ReferenceGrant", "Namespace"}
BREAKS: dict[tuple[str, str], Callable[[Run], None]] = {
    **{(resource, verb): informer_refused(kind, verb) for resource, kind in INFORMERS.items() for verb in ("list", "watch")},
    **{("configmaps", verb): informer_refused(f"ConfigMap {STREAM_MAP_ARGS[1]}", verb, *STREAM_MAP_ARGS) for verb in ("list", "watch")},
    **{(resource, verb): reflector_refused(kind) for resource, kind in (("pods", "Pod"), ("nodes", "Node")) for verb in ("list", "watch")},
    ("leases", "get"): lease_refused,
    ("leases", "create"): lease_refused,
    ("leases", "update"): lease_update_refused,
    ("ingresses", "create"): create_refused,
    ("ingresses", "patch"): patch_refused,
    ("ingresses", "delete"): delete_refused,
    ("ingresses/status", "patch"): status_refused,
    ("events", "create"): event_refused,
    ("secrets", "get"): handover_key_refused(present=True),
    ("secrets", "create"): handover_key_refused(present=False),
    ("streamingresses/status", "patch"): stream_status_refused,
    **{(f"{plural}/status", "patch"): gateway_status_refused("HTTPRoute") for plural in ("gatewayclasses", "gateways", "httproutes")},
    **{(f"{kind.lower()}s/status", "patch"): gateway_status_refused(kind) for kind in ("GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute")},
}
"""For each (resource, verb) granted in k8s/: what breaks without it."""


@pytest.mark.parametrize("permission", EVERY, ids=[p.id for p in EVERY])
def test_each_verb_of_the_roles_is_needed(installed, run: Run, permission: install.Permission) -> None:
    breaks = BREAKS.get((permission.resource, permission.verb))
    assert breaks is not None, f"{permission.id} is granted but nothing here shows what needs it"
    api, _ = installed
    full = kustomize.find(install.rendered(), permission.role, install.ACCOUNT)["rules"]
    install.set_rules(api, permission.role, install.without(install.rendered(), permission))
    try:
        install.wait_permissions(api, EVERY, denied=(permission,), namespace=run.namespace)
        breaks(run)
    finally:
        install.set_rules(api, permission.role, full)
