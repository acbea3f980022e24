# -*- test-case-name: tests.kube.test_acme_cluster -*-
"""
What the ACME controller keeps in the cluster: the account key, the pending tokens, the certificates.

- The account key of one ACME server is the Secret C{twingress-acme-account-<digest of the directory
  URL>} in the controller's namespace (staging and production side by side), made on first use by the
  leader and read again after a restart and by the next leader; two leaders cannot race to make it
  (one holds the Lease), and a create answered 409 reads the one that is there.
- The URL of each order in flight is an annotation of that account Secret,
  C{order.acme.twingress.io/<digest of namespace/secretName>}: the next leader (or this one after a
  restart) reads it there and resumes the order instead of placing another; it is removed when the
  certificate is written.  Beside it, C{backoff.acme.twingress.io/<the same digest>} keeps a failed
  certificate's backoff (L{ingress.acme.schedule.pause_text}): the next leader orders no sooner.
- The pending tokens are the ConfigMap L{ingress.acme.answers.CHALLENGES_NAME} beside it, which every
  node watches (why a ConfigMap: that module's docstring).
- The pending TLS-ALPN-01 challenge certificates are the Secret
  L{ingress.acme.tlsalpn_cluster.TLS_ALPN_SECRET} beside it (they hold private keys), which every
  node watches too; it is deleted when the order ends.
- A certificate is the C{kubernetes.io/tls} Secret its Ingress names, labelled as twingress's
  (L{ingress.acme.storage.MANAGED_BY}); a Secret without that label is never written.

Every write goes through the leader's L{LeaderWriter}: a replica that lost the Lease writes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any, Optional

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ingress.acme.answers import CHALLENGES_NAME, answers_data
from ingress.acme.storage import MANAGED_BY, directory_digest
from ingress.acme.tlsalpn_cluster import TLS_ALPN_SECRET, challenge_certificates, secret_body
from ingress.controllers.writer import LeaderWriter
from ingress.sources.kube.client import MERGE_PATCH, APIError

ACCOUNT_PREFIX = "twingress-acme-account-"
ACCOUNT_FIELD = "key.pem"
DIRECTORY_ANNOTATION = "acme.twingress.io/directory"
ORDER_ANNOTATION_PREFIX = "order.acme.twingress.io/"
BACKOFF_ANNOTATION_PREFIX = "backoff.acme.twingress.io/"
_TIMEOUT = (5.0, 15.0)


def account_secret_name(directory: str) -> str:
    """The account Secret of C{directory}'s server."""
    return ACCOUNT_PREFIX + directory_digest(directory)


def order_annotation(namespace: str, name: str) -> str:
    """The account Secret's annotation that keeps the order URL of the certificate Secret C{namespace/name} (a key of at most 63 characters)."""
    return ORDER_ANNOTATION_PREFIX + hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:16]


def backoff_annotation(namespace: str, name: str) -> str:
    """The account Secret's annotation that keeps the backoff of the certificate Secret C{namespace/name}."""
    return BACKOFF_ANNOTATION_PREFIX + order_annotation(namespace, name).removeprefix(ORDER_ANNOTATION_PREFIX)


def is_ours(secret: dict[str, Any]) -> bool:
    """Whether twingress made this Secret (its label): the only kind it may overwrite."""
    labels = secret.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in MANAGED_BY.items())


class ClusterStore:
    """The controller's reads and writes of its ACME objects (one leader's, in its loop's thread)."""

    def __init__(self, writer: LeaderWriter, namespace: str, directory: str) -> None:
        self.writer = writer
        self.namespace = namespace
        self.directory = directory

    def get_secret(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        """The Secret as the apiserver has it, None when there is none."""
        try:
            return self.writer.client.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", timeout=_TIMEOUT)
        except APIError as error:
            if error.status == 404:
                return None
            raise

    def account_key(self) -> tuple[rsa.RSAPrivateKey, bool]:
        """The account key from its Secret, made (and the Secret created) on first use; and whether it was made now."""
        name = account_secret_name(self.directory)
        found = self.get_secret(self.namespace, name)
        if found is not None:
            return _key_of(found, name), False
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        body = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": self.namespace, "labels": dict(MANAGED_BY), "annotations": {DIRECTORY_ANNOTATION: self.directory}},
            "data": {ACCOUNT_FIELD: base64.b64encode(pem).decode()},
        }
        try:
            self.writer.request("POST", f"/api/v1/namespaces/{self.namespace}/secrets", "Secret", "create", body, timeout=_TIMEOUT)
        except APIError as error:
            if error.status != 409:
                raise
            found = self.get_secret(self.namespace, name)  # made meanwhile (a leader before us): use it
            if found is None:
                raise
            return _key_of(found, name), False
        return key, True

    def order_url(self, namespace: str, name: str) -> str:
        """The order placed for the certificate Secret C{namespace/name} and not finished ('' when none)."""
        return self._account_annotation(order_annotation(namespace, name))

    def keep_order_url(self, namespace: str, name: str, url: str) -> None:
        """Note (or with '', forget) the order of C{namespace/name} on the account Secret, where the next leader looks."""
        self._annotate_account(order_annotation(namespace, name), url)

    def kept_backoff(self, namespace: str, name: str) -> str:
        """The backoff kept for the certificate Secret C{namespace/name} ('' when none)."""
        return self._account_annotation(backoff_annotation(namespace, name))

    def keep_backoff(self, namespace: str, name: str, text: str) -> None:
        """Note (or with '', forget) the backoff of C{namespace/name} on the account Secret, where the next leader looks."""
        self._annotate_account(backoff_annotation(namespace, name), text)

    def _account_annotation(self, key: str) -> str:
        """The account Secret's annotation C{key} ('' when it or the Secret is missing)."""
        found = self.get_secret(self.namespace, account_secret_name(self.directory))
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(key, ""))

    def _annotate_account(self, key: str, value: str) -> None:
        """The account Secret's annotation C{key} set to C{value} ('' removes it), by a merge patch."""
        patch = {"metadata": {"annotations": {key: value or None}}}
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{account_secret_name(self.directory)}"
        self.writer.request("PATCH", path, "Secret", "patch", patch, content_type=MERGE_PATCH, timeout=_TIMEOUT)

    def annotate_secret(self, existing: dict[str, Any], annotations: dict[str, str | None]) -> None:
        """
        Set (None: remove) annotations of twingress's own certificate Secret, its data as it is: an update (the verb the
        certificates are written with) at its resourceVersion, so a change meanwhile is a 409, never overwritten.
        C{existing} takes the written metadata (its new resourceVersion: a renewal's write that follows is not a 409).
        """
        if not is_ours(existing):
            raise ValueError(f"Secret {existing['metadata']['namespace']}/{existing['metadata']['name']} is not twingress's")
        metadata = existing["metadata"]
        kept = {key: value for key, value in {**(metadata.get("annotations") or {}), **annotations}.items() if value is not None}
        body = {**existing, "metadata": {**metadata, "annotations": kept}}
        path = f"/api/v1/namespaces/{metadata['namespace']}/secrets/{metadata['name']}"
        written = self.writer.request("PUT", path, "Secret", "update", body, timeout=_TIMEOUT)
        existing["metadata"] = written.get("metadata") or body["metadata"]

    def publish(self, tokens: dict[str, tuple[str, str]]) -> None:
        """The pending tokens (token: (host, key authorization)) into the ConfigMap every node watches; {} empties it."""
        body = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CHALLENGES_NAME, "namespace": self.namespace, "labels": dict(MANAGED_BY)},
            "data": answers_data(tokens),
        }
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        try:
            self.writer.request("PUT", f"{path}/{CHALLENGES_NAME}", "ConfigMap", "update", body, timeout=_TIMEOUT)
        except APIError as error:
            if error.status != 404:
                raise
            self.writer.request("POST", path, "ConfigMap", "create", body, timeout=_TIMEOUT)

    def publish_tls_alpn(self, tokens: dict[str, tuple[str, str]]) -> None:
        """
        The challenge certificates of the pending tokens (token: (host, key authorization)) into the Secret every node
        watches, replaced whole; {} deletes it (the order is over, valid or failed).
        """
        path = f"/api/v1/namespaces/{self.namespace}/secrets"
        try:
            if not tokens:
                self.writer.request("DELETE", f"{path}/{TLS_ALPN_SECRET}", "Secret", "delete", None, timeout=_TIMEOUT)
                return
            body = secret_body(self.namespace, challenge_certificates(tokens))
            self.writer.request("PUT", f"{path}/{TLS_ALPN_SECRET}", "Secret", "update", body, timeout=_TIMEOUT)
        except APIError as error:
            if error.status != 404:
                raise
            if tokens:  # not there yet: made (a delete of one already gone is done)
                self.writer.request("POST", path, "Secret", "create", body, timeout=_TIMEOUT)

    def write_certificate(self, secret: dict[str, Any], existing: Optional[dict[str, Any]]) -> None:
        """
        Create the certificate's Secret, or replace twingress's own (its resourceVersion: a Secret someone else
        wrote meanwhile is a 409, never overwritten).
        """
        namespace, name = secret["metadata"]["namespace"], secret["metadata"]["name"]
        path = f"/api/v1/namespaces/{namespace}/secrets"
        if existing is None:
            self.writer.request("POST", path, "Secret", "create", secret, timeout=_TIMEOUT)
            return
        if not is_ours(existing):
            raise ValueError(f"Secret {namespace}/{name} is not twingress's")
        secret = {**secret, "metadata": {**secret["metadata"], "resourceVersion": existing["metadata"]["resourceVersion"]}}
        self.writer.request("PUT", f"{path}/{name}", "Secret", "update", secret, timeout=_TIMEOUT)


def _key_of(secret: dict[str, Any], name: str) -> rsa.RSAPrivateKey:
    """The account key in its Secret; ValueError naming the Secret when it holds none."""
    value = (secret.get("data") or {}).get(ACCOUNT_FIELD)
    try:
        key = serialization.load_pem_private_key(base64.b64decode(value or "", validate=True), password=None)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError(f"Secret {name}: no RSA account key in {ACCOUNT_FIELD!r}") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"Secret {name}: {ACCOUNT_FIELD!r} is not an RSA key")
    return key
