"""
The controllers' command-line options (part of C{twistd ingress}'s Options),
and their conversion into a L{ControllerOptions}.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Optional

from twisted.python import usage

from ingress.controllers.generated import DEFAULT_HOST_TEMPLATE, GeneratorConfig
from ingress.controllers.leader import ElectionConfig, default_identity, default_namespace
from ingress.controllers.manager import ControllerOptions

CONTROLLER_PARAMETERS: list[list[Any]] = [
    ["generate-ingresses", None, "true", "Generate Ingresses for Services annotated ingress/http: 'true' (true|false)."],
    ["generated-host-template", None, DEFAULT_HOST_TEMPLATE, "Host of a generated Ingress without ingress/host ({name}, {namespace})."],
    ["update-status", None, "true", (
        "Write the status of what we serve: the Ingresses' status.loadBalancer, StreamIngress and Gateway API conditions,"
        " and Warning Events of Ingress problems (true|false)."
    )],
    ["publish-status-address", None, None, "Comma-separated IPs/hostnames for Ingress status. [default: the nodes of our ready pods]"],
    ["publish-service", None, None, (
        "NAMESPACE/NAME of the Service in front of us (a LoadBalancer): its addresses go to Ingress status,"
        " as ingress-nginx's --publish-service. [default: the nodes of our ready pods]"
    )],
    ["status-pod-selector", None, "app.kubernetes.io/name=twingress", "Label selector of our pods (in the election namespace), whose nodes' addresses are published."],
    ["leader-election-namespace", None, None, "Namespace of the leader Lease. [default: the pod's namespace, else 'default']"],
    ["leader-election-id", None, "twingress-leader", "Name of the leader Lease."],
    ["lease-duration", None, "15", "Seconds a Lease is valid without renewal."],
    ["renew-deadline", None, "10", "Seconds the leader keeps trying to renew before it stops writing."],
    ["retry-period", None, "2", "Seconds between election attempts."],
    ["controller-workers", None, "5", "Worker threads per controller (generator, status)."],
]


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123 label: a namespace's name, a Service's


def _flag(options: Mapping[str, Any], name: str) -> bool:
    value = str(options[name]).lower()
    if value not in ("true", "false"):
        raise usage.UsageError(f"--{name} takes true or false, not {options[name]!r}")
    return value == "true"


def _number(options: Mapping[str, Any], name: str, convert: Any = float) -> Any:
    try:
        value = convert(options[name])
    except ValueError:
        raise usage.UsageError(f"--{name}: not a number: {options[name]!r}") from None
    if value <= 0:
        raise usage.UsageError(f"--{name} must be > 0")
    return value


def _service_name(value: Optional[str]) -> Optional[tuple[str, str]]:
    """--publish-service's NAMESPACE/NAME as a store key; None when not given."""
    if value is None:
        return None
    namespace, _, name = value.partition("/")
    if not (_LABEL.fullmatch(namespace) and _LABEL.fullmatch(name)):
        raise usage.UsageError(f"--publish-service takes NAMESPACE/NAME of a Service, not {value!r}")
    return namespace, name


def controller_options(options: Mapping[str, Any], class_name: str, controller_name: str) -> Optional[ControllerOptions]:
    """The controllers' settings, or None when there is nothing for them to do (both turned off)."""
    generate, update_status = _flag(options, "generate-ingresses"), _flag(options, "update-status")
    if not (generate or update_status):
        return None
    try:
        election = ElectionConfig(
            namespace=options["leader-election-namespace"] or default_namespace(),
            name=options["leader-election-id"],
            identity=default_identity(),
            lease_duration=_number(options, "lease-duration"),
            renew_deadline=_number(options, "renew-deadline"),
            retry_period=_number(options, "retry-period"),
        )
    except ValueError as error:
        raise usage.UsageError(f"leader election: {error}") from None
    publish_addresses = tuple(a.strip() for a in (options["publish-status-address"] or "").split(",") if a.strip())
    publish_service = _service_name(options["publish-service"])
    if publish_addresses and publish_service:
        raise usage.UsageError("give either --publish-status-address or --publish-service, not both")
    template = options["generated-host-template"]
    if "{name}" not in template:
        raise usage.UsageError("--generated-host-template must contain {name} (hosts must differ per Service)")
    return ControllerOptions(
        election=election,
        generator=GeneratorConfig(class_name, template),
        controller_name=controller_name,
        generate=generate,
        update_status=update_status,
        workers=_number(options, "controller-workers", int),
        publish_addresses=publish_addresses,
        publish_service=publish_service,
        status_pod_selector=options["status-pod-selector"],
    )
