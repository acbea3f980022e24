# -*- test-case-name: tests.unit.test_generated -*-
"""
The Ingress a Service's C{ingress/*} annotations ask for, and whether one we
see is it.  Pure: no I/O, no Twisted - the sync loop in
L{ingress.controllers.servicegen} does the writing.

Annotations (on the Service):
  - C{ingress/http: "true"} turns generation on; any other value, or none, means off;
  - C{ingress/host}: the rule's host (default: the host template);
  - C{ingress/path}: a Prefix path (default C{/});
  - C{ingress/port}: the Service port by number or name (default: the port
    named C{http}, else the first port);
  - C{ingress/tls-secret}: adds a C{tls} entry for the host with that Secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ingress.model import Ingress, OwnerReference, Service, ServicePort
from ingress.model._fields import _check_dns_subdomain
from ingress.model.parse import ParseError, parse_host, parse_object

ENABLE, HOST, PATH, PORT, TLS_SECRET = "ingress/http", "ingress/host", "ingress/path", "ingress/port", "ingress/tls-secret"
MANAGED_BY_LABEL, MANAGED_BY = "app.kubernetes.io/managed-by", "twingress"
DEFAULT_HOST_TEMPLATE = "{name}.{namespace}.example.com"


class InvalidAnnotation(Exception):
    """An annotation value we cannot turn into an Ingress: the Warning Event's note says which and why."""


@dataclass(frozen=True)
class GeneratorConfig:
    class_name: str
    host_template: str = DEFAULT_HOST_TEMPLATE


def is_enabled(service: Service) -> bool:
    return service.meta.annotations.get(ENABLE) == "true"


def owner_reference(service: Service) -> dict[str, Any]:
    """The ownerReference that makes the Service the Ingress's controller and garbage-collects it."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "name": service.meta.name,
        "uid": service.meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_generated_for(ingress: Ingress, service: Service) -> bool:
    """
    The Ingress is ours to manage for this Service: its controller is a
    Service of the same name (a Service deleted and re-created under that name
    keeps its generated Ingress; the new uid is written back).
    """
    owner = ingress.meta.controller_ref()
    return owner is not None and owner.api_version == "v1" and owner.kind == "Service" and owner.name == service.meta.name


def is_owned_by(ingress: Ingress, service: Service) -> bool:
    """Owned by this very Service object (same uid): only then may we delete it."""
    owner = ingress.meta.controller_ref()
    return is_generated_for(ingress, service) and owner is not None and owner.uid == service.meta.uid


def desired_ingress(service: Service, config: GeneratorConfig) -> dict[str, Any]:
    """
    The full Ingress object for an enabled Service, as API JSON.

    @raise InvalidAnnotation: a value is not a valid host, path, port or Secret name.
    """
    meta, annotations = service.meta, service.meta.annotations
    host = _host(annotations.get(HOST) or _template_host(config.host_template, meta.name, meta.namespace))
    path = annotations.get(PATH, "/") or "/"
    port = _backend_port(service, annotations.get(PORT, ""))
    spec: dict[str, Any] = {
        "ingressClassName": config.class_name,
        "rules": [
            {
                "host": host,
                "http": {"paths": [{"path": path, "pathType": "Prefix", "backend": {"service": {"name": meta.name, "port": port}}}]},
            }
        ],
    }
    secret = annotations.get(TLS_SECRET, "")
    if secret:
        try:
            _check_dns_subdomain(secret, TLS_SECRET)
        except ParseError as error:
            raise InvalidAnnotation(f"{TLS_SECRET}: {error.message}") from None
        spec["tls"] = [{"hosts": [host], "secretName": secret}]
    body = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [owner_reference(service)],
        },
        "spec": spec,
    }
    try:
        parse_object(body)  # the same checks every Ingress we route gets (e.g. the path)
    except ParseError as error:
        raise InvalidAnnotation(f"{PATH}: {error.message}" if ".path" in error.message else error.message) from None
    return body


def _template_host(template: str, name: str, namespace: str) -> str:
    try:
        return template.format(name=name, namespace=namespace)
    except (KeyError, IndexError, ValueError) as error:
        raise InvalidAnnotation(f"--generated-host-template {template!r}: {error}") from None


def _host(text: str) -> str:
    try:
        host = parse_host(text, HOST)
    except ParseError as error:
        raise InvalidAnnotation(error.message) from None
    if not host:
        raise InvalidAnnotation(f"{HOST}: empty host")
    return host


def _backend_port(service: Service, wanted: str) -> dict[str, Any]:
    """The backend port by the annotation (which must name an existing port), else "http", else the first."""
    ports = service.ports
    if not ports:
        raise InvalidAnnotation("the Service has no ports")
    if wanted:
        found = _find(ports, wanted)
        if found is None:
            known = ", ".join(p.name or str(p.port) for p in ports)
            raise InvalidAnnotation(f"{PORT}: {wanted!r} is not a port of the Service (ports: {known})")
        return {"number": found.port} if wanted.isdigit() else {"name": found.name}
    named_http = _find(ports, "http")
    chosen = named_http or ports[0]
    return {"name": chosen.name} if chosen.name else {"number": chosen.port}


def _find(ports: tuple[ServicePort, ...], wanted: str) -> Optional[ServicePort]:
    if wanted.isdigit():
        return next((p for p in ports if p.port == int(wanted)), None)
    return next((p for p in ports if p.name == wanted), None)


def drift(current: Ingress, desired: dict[str, Any]) -> bool:
    """
    Whether the Ingress differs from what we would write, in the fields we
    own: spec, our label and the controller ownerReference.  Annotations and
    labels others add are theirs and not drift.
    """
    wanted = parse_object(desired)
    owner = desired["metadata"]["ownerReferences"][0]
    return (
        (current.ingress_class_name, current.default_backend, current.rules, current.tls)
        != (wanted.ingress_class_name, wanted.default_backend, wanted.rules, wanted.tls)
        or current.meta.labels.get(MANAGED_BY_LABEL) != MANAGED_BY
        or current.meta.controller_ref() != OwnerReference("v1", "Service", owner["name"], owner["uid"], controller=True)
    )


def restore_patch(current: Ingress, desired: dict[str, Any]) -> dict[str, Any]:
    """
    A JSON merge patch that puts our fields back, guarded by the resourceVersion
    we compared against (a concurrent change makes it fail with 409 and the
    sync runs again on fresh data).
    """
    spec = dict(desired["spec"])
    spec.setdefault("tls", None)  # merge patch: null removes what someone added
    spec["defaultBackend"] = None
    return {
        "metadata": {
            "resourceVersion": current.meta.resource_version,
            "labels": desired["metadata"]["labels"],
            "ownerReferences": desired["metadata"]["ownerReferences"],
        },
        "spec": spec,
    }
