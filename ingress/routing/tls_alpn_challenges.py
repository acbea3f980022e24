# -*- test-case-name: tests.unit.test_tls_alpn -*-
"""
TLS-ALPN-01 challenge certificates (RFC 8737): the pending orders' hosts and the certificate each
answers a ClientHello offering C{acme-tls/1} with.

The issuer publishes them as a ConfigMap (L{TLS_ALPN_CHALLENGES}: data C{HOST: PEM}, the challenge
certificate followed by its key), beside the HTTP-01 tokens' one; in a cluster each node makes that
ConfigMap from the leader's Secret (L{ingress.acme.tlsalpn_cluster}).  So they reach every worker with the
table (L{ingress.routing.table.RoutingTable.acme_tls_alpn}) the way the tokens do; the TLS listener's
front door (L{ingress.proxy.tls.acme_tls}) builds a context of each and answers with it.  The key
is no secret: the certificate proves nothing but the key authorization's digest, which the
validation request itself could be answered with by anyone who knows the token and the account's
thumbprint, so a ConfigMap manifest carries it without a cluster (in the API, where ConfigMaps are
read more widely than Secrets, the leader keeps it in a Secret).  Pure: the PEM is passed on unread.
"""

from __future__ import annotations

from collections.abc import Mapping

from ingress.model import ConfigMap

TLS_ALPN_CHALLENGES = ("twingress-acme", "acme-tls-alpn-01")  # namespace, name


def tls_alpn_certificates(config_maps: Mapping[tuple[str, str], ConfigMap]) -> dict[str, bytes]:
    """Host (lower-case, no trailing dot) → its challenge certificate and key (PEM); empty when no order is pending."""
    found = config_maps.get(TLS_ALPN_CHALLENGES)
    if found is None:
        return {}
    return {host.lower().rstrip("."): pem.encode("ascii", "replace") for host, pem in found.data if host and "BEGIN" in pem}
