# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""
The parts of an Ingress's route policies that read other objects: its basic auth (an Opaque Secret),
its external auth (a ConfigMap of fields) and its default-backend (a Service and its endpoints).

Each is resolved once per Ingress and build, however many paths the Ingress has, so that what is
wrong with it is reported once; a guard that cannot be read closes the Ingress's routes (the reason
is returned beside the value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from ingress.model import ConfigMap, Ingress, ObjectRef, OpaqueSecret, Problem
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.annotations.auth import AuthSecretProblem
from ingress.routing.annotations.auth import basic_auth as read_basic_auth
from ingress.routing.annotations.customheaders import CustomHeadersProblem
from ingress.routing.annotations.customheaders import custom_headers as read_custom_headers
from ingress.routing.annotations.errorpages import default_backend as read_default_backend
from ingress.routing.annotations.extauth import ExternalAuthProblem
from ingress.routing.annotations.extauth import external_auth as read_external_auth
from ingress.routing.backends import Backends
from ingress.routing.policies import BasicAuth, ExternalAuth, HeaderChanges
from ingress.routing.upstream import Upstream


class IngressResolutions:
    """Per Ingress, for one build: what its policies read elsewhere; problems go to the build's list."""

    def __init__(
        self,
        backends: Backends,
        opaque_secrets: Mapping[tuple[str, str], OpaqueSecret],
        config_maps: Mapping[tuple[str, str], ConfigMap],
        problems: list[Problem],
    ) -> None:
        self.backends = backends
        self.opaque_secrets = opaque_secrets
        self.config_maps = config_maps
        self.problems = problems
        self._auth: dict[ObjectRef, tuple[Optional[BasicAuth], str]] = {}
        self._external: dict[ObjectRef, tuple[Optional[ExternalAuth], str]] = {}
        self._default_backends: dict[ObjectRef, Optional[Upstream]] = {}
        self._headers: dict[ObjectRef, tuple[Optional[HeaderChanges], str]] = {}

    def basic_auth(self, ingress: Ingress, read: IngressAnnotations) -> tuple[Optional[BasicAuth], str]:
        """An Ingress's basic auth, read once (its problems reported once), and why its routes close, if they do."""
        cached = self._auth.get(ingress.ref)
        if cached is None:
            try:
                auth, skipped = read_basic_auth(ingress, read, self.opaque_secrets)
                cached = (auth, "")
                self.problems.extend(Problem(ingress.ref, "InvalidAuthSecret", f"{line}; that user cannot sign in") for line in skipped)
            except AuthSecretProblem as error:
                cached = (None, str(error))
                self.problems.append(Problem(ingress.ref, "SecretNotFound", f"{error}: the Ingress's routes answer 503"))
            self._auth[ingress.ref] = cached
        return cached

    def external_auth(self, ingress: Ingress, read: IngressAnnotations) -> tuple[Optional[ExternalAuth], str]:
        """An Ingress's external auth, read once (its problem reported once), and why its routes close, if they do."""
        cached = self._external.get(ingress.ref)
        if cached is None:
            try:
                cached = (read_external_auth(ingress, read, self.config_maps), "")
            except ExternalAuthProblem as error:
                cached = (None, str(error))
                self.problems.append(Problem(ingress.ref, "InvalidExternalAuth", f"{error}: the Ingress's routes answer 503"))
            self._external[ingress.ref] = cached
        return cached

    def custom_headers(self, ingress: Ingress, read: IngressAnnotations, allowed: Optional[frozenset[str]]) -> tuple[Optional[HeaderChanges], str]:
        """An Ingress's custom-headers, read once (its problem reported once), and why its routes close, if they do."""
        cached = self._headers.get(ingress.ref)
        if cached is None:
            try:
                cached = (read_custom_headers(ingress, read, self.config_maps, allowed), "")
            except CustomHeadersProblem as error:
                cached = (None, str(error))
                self.problems.append(Problem(ingress.ref, "InvalidCustomHeaders", f"{error}: the Ingress's routes answer 503"))
            self._headers[ingress.ref] = cached
        return cached

    def default_backend(self, ingress: Ingress, read: IngressAnnotations) -> Optional[Upstream]:
        """An Ingress's default-backend with a ready endpoint, resolved once (why it is not used: reported once)."""
        if ingress.ref not in self._default_backends:
            found, issue = read_default_backend(ingress, read, self.backends.first_port_upstream)
            if issue is not None:
                self.problems.append(Problem(ingress.ref, *issue))
            self._default_backends[ingress.ref] = found
        return self._default_backends[ingress.ref]
