"""
TLS-ALPN-01 in a cluster, in memory (ingress/acme/tlsalpn_cluster.py): the Secret the leader writes, as every
node's informer parses it, becomes the routing's challenge ConfigMap and so the table's challenge
certificates; a Secret not labelled as twingress's is never served under acme-tls/1.  The real
apiserver, Pebble and two replicas: tests/kube/test_acme_cluster_tlsalpn.py.
"""

from __future__ import annotations

from ingress.acme.tlsalpn import challenge_certificate
from ingress.acme.tlsalpn_cluster import TLS_ALPN_SECRET, TlsAlpnAnswers, challenge_certificates, secret_body
from ingress.model import ClusterState
from ingress.model.parse import parse_object
from ingress.routing.tls_alpn_challenges import tls_alpn_certificates

NAMESPACE = "twingress"
KEY_AUTHORIZATION = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.9jg46WB3rR_AHD-EBXdN7cBkH1WOu0tA3M9fm21mqTI"


def _state(body: dict) -> ClusterState:
    """The snapshot a node's Opaque Secret informer makes of C{body}."""
    secret = parse_object(body)
    return ClusterState(opaque_secrets={(NAMESPACE, TLS_ALPN_SECRET): secret})


def test_the_leaders_secret_becomes_the_tables_challenge_certificates() -> None:
    pem = challenge_certificate("a.example.com", KEY_AUTHORIZATION)
    body = secret_body(NAMESPACE, {"a.example.com": pem, "b.example.com": pem})
    assert body["type"] == "Opaque" and body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "twingress"}
    answers = TlsAlpnAnswers(NAMESPACE)
    state = _state(body)
    rewritten = answers.rewrite(state)
    assert tls_alpn_certificates(rewritten.config_maps) == {"a.example.com": pem, "b.example.com": pem}
    again = answers.rewrite(state)
    assert next(iter(again.config_maps.values())) is next(iter(rewritten.config_maps.values()))  # the same Secret, the same ConfigMap object


def test_no_secret_or_one_not_twingresss_changes_nothing() -> None:
    answers = TlsAlpnAnswers(NAMESPACE)
    empty = ClusterState()
    assert answers.rewrite(empty) is empty
    body = secret_body(NAMESPACE, {"a.example.com": challenge_certificate("a.example.com", KEY_AUTHORIZATION)})
    body["metadata"]["labels"] = {}
    state = _state(body)
    assert answers.rewrite(state) is state
    other = TlsAlpnAnswers("elsewhere")  # another controller namespace: not its Secret
    labelled = _state(secret_body(NAMESPACE, {"a.example.com": b"-----BEGIN CERTIFICATE-----"}))
    assert other.rewrite(labelled) is labelled


def test_challenge_certificates_are_one_per_host_and_the_secret_is_watched_by_name_only_outside_the_watched_namespace() -> None:
    certificates = challenge_certificates({"t1": ("a.example.com", KEY_AUTHORIZATION), "t2": ("b.example.com", KEY_AUTHORIZATION)})
    assert sorted(certificates) == ["a.example.com", "b.example.com"]
    assert all(b"BEGIN CERTIFICATE" in pem and b"PRIVATE KEY" in pem for pem in certificates.values())
    answers = TlsAlpnAnswers(NAMESPACE)
    assert answers.watched("") == [] and answers.watched(NAMESPACE) == []
    assert answers.watched("apps") == [(NAMESPACE, TLS_ALPN_SECRET)]
