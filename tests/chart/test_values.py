"""
What the chart renders from ingress-nginx's keys and its own (C{helm template}), and what it
refuses, with the message an operator reads: the key's path and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ingress.tap import Options
from tests.chart import helm


def _args(objects: list[dict[str, Any]], kind: str = "DaemonSet", name: str = "twingress") -> list[str]:
    workload = helm.find(objects, kind, name)
    return list(workload["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["controller.admissionWebhooks.enabled=true"], "controller.admissionWebhooks.enabled: refused: no validating webhook"),
        (["controller.allowSnippetAnnotations=true"], "controller.allowSnippetAnnotations: refused: twingress never executes an nginx snippet"),
        (["controller.customTemplate.configMapName=tmpl"], "controller.customTemplate.configMapName: refused: twingress renders no nginx.tmpl"),
        (["controller.extraModules[0].name=opentelemetry"], "controller.extraModules: refused: twingress loads no nginx modules"),
        (["controller.maxmindLicenseKey=KEY"], "controller.maxmindLicenseKey: refused: twingress has no GeoIP2 databases"),
        (["controller.kind=Both"], "controller.kind: refused: twingress runs as a DaemonSet or a Deployment, not both"),
        (["controller.hostPort.enabled=true"], "controller.hostPort.enabled: refused: with hostNetwork every port is the node's already"),
        (["defaultBackend.enabled=true"], "defaultBackend.enabled: refused: no default backend Deployment"),
        (["defaultBackend.image.tag=1.5"], "defaultBackend.image: refused: no default backend"),
        (["controller.watchIngressWithoutClass=true"], "controller.watchIngressWithoutClass: refused: twingress serves only Ingresses of its class"),
        (["controller.image.image=ingress-nginx/controller"], "controller.image: refused: localhost/ingress-nginx/controller is ingress-nginx's image"),
        (
            ["controller.image.registry=registry.k8s.io", "controller.image.image=ingress-nginx/controller"],
            "controller.image: refused: registry.k8s.io/ingress-nginx/controller is ingress-nginx's image",
        ),
        (["controller.livenessProbe.httpGet.port=10254"], "controller.livenessProbe.httpGet: refused: twingress's probes are exec probes"),
        (["controller.nonsense=1"], "controller.nonsense: refused: not a key of this chart"),
        (["controller.ingressClass=other"], "controller.ingressClass: refused: other is not the class served (twingress)"),
    ],
)
def test_refused_naming_the_key(sets: list[str], named: str) -> None:
    """Each key twingress cannot honour fails the render with its path and the reason."""
    assert named in helm.template_error(sets=sets)


def test_every_refusal_in_one_message() -> None:
    """Two refused keys: both named, in one run (an operator fixes the file once)."""
    message = helm.template_error(sets=["controller.admissionWebhooks.enabled=true", "controller.maxmindLicenseKey=KEY"])
    assert "controller.admissionWebhooks.enabled: refused" in message
    assert "controller.maxmindLicenseKey: refused" in message


def test_refused_values_that_mean_what_twingress_does_are_accepted() -> None:
    """ingress-nginx's "off" values of refused keys render: admissionWebhooks, snippets, hostPort, defaultBackend off."""
    sets = [
        "controller.admissionWebhooks.enabled=false",
        "controller.allowSnippetAnnotations=false",
        "controller.hostPort.enabled=false",
        "defaultBackend.enabled=false",
        "controller.watchIngressWithoutClass=false",
    ]
    assert helm.find(helm.template(sets=sets), "DaemonSet", "twingress")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("enable-ssl-passthrough", "controller.extraArgs.enable-ssl-passthrough: refused: twingress serves ssl-passthrough Ingresses without a flag"),
        ("no-such-flag", "controller.extraArgs.no-such-flag: refused: not a twingress option"),
        ("http", "controller.extraArgs.http: refused: the chart sets --http"),
        ("election-id", "controller.extraArgs.election-id: refused: controller.electionID names the Lease"),
    ],
)
def test_extra_args_refused(name: str, message: str) -> None:
    """ingress-nginx flags with no twingress meaning, and the options the chart sets itself, fail naming the flag."""
    assert message in helm.template_error(sets=[f"controller.extraArgs.{name}=x"])


def test_extra_args_passed_and_renamed() -> None:
    """A twingress option goes through as it is; default-ssl-certificate becomes --default-certificate."""
    args = _args(helm.template(sets=["controller.extraArgs.shutdown-delay=3", "controller.extraArgs.default-ssl-certificate=web/wildcard"]))
    assert "--shutdown-delay=3" in args
    assert "--default-certificate=web/wildcard" in args


def test_release_names_carry_the_release() -> None:
    """Another release name: ClusterRole, IngressClass, Lease, hand-over name and Secret all carry it."""
    objects = helm.template(release="edge", namespace="ingress")
    for kind in ["ClusterRole", "ClusterRoleBinding", "IngressClass", "DaemonSet", "Role"]:
        assert helm.find(objects, kind, "edge-twingress")
    args = _args(objects, name="edge-twingress")
    assert "--leader-election-id=edge-twingress-leader" in args
    assert "--ingress-class=edge-twingress" in args
    assert "--handover=@edge-twingress-handover" in args
    assert "--handover-key-secret=$(POD_NAMESPACE)/edge-twingress-handover" in args
    role = helm.find(objects, "Role", "edge-twingress")
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["edge-twingress-handover"]} in role["rules"]
    binding = helm.find(objects, "ClusterRoleBinding", "edge-twingress")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "edge-twingress", "namespace": "ingress"}]


def test_deployment_with_its_service() -> None:
    """ci/deployment-service-values.yaml: a Deployment behind a LoadBalancer Service it publishes, ports declared off hostNetwork."""
    objects = helm.template(values=[helm.CHART / "ci" / "deployment-service-values.yaml"])
    deployment = helm.find(objects, "Deployment", "twingress")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = deployment["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod and pod["dnsPolicy"] == "ClusterFirst"
    assert [port["name"] for port in pod["containers"][0]["ports"]] == ["http", "https"]
    assert "--publish-service=twingress/twingress" in _args(objects, "Deployment")
    service = helm.find(objects, "Service", "twingress")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http", 80, "http"), ("https", 443, "https"), ("5432-tcp", 5432, 5432)
    ]
    assert helm.find(objects, "PodDisruptionBudget", "twingress")["spec"]["minAvailable"] == 1


def test_daemonset_has_no_service_unless_asked() -> None:
    """The DaemonSet on the node's network: no Service, no --publish-service; a controller.service key asks for one."""
    assert not [o for o in helm.template() if o["kind"] == "Service"]
    assert not [a for a in _args(helm.template()) if a.startswith("--publish-service")]
    objects = helm.template(sets=["controller.service.type=ClusterIP"])
    ports = helm.find(objects, "Service", "twingress")["spec"]["ports"]
    assert [(p["name"], p["targetPort"]) for p in ports] == [("http", 80), ("https", 443)]  # by number: hostNetwork declares none
    assert "--publish-service=twingress/twingress" in _args(objects)


def test_ingress_nginx_migration_values() -> None:
    """ci/ingress-nginx-migration-values.yaml, an ingress-nginx user's file, as docs/migration.md shows it becoming twingress's."""
    objects = helm.template(values=[helm.CHART / "ci" / "ingress-nginx-migration-values.yaml"])
    args = _args(objects)
    for arg in [
        "--leader-election-id=ingress-nginx-leader",
        "--ingress-class=nginx",
        "--metrics=tcp:10254:interface=$(HOST_IP)",
        "--nginx-configmap=twingress/twingress-nginx",
        "--tcp-services-configmap=twingress/twingress-tcp",
        "--udp-services-configmap=twingress/twingress-udp",
        "--default-certificate=ingress-nginx/wildcard-tls",
    ]:
        assert arg in args
    config = helm.find(objects, "ConfigMap", "twingress-nginx")
    assert config["data"] == {"proxy-body-size": "16m", "use-forwarded-headers": "true", "ssl-redirect": "true"}
    assert helm.find(objects, "ConfigMap", "twingress-tcp")["data"] == {"2222": "git/gitea-ssh:22"}
    assert helm.find(objects, "ConfigMap", "twingress-udp")["data"] == {"53": "kube-system/kube-dns:53"}
    ingress_class = helm.find(objects, "IngressClass", "nginx")
    assert ingress_class["metadata"]["annotations"] == {"ingressclass.kubernetes.io/is-default-class": "true"}
    assert ingress_class["spec"]["controller"] == "twingress.io/ingress-controller"
    pod = helm.find(objects, "DaemonSet", "twingress")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"dedicated": "ingress"}
    assert pod["priorityClassName"] == "system-cluster-critical"
    # Helm merges maps: the file's requests, the chart's limits (ingress-nginx's chart has none; docs/helm.md)
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}}


def test_header_maps_named_by_the_controller_configmap() -> None:
    """controller.proxySetHeaders / addHeaders: ConfigMaps of their own, named in the controller ConfigMap, as ingress-nginx does."""
    objects = helm.template(sets=["controller.proxySetHeaders.X-Forwarded-Proto=https", "controller.addHeaders.X-Frame-Options=deny"])
    config = helm.find(objects, "ConfigMap", "twingress-nginx")["data"]
    assert config == {
        "proxy-set-headers": "twingress/twingress-custom-proxy-headers",
        "add-headers": "twingress/twingress-custom-add-headers",
    }
    assert helm.find(objects, "ConfigMap", "twingress-custom-proxy-headers")["data"] == {"X-Forwarded-Proto": "https"}
    assert helm.find(objects, "ConfigMap", "twingress-custom-add-headers")["data"] == {"X-Frame-Options": "deny"}
    assert "--nginx-configmap=twingress/twingress-nginx" in _args(objects)


def test_take_over_ingress_nginx_class() -> None:
    """ingressClassResource.name nginx with the take-over preset: no IngressClass (ingress-nginx's release owns nginx, whose
    spec.controller cannot change), --take-over-ingress-nginx=true, and a Role to read ConfigMaps in ingress-nginx's namespace."""
    objects = helm.template(sets=["controller.ingressClassResource.name=nginx", "controller.twingress.takeOverIngressNginx=true"])
    assert not [o for o in objects if o["kind"] == "IngressClass"]
    args = _args(objects)
    assert "--take-over-ingress-nginx=true" in args
    assert "--ingress-class=nginx" in args
    assert not [a for a in args if a.startswith("--controller-name")]  # the preset's k8s.io/ingress-nginx
    role = helm.find(objects, "Role", "twingress-take-over")
    assert role["metadata"]["namespace"] == "ingress-nginx"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}]
    binding = helm.find(objects, "RoleBinding", "twingress-take-over")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "twingress", "namespace": "twingress"}]


def test_take_over_with_another_release_name_keeps_the_preset_class() -> None:
    """Release edge with the preset and no class named: no --ingress-class, so the preset's nginx holds (and
    ingress-nginx's controller.ingressClass: nginx agrees with it)."""
    sets = ["controller.twingress.takeOverIngressNginx=true", "controller.ingressClass=nginx"]
    args = _args(helm.template(release="edge", sets=sets), name="edge-twingress")
    assert not [a for a in args if a.startswith("--ingress-class")]


def test_notes_say_whose_defaults() -> None:
    """NOTES.txt: the defaults are twingress's, and what differs from ingress-nginx's, from the values in force."""
    done = helm.run("install", "twingress", str(helm.CHART), "--namespace", "twingress", "--dry-run=client")
    assert done.returncode == 0, done.stderr
    notes = done.stdout[done.stdout.index("NOTES:"):]
    assert "The defaults are twingress's, not ingress-nginx's" in notes
    assert "controller.kind                  DaemonSet  (ingress-nginx: Deployment)" in notes
    assert "controller.hostNetwork           true  (ingress-nginx: false)" in notes
    deployment = helm.run("install", "twingress", str(helm.CHART), "--namespace", "twingress", "--dry-run=client",
                          "--values", str(helm.CHART / "ci" / "deployment-service-values.yaml"))
    assert "controller.kind " not in deployment.stdout[deployment.stdout.index("NOTES:"):]


def test_schema_names_a_wrong_type() -> None:
    """values.schema.json: a string for a number, an unknown kind: refused naming the key."""
    assert "/controller/metrics/port" in helm.template_error(sets=["controller.metrics.port=metrics"])
    assert "/controller/kind" in helm.template_error(sets=["controller.kind=StatefulSet"])


@pytest.mark.parametrize("values", sorted((helm.CHART / "ci").glob("*-values.yaml")), ids=lambda path: path.name)
def test_every_arg_is_a_twingress_option(values: Path) -> None:
    """Each argument the chart renders names an option of twistd ingress."""
    objects = helm.template(values=[values])
    workload = next(o for o in objects if o["kind"] in ("DaemonSet", "Deployment"))
    args = workload["spec"]["template"]["spec"]["containers"][0]["args"]
    options = {name.rstrip("=") for name in Options().longOpt}
    names = {arg.removeprefix("--").split("=", 1)[0] for arg in args}
    assert all(arg.startswith("--") and "=" in arg for arg in args)
    assert names - options == set()
