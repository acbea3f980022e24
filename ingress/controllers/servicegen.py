# -*- test-case-name: tests.kube.test_servicegen -*-
"""
Service → Ingress generation: one sync per Service key (namespace, name).

The sync reads the Service and the same-named Ingress from the informers'
stores (no API reads per event) and makes the cluster match:

- enabled, no Ingress → create it (owned by the Service, so garbage
  collection removes it with the Service);
- enabled, our Ingress differs (someone edited it, or the Service changed) →
  merge-patch our fields back, guarded by its resourceVersion;
- enabled, an Ingress of that name that we don't manage → a Warning Event on
  the Service, and both are left alone;
- not enabled, an Ingress this Service owns → delete it (with a uid
  precondition); anything else is never touched;
- invalid annotations → a Warning Event, no write.

Writes that fail (409 on a stale store, a restarting apiserver) raise, and
the loop retries them with backoff.  Every write is preceded by the
leadership check.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from ingress.controllers.events import NORMAL, WARNING, EventRecorder
from ingress.controllers.generated import (
    GeneratorConfig,
    InvalidAnnotation,
    desired_ingress,
    drift,
    is_enabled,
    is_generated_for,
    is_owned_by,
    restore_patch,
)
from ingress.controllers.writer import LeaderWriter
from ingress.model import Ingress, Service
from ingress.sources.kube.client import MERGE_PATCH, APIError
from ingress.sources.kube.reflector import Store

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from



class ServiceIngressSync:
    """The sync function of the generator: idempotent, and safe to run again on stale data."""

    def __init__(
        self,
        writer: LeaderWriter,
        services: Store,
        ingresses: Store,
        config: GeneratorConfig,
        events: EventRecorder,
    ) -> None:
        self.writer = writer
        self.services = services
        self.ingresses = ingresses
        self.config = config
        self.events = events

    def __call__(self, key: tuple[str, str]) -> None:
        service = self.services.get(key)
        if not isinstance(service, Service):
            return  # gone (its Ingress goes by garbage collection) or unparseable
        current = self.ingresses.get(key)
        if not is_enabled(service):
            if isinstance(current, Ingress) and is_owned_by(current, service):
                self._delete(service, current)
            return
        try:
            desired = desired_ingress(service, self.config)
        except InvalidAnnotation as error:
            self.events.record(service.meta, "Service", WARNING, "InvalidAnnotation", "Validate", f"no Ingress generated: {error}")
            return
        if current is None:
            self._create(service, desired)
        elif not isinstance(current, Ingress) or not is_generated_for(current, service):
            self.events.record(
                service.meta, "Service", WARNING, "IngressExists", "Generate",
                f"Ingress {service.meta.namespace}/{service.meta.name} exists and is not managed by twingress for this "
                "Service; it was left alone (rename or delete it, or remove the ingress/http annotation)",
                related=service.meta.name,
            )
        elif drift(current, desired):
            self._restore(service, current, desired)

    def _path(self, namespace: str, name: str = "") -> str:
        base = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses"
        return f"{base}/{name}" if name else base

    def _create(self, service: Service, desired: dict[str, Any]) -> None:
        try:
            self.writer.request("POST", self._path(service.meta.namespace), "Ingress", "create", desired)
        except APIError as error:
            if error.status == 409:  # our store is behind: the next event about it syncs again
                raise RetryLater("Ingress already exists (store not caught up yet)") from None
            raise
        log.info("created Ingress {ns}/{name} for its Service", ns=service.meta.namespace, name=service.meta.name)
        self.events.record(service.meta, "Service", NORMAL, "IngressCreated", "Create", f"created Ingress {service.meta.name}", related=service.meta.name)

    def _restore(self, service: Service, current: Ingress, desired: dict[str, Any]) -> None:
        path = self._path(service.meta.namespace, service.meta.name)
        self.writer.request("PATCH", path, "Ingress", "patch", restore_patch(current, desired), MERGE_PATCH)
        log.info("updated Ingress {ns}/{name} to match its Service", ns=service.meta.namespace, name=service.meta.name)
        self.events.record(
            service.meta, "Service", NORMAL, "IngressUpdated", "Update",
            f"updated Ingress {service.meta.name} to match the Service's annotations and ports", related=service.meta.name,
        )

    def _delete(self, service: Service, current: Ingress) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": current.meta.uid}}
        try:
            self.writer.request("DELETE", self._path(service.meta.namespace, service.meta.name), "Ingress", "delete", body)
        except APIError as error:
            if error.status in (404, 409):  # already gone, or replaced by another object of that name
                return
            raise
        log.info("deleted Ingress {ns}/{name}: its Service no longer asks for one", ns=service.meta.namespace, name=service.meta.name)
        self.events.record(
            service.meta, "Service", NORMAL, "IngressDeleted", "Delete",
            f"deleted Ingress {service.meta.name}: the ingress/http annotation is no longer \"true\"", related=service.meta.name,
        )


class RetryLater(Exception):
    """A sync that must run again (through the rate limiter) once the stores catch up."""

