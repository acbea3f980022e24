# -*- test-case-name: tests.proxy.test_acme -*-
"""
The ACME storage directory (C{--acme-storage}): the account key, and the manifests the issuer writes.

C{account-<sha256 of the directory URL>.pem} is the account key of one ACME server, so staging and
production live side by side; C{manifests/} holds the issued certificates as C{kubernetes.io/tls}
Secrets (labelled as twingress's) and the pending HTTP-01 tokens as the ConfigMap
L{ingress.routing.acme_challenges.CHALLENGES} names; C{order-<namespace>.<name>.url} and
C{.backoff} beside them the order in flight of a certificate and its backoff after a failure.  The manifests source reads C{manifests/} beside
the manifests directory.  Every file is written whole and renamed into place: a poll never reads half.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
from collections.abc import Mapping
from typing import Any, Optional

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ingress.acme.schedule import RENEW_AFTER_ANNOTATION, RENEWAL_INFO_ANNOTATION, renewal_at
from ingress.routing.acme_challenges import CHALLENGES, RESPONDER_KEY

MANAGED_BY = {"app.kubernetes.io/managed-by": "twingress"}


def manifests_dir(storage: str) -> str:
    """Where the issuer's manifests are kept (made on first use)."""
    path = os.path.join(storage, "manifests")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def write_whole(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write C{path} through a hidden temporary file and a rename (the scan skips dot files)."""
    temporary = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(temporary, path)


def directory_digest(directory: str) -> str:
    """What names one ACME server's account (a file here, a Secret in a cluster): staging and production side by side."""
    return hashlib.sha256(directory.encode()).hexdigest()[:16]


def account_key(storage: str, directory: str) -> tuple[rsa.RSAPrivateKey, bool]:
    """The account key of C{directory}'s server, made and kept on first use; and whether it was made now."""
    path = os.path.join(storage, "account-%s.pem" % directory_digest(directory))
    if os.path.exists(path):
        with open(path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(f"{path}: not an RSA key")
        return key, False
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_whole(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return key, True


def secret_path(storage: str, namespace: str, name: str) -> str:
    return os.path.join(manifests_dir(storage), f"secret-{namespace}.{name}.yaml")


def write_certificate(
    storage: str, namespace: str, name: str, chain_pem: bytes, key_pem: bytes, hosts: tuple[str, ...], issuer: str, renew_at: Optional[datetime.datetime] = None,
    poll_at: Optional[datetime.datetime] = None,
) -> None:
    """The Secret C{namespace/name} with the chain and its key, annotated with its hosts, issuer, expiry and renewal time (one rename: the old one is served until then)."""
    secret = certificate_secret(namespace, name, chain_pem, key_pem, hosts, issuer, renew_at, poll_at)
    write_whole(secret_path(storage, namespace, name), yaml.safe_dump(secret).encode())


def certificate_secret(
    namespace: str, name: str, chain_pem: bytes, key_pem: bytes, hosts: tuple[str, ...], issuer: str, renew_at: Optional[datetime.datetime] = None,
    poll_at: Optional[datetime.datetime] = None,
) -> dict[str, Any]:
    """The C{kubernetes.io/tls} Secret of an issued certificate, as a manifest file or the cluster holds it (C{poll_at}: its next renewalInfo check)."""
    leaf = x509.load_pem_x509_certificate(chain_pem)
    renew_at = renew_at or renewal_at(leaf.not_valid_before_utc, leaf.not_valid_after_utc, None)
    secret = _secret(namespace, name, chain_pem, key_pem, hosts, issuer, renew_at, leaf)
    if poll_at is not None:
        secret["metadata"]["annotations"][RENEWAL_INFO_ANNOTATION] = poll_at.isoformat()
    return secret


def _secret(
    namespace: str, name: str, chain_pem: bytes, key_pem: bytes, hosts: tuple[str, ...], issuer: str, renew_at: datetime.datetime, leaf: x509.Certificate,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {
            "namespace": namespace, "name": name, "labels": dict(MANAGED_BY),
            "annotations": {
                "acme.twingress.io/hosts": ",".join(hosts), "acme.twingress.io/issuer": issuer,
                "acme.twingress.io/not-after": leaf.not_valid_after_utc.isoformat(), RENEW_AFTER_ANNOTATION: renew_at.isoformat(),
            },
        },
        "data": {"tls.crt": base64.b64encode(chain_pem).decode(), "tls.key": base64.b64encode(key_pem).decode()},
    }


def stored_hosts(storage: str, namespace: str, name: str) -> Optional[tuple[str, ...]]:
    """The hosts the stored certificate of C{namespace/name} was issued for, None when there is none."""
    try:
        with open(secret_path(storage, namespace, name), "rb") as f:
            secret = yaml.safe_load(f)
        hosts: str = secret["metadata"]["annotations"]["acme.twingress.io/hosts"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    return tuple(hosts.split(","))


def stored_renewal(storage: str, namespace: str, name: str) -> Optional[datetime.datetime]:
    """When the stored certificate of C{namespace/name} is to be renewed (its annotation, else two thirds of its lifetime); None without one."""
    try:
        with open(secret_path(storage, namespace, name), "rb") as f:
            secret = yaml.safe_load(f)
        return renewal_of(secret["metadata"].get("annotations") or {}, base64.b64decode(secret["data"]["tls.crt"]))
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None


def stored_secret(storage: str, namespace: str, name: str) -> Optional[dict[str, Any]]:
    """The stored certificate Secret of C{namespace/name} as its manifest holds it, None without a readable one."""
    try:
        with open(secret_path(storage, namespace, name), "rb") as f:
            secret = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None
    return secret if isinstance(secret, dict) else None


def renewal_poll_of(annotations: Mapping[str, str]) -> Optional[datetime.datetime]:
    """When a certificate Secret's renewalInfo is to be asked for again (RFC 9773 4.3.3), None when never (no renewalInfo, or the renewal first)."""
    try:
        when = datetime.datetime.fromisoformat(annotations[RENEWAL_INFO_ANNOTATION])
    except (KeyError, TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else None


def renewal_of(annotations: Mapping[str, str], chain_pem: bytes) -> datetime.datetime:
    """The renewal time a certificate Secret carries; one written without it (an older twingress): two thirds of the leaf's lifetime."""
    try:
        when = datetime.datetime.fromisoformat(annotations[RENEW_AFTER_ANNOTATION])
        if when.tzinfo is not None:
            return when
    except (KeyError, TypeError, ValueError):
        pass
    leaf = x509.load_pem_x509_certificate(chain_pem)
    return renewal_at(leaf.not_valid_before_utc, leaf.not_valid_after_utc, None)


def _kept_path(storage: str, namespace: str, name: str, kind: str) -> str:
    """Where C{namespace/name}'s certificate keeps an order's C{kind} ("url", "backoff"): beside manifests/, not in it, so no source reads it."""
    return os.path.join(storage, f"order-{namespace}.{name}.{kind}")


def _write_kept(path: str, text: str) -> None:
    """C{text} into C{path} whole, or with '' the file gone."""
    if text:
        write_whole(path, text.encode())
    elif os.path.exists(path):
        os.unlink(path)


def _read_kept(path: str) -> str:
    """What C{path} keeps, '' when nothing (no file, or not text)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode()
    except (OSError, UnicodeDecodeError):
        return ""


def write_order_url(storage: str, namespace: str, name: str, url: str) -> None:
    """The URL of the order placed for C{namespace/name}'s certificate ('' forgets it): a restart resumes it."""
    _write_kept(_kept_path(storage, namespace, name, "url"), url)


def stored_order_url(storage: str, namespace: str, name: str) -> str:
    """The order placed for C{namespace/name}'s certificate and not finished, '' when none."""
    return _read_kept(_kept_path(storage, namespace, name, "url")).strip()


def write_backoff(storage: str, namespace: str, name: str, text: str) -> None:
    """The backoff of C{namespace/name}'s certificate (L{ingress.acme.schedule.pause_text}; '' forgets it): a restart waits it out."""
    _write_kept(_kept_path(storage, namespace, name, "backoff"), text)


def stored_backoff(storage: str, namespace: str, name: str) -> str:
    """The kept backoff of C{namespace/name}'s certificate, '' when none."""
    return _read_kept(_kept_path(storage, namespace, name, "backoff"))


def write_challenges(storage: str, tokens: Mapping[str, str], responder: str) -> None:
    """The ConfigMap of pending tokens (token: host) and the responder's address, or no file when none is pending."""
    path = os.path.join(manifests_dir(storage), "acme-challenges.yaml")
    if not tokens:
        if os.path.exists(path):
            os.unlink(path)
        return
    namespace, name = CHALLENGES
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace, "name": name, "labels": dict(MANAGED_BY)},
                  "data": {RESPONDER_KEY: responder, **tokens}}
    write_whole(path, yaml.safe_dump(config_map).encode())
