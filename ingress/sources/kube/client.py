# -*- test-case-name: tests.kube.test_routing_live -*-
"""
The Kubernetes client at our boundary: configuration, authentication and
HTTP from the C{kubernetes} package, and nothing else.

Responses are raw JSON (C{_preload_content=False}-style streaming for
watches); parsing into model values happens in the reflector, never through
generated client models.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any, Optional
from urllib.parse import urlencode

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

SERVICE_ACCOUNT_DIRECTORY = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_TOKEN = SERVICE_ACCOUNT_DIRECTORY + "/token"
MERGE_PATCH = "application/merge-patch+json"  # RFC 7386: send only the fields we own
FIELD_MANAGER = "twingress"  # how our writes appear in managedFields


class APIError(Exception):
    """A non-2xx answer: C{status} and the Status message the apiserver sent."""

    def __init__(self, status: int, message: str, body: Optional[dict[str, Any]] = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body or {}


def in_cluster_available() -> bool:
    return os.path.exists(SERVICE_ACCOUNT_TOKEN) and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


class KubeClient:
    """
    Authenticated JSON requests to the apiserver; rebuilt by L{reload} after a
    401 (in-cluster tokens rotate, kubeconfig exec credentials expire).
    """

    def __init__(self, kubeconfig: Optional[str] = None) -> None:
        self.kubeconfig = kubeconfig
        self.api: k8s_client.ApiClient = self._load()

    def _load(self) -> k8s_client.ApiClient:
        configuration = k8s_client.Configuration()
        if self.kubeconfig:
            k8s_config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
        return k8s_client.ApiClient(configuration)

    def reload(self) -> None:
        old, self.api = self.api, self._load()
        old.close()

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def _open(
        self,
        method: str,
        path: str,
        query: Optional[dict[str, Any]],
        body: Any,
        timeout: tuple[float, float],
        content_type: str = "application/json",
    ) -> Any:
        url_path = path + ("?" + urlencode(query) if query else "")
        method, url, headers, body_out, post = self.api.param_serialize(
            method,
            url_path,
            header_params={"Accept": "application/json", **({"Content-Type": content_type} if body is not None else {})},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(method, url, headers, body_out, post, _request_timeout=timeout)
        raw = response.response
        if not 200 <= raw.status < 300:
            data = raw.data
            raw.release_conn()
            raise _api_error(raw.status, data)
        return raw

    def request(
        self,
        method: str,
        path: str,
        query: Optional[dict[str, Any]] = None,
        body: Any = None,
        timeout: tuple[float, float] = (5.0, 30.0),
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """
        One request, its JSON answer as plain dicts; raises L{APIError} on a non-2xx.

        C{content_type} is C{application/merge-patch+json} for the PATCHes the
        controllers send (only the fields they own).
        """
        raw = self._open(method, path, query, body, timeout, content_type)
        try:
            return json.loads(raw.data) if raw.data else {}
        finally:
            raw.release_conn()

    def stream_lines(self, path: str, query: dict[str, Any], timeout: tuple[float, float]) -> Iterator[dict[str, Any]]:
        """
        A watch: one JSON event per line, until the server ends the stream (or the read times out).

        The request is made here, before the first event is asked for, so an
        error answer (410, 401...) raises from this call.
        """
        return self._lines(self._open("GET", path, query, None, timeout))

    @staticmethod
    def _lines(raw: Any) -> Iterator[dict[str, Any]]:
        pending = b""
        try:
            for chunk in raw.stream(65536, decode_content=False):
                pending += chunk
                while True:
                    newline = pending.find(b"\n")
                    if newline < 0:
                        break
                    line, pending = pending[:newline], pending[newline + 1 :]
                    if line.strip():
                        yield json.loads(line)
        finally:
            raw.close()  # a watch is never reused: close instead of pooling a half-read connection

    def close(self) -> None:
        self.api.close()


def _api_error(status: int, data: bytes) -> APIError:
    try:
        body = json.loads(data)
        message = str(body.get("message", "")) if isinstance(body, dict) else str(body)
    except (ValueError, TypeError):
        body, message = None, (data or b"")[:200].decode("utf-8", "replace")
    return APIError(status, message, body if isinstance(body, dict) else None)
