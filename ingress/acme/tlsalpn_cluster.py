# -*- test-case-name: tests.kube.test_acme_cluster_tlsalpn -*-
"""
TLS-ALPN-01 (RFC 8737) in a cluster: the leader's challenge certificates reach every node and every
worker before the server is asked to validate.

The leader writes the pending orders' challenge certificates (L{ingress.acme.tlsalpn.challenge_certificate},
each followed by its key) into one Secret of the controller's namespace, L{TLS_ALPN_SECRET} (data
C{HOST: PEM}, labelled as twingress's), and deletes it when the order ends, valid or failed.  A
Secret, not a ConfigMap as the HTTP-01 tokens are: it holds private keys, and a ConfigMap is read by
whoever may read the namespace's configuration.  Every node already lists and watches Secrets (the
base ClusterRole; the Opaque informer), and where C{--watch-namespace} leaves the controller's
namespace out, that one Secret is watched by name (L{TlsAlpnAnswers.watched}).  On the build thread,
L{TlsAlpnAnswers.rewrite} turns it into the challenge ConfigMap the routing reads
(L{ingress.routing.tls_alpn_challenges.TLS_ALPN_CHALLENGES}), exactly what the manifests mode writes
as a file, so the table carries the certificates to every worker and the TLS front door answers
C{acme-tls/1} with them; the routing and the request path stay as they are.  A Secret without
twingress's label is not read: only the leader's certificates are ever served under C{acme-tls/1}.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Optional

from ingress.acme.storage import MANAGED_BY
from ingress.acme.tlsalpn import challenge_certificate
from ingress.model import ClusterState, ConfigMap, ObjectMeta, OpaqueSecret
from ingress.routing.tls_alpn_challenges import TLS_ALPN_CHALLENGES

TLS_ALPN_SECRET = "twingress-acme-tls-alpn"
"""The Secret of pending challenge certificates, in the controller's namespace (the leader Lease's)."""


def challenge_certificates(tokens: Mapping[str, tuple[str, str]]) -> dict[str, bytes]:
    """(Order thread.) Host: its challenge certificate and key (PEM) for the pending tokens (token: (host, key authorization))."""
    return {host: challenge_certificate(host, answer) for host, answer in tokens.values()}


def secret_body(namespace: str, certificates: Mapping[str, bytes]) -> dict[str, Any]:
    """The Secret the leader writes: one key per host (a host name is a valid Secret key), its PEM as the value."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": TLS_ALPN_SECRET, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "data": {host: base64.b64encode(pem).decode("ascii") for host, pem in sorted(certificates.items())},
    }


def _is_ours(secret: OpaqueSecret) -> bool:
    return all(secret.meta.labels.get(key) == value for key, value in MANAGED_BY.items())


def challenge_config_map(secret: Optional[OpaqueSecret]) -> Optional[ConfigMap]:
    """The routing's challenge ConfigMap (host: PEM) of the leader's Secret; None without one, or for one not twingress's."""
    if secret is None or not _is_ours(secret) or not secret.data:
        return None
    data = tuple(sorted((host, pem.decode("ascii", "replace")) for host, pem in secret.data.items()))
    return ConfigMap(ObjectMeta(*TLS_ALPN_CHALLENGES), data)


class TlsAlpnAnswers:
    """Every node's side: the leader's Secret in each snapshot turned into the routing's challenge ConfigMap."""

    def __init__(self, namespace: str) -> None:
        self.key = (namespace, TLS_ALPN_SECRET)
        self._last: tuple[Optional[OpaqueSecret], Optional[ConfigMap]] = (None, None)  # build thread only

    def watched(self, watch_namespace: str) -> list[tuple[str, str]]:
        """The Secret to watch by name: none when the Opaque informer's namespace (all, or this one) holds it already."""
        return [] if watch_namespace in ("", self.key[0]) else [self.key]

    def rewrite(self, state: ClusterState) -> ClusterState:
        """
        (Build thread.) C{state} with the challenge ConfigMap of the pending certificates; C{state} itself when none is
        pending.  The same Secret object gives the same ConfigMap object, so a snapshot in which nothing else changed
        still compares equal, object for object, for the incremental build.
        """
        found = state.opaque_secrets.get(self.key)
        if found is not self._last[0]:
            self._last = (found, challenge_config_map(found))
        config_map = self._last[1]
        if config_map is None:
            return state
        return replace(state, config_maps={**state.config_maps, TLS_ALPN_CHALLENGES: config_map})
