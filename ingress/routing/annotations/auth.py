# -*- test-case-name: tests.unit.test_basic_auth -*-
"""
C{auth-type: basic} with C{auth-secret}, C{auth-secret-type} and C{auth-realm} compiled into a L{BasicAuth}.

ingress-nginx's annotations page ("Authentication"): the Secret is C{namespace/name}
or a name in the Ingress's namespace; C{auth-file} (the default) keeps an htpasswd
file under the key C{auth}, C{auth-map} has one key per user whose value is the
hash.  Hashes are those nginx and Apache read: bcrypt, apr1 (MD5), C{{SHA}},
SHA-256/512 crypt and DES crypt.  A line that is not C{user:hash}, or a hash of no
known scheme (a plain-text password), lets nobody in under that name and is
reported; a Secret that is missing, or has no users at all, closes the route (503).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from ingress.model import Ingress, OpaqueSecret
from ingress.routing.annotations import IngressAnnotations
from ingress.routing.policies.auth import HASHES, BasicAuth


class AuthSecretProblem(LookupError):
    """The Secret of auth-secret cannot give any user: missing, without the key, or empty. The route closes."""


def basic_auth(ingress: Ingress, annotations: IngressAnnotations, secrets: Mapping[tuple[str, str], OpaqueSecret]) -> tuple[Optional[BasicAuth], list[str]]:
    """The route's basic auth (None when not asked for) and the lines or keys skipped; raises L{AuthSecretProblem}."""
    if annotations.text("auth-type") != "basic":
        return None, []
    reference = annotations.text("auth-secret")
    if not reference:
        raise AuthSecretProblem("auth-type basic needs auth-secret")
    namespace, _, name = reference.rpartition("/")
    secret = secrets.get((namespace or ingress.meta.namespace, name))
    if secret is None:
        raise AuthSecretProblem(f"auth-secret {reference!r}: no Opaque Secret of that name")
    if annotations.text("auth-secret-type") == "auth-map":
        entries = [(user, value.decode("utf-8", "replace").strip()) for user, value in secret.data.items()]
    else:
        if "auth" not in secret.data:
            raise AuthSecretProblem(f"auth-secret {reference!r} has no key 'auth' (an htpasswd file; auth-secret-type auth-map reads one key per user)")
        entries = _htpasswd_lines(secret.data["auth"])
    users, skipped = _known_hashes(entries)
    if not users:
        raise AuthSecretProblem(f"auth-secret {reference!r} has no usable user (" + "; ".join(skipped or ["it is empty"]) + ")")
    realm = annotations.text("auth-realm")
    return BasicAuth(realm, tuple(users), f"{secret.meta.namespace}/{secret.meta.name}"), skipped


def _htpasswd_lines(text: bytes) -> list[tuple[str, str]]:
    entries = []
    for number, raw in enumerate(text.decode("utf-8", "replace").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, hashed = line.partition(":")
        entries.append((user, hashed) if colon and user else (f"line {number}", ""))
    return entries


def _known_hashes(entries: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    users, skipped = [], []
    for user, hashed in entries:
        scheme = HASHES.identify(hashed, required=False) if hashed else None
        if scheme is not None:
            users.append((user, hashed))
        else:
            skipped.append(f"{user}: not user:hash with a known hash scheme (bcrypt, apr1, {{SHA}}, SHA-2 or DES crypt)")
    return users, skipped
