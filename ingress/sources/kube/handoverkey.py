# -*- test-case-name: tests.kube.test_handover_key -*-
"""
The hand-over key from the cluster (C{--handover-key-secret NAMESPACE/NAME}): read at start, made when absent.

Why from the API and not a mounted Secret: a pod serves nothing before its first list from the apiserver
anyway, so one GET more costs no availability; there is no install step (the first pod makes the key), and
no kubelet volume sync between a new key and the pods that must agree on it.  Two pods that race to make it
agree: the second's create is answered 409 and it reads the first's.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable, MutableMapping
from typing import Any, Optional

from twisted.logger import Logger

from ingress.sources.kube.client import APIError, KubeClient

log = Logger(namespace=__name__)  # named: compiled (mypyc) modules have no frame to infer it from

FIELD = "key"  # the Secret's data key
KEY_BYTES = 32  # what a key made here holds
SHORTEST = 16  # what a key must hold (as --handover-key-file's)
_TIMEOUT = (2.0, 5.0)


class KeyUnusable(Exception):
    """The Secret has no usable key (no C{key}, not base64, too short): one log line, no hand-over."""


def handover_key(client: KubeClient, namespace: str, name: str) -> bytes:
    """The key of Secret C{namespace}/C{name}, made (L{KEY_BYTES} random bytes) when the Secret does not exist."""
    path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
    try:
        secret = client.request("GET", path, timeout=_TIMEOUT)
    except APIError as error:
        if error.status != 404:
            raise
        secret = _create(client, namespace, name, path)
    return key_of(secret)


def _create(client: KubeClient, namespace: str, name: str, path: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "twingress"}},
        "type": "Opaque",
        "data": {FIELD: base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()},
    }
    try:
        created = client.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body, timeout=_TIMEOUT)
        log.info("handover: made the hand-over key in Secret {namespace}/{name}", namespace=namespace, name=name)
        return created
    except APIError as error:
        if error.status != 409:  # 409: another pod made it first; both use its key
            raise
    return client.request("GET", path, timeout=_TIMEOUT)


def key_of(secret: dict[str, Any]) -> bytes:
    """The key in a Secret's JSON; L{KeyUnusable} when it has none of at least L{SHORTEST} bytes."""
    data = secret.get("data")
    value = data.get(FIELD) if isinstance(data, dict) else None
    if not isinstance(value, str):
        raise KeyUnusable(f"no data key {FIELD!r}")
    try:
        key = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise KeyUnusable(f"its {FIELD!r} is not base64") from None
    if len(key) < SHORTEST:
        raise KeyUnusable(f"its {FIELD!r} holds {len(key)} bytes; a key has at least {SHORTEST}")
    return key


def fetch_handover_key(options: MutableMapping[str, Any], client: Callable[[], KubeClient]) -> None:
    """
    With --handover-key-secret, C{options["handover-key"]} from the cluster. When there is no usable key (the Secret
    is bad, the apiserver refuses or does not answer), one log line and no hand-over: the listeners bind fresh, as
    without --handover (beside a predecessor that still holds them, only a SO_REUSEPORT group can: with --workers).
    """
    ref: Optional[tuple[str, str]] = options.get("handover-key-secret-ref")
    if not ref:
        return
    namespace, name = ref
    try:
        made = client()
        try:
            options["handover-key"] = handover_key(made, namespace, name)
        finally:
            made.close()
    except Exception as error:  # the API's errors, the client's (urllib3, its configuration) and KeyUnusable: each is one line, never a traceback
        options["handover"], options["handover-wait"] = "", 0.0  # no rendezvous, so no successor to wait for
        log.error(
            "handover: no hand-over key from Secret {namespace}/{name} ({why}): no hand-over, binding fresh",
            namespace=namespace, name=name, why=str(error)[:200] or type(error).__name__,
        )
