# -*- test-case-name: tests.unit.test_annotation_policies -*-
"""
The kinds of policy a route may carry, each a frozen value in a module of its own.

They are gathered, in the order the proxy applies them, by L{ingress.routing.route.Policies}; the two
kinds that hold routes (L{ingress.routing.route.Canary}, L{ingress.routing.route.WeightedBackends})
are declared there beside L{ingress.routing.route.Route}, so that nothing here refers back to a route.
"""

from __future__ import annotations

from ingress.routing.policies.access import SourceRanges
from ingress.routing.policies.affinity import Affinity
from ingress.routing.policies.auth import BasicAuth
from ingress.routing.policies.backend import BackendTLS
from ingress.routing.policies.clientauth import ClientAuth
from ingress.routing.policies.cors import Cors
from ingress.routing.policies.errorpages import ErrorPages
from ingress.routing.policies.extauth import ExternalAuth
from ingress.routing.policies.hashing import HashBy
from ingress.routing.policies.headers import HeaderChanges
from ingress.routing.policies.limits import Limits
from ingress.routing.policies.mirror import Mirror
from ingress.routing.policies.pathreplace import PathReplace
from ingress.routing.policies.ratelimit import RateLimit
from ingress.routing.policies.redirect import Deny, GatewayRedirect, Redirect
from ingress.routing.policies.retry import Retry
from ingress.routing.policies.rewrite import Rewrite

EWMA = "ewma"  # load_balance: two endpoints at random, the faster answering wins (else round robin)

__all__ = [
    "EWMA", "BasicAuth", "Cors", "ErrorPages", "ExternalAuth", "SourceRanges", "Affinity", "BackendTLS", "Deny", "HashBy", "HeaderChanges", "Limits", "Mirror",
    "ClientAuth", "GatewayRedirect", "PathReplace", "RateLimit", "Redirect", "Retry", "Rewrite",
]
