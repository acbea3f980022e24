# -*- test-case-name: tests.kube.test_acme_cluster -*-
"""
Every node answers the HTTP-01 challenges of a cluster: the pending tokens the leader publishes,
served by each node's own loopback responder.

The leader (L{ingress.controllers.acmeorders}) writes the pending tokens into one ConfigMap in the
controller's namespace (L{CHALLENGES_NAME}; data C{TOKEN: "HOST KEY-AUTHORIZATION"}).  A ConfigMap,
not a Secret: a key authorization is no secret (RFC 8555, section 8.3: anyone who asks the host
gets it), every node already may list and watch the ConfigMaps of that namespace (the base Role),
and the write it needs is a Role of that one namespace, not the cluster-wide ConfigMap writes a
Secret's twin would have asked for nowhere else.  Every node watches it by name with its other
informers; L{ClusterAnswers.rewrite} turns it, on the build thread, into the challenge ConfigMap
L{ingress.routing.acme_challenges} reads (C{TOKEN: HOST} and this node's responder), so the routes
are the manifests mode's own: an Exact route per token before any redirect, rewrite, auth or guard
of the host, to the responder, carried to every worker by the table channel with the rest of the
table.  The routing stays pure (it never learns the responder's port, which is only known once it
listens), and the proxy's request path stays as it is: it forwards to the responder as to any
upstream.  The manifests mode keeps its own responder (L{ingress.acme.issuer}): its answers are in
the issuer's memory, not in a watched object.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from twisted.application.service import Service
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IListeningPort
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from ingress.acme.tlsalpn_cluster import TlsAlpnAnswers
from ingress.model import ClusterState, ConfigMap, ObjectMeta
from ingress.routing.acme_challenges import CHALLENGE_PATH, CHALLENGES, RESPONDER_KEY
from ingress.runtime.reactor import IProcessReactor

CHALLENGES_NAME = "twingress-acme-challenges"
"""The ConfigMap of pending tokens, in the controller's namespace (the leader Lease's)."""

_TOKEN = re.compile(r"[A-Za-z0-9_-]+")  # base64url (RFC 8555, section 8.1): nothing else reaches a route path


def parse_answers(found: Optional[ConfigMap]) -> dict[str, tuple[str, str]]:
    """The published tokens as token: (host, key authorization); malformed entries left out."""
    answers: dict[str, tuple[str, str]] = {}
    for token, value in found.data if found is not None else ():
        host, _, answer = value.strip().partition(" ")
        if _TOKEN.fullmatch(token) and host and answer.startswith(token + "."):
            answers[token] = (host.lower(), answer)
    return answers


def answers_data(tokens: dict[str, tuple[str, str]]) -> dict[str, str]:
    """The ConfigMap's data for C{tokens} (token: (host, key authorization)): what L{parse_answers} reads."""
    return {token: f"{host} {answer}" for token, (host, answer) in tokens.items()}


class TokenAnswers(Resource):
    """
    C{/.well-known/acme-challenge/TOKEN}: the key authorization of a published token, else 404; the
    responder of both modes (this node's, from the tokens' ConfigMap; the manifests issuer's own).
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict[str, str] = {}  # token: key authorization, replaced whole from another thread; the reactor only reads it

    def render_GET(self, request: Request) -> bytes:
        path = (request.path or b"").decode("latin-1")
        answer = self.answers.get(path[len(CHALLENGE_PATH):]) if path.startswith(CHALLENGE_PATH) else None
        if answer is None:
            request.setResponseCode(404)
            return b""
        request.setHeader(b"content-type", b"text/plain")
        return answer.encode("ascii")


class ClusterAnswers(Service):
    """This node's responder (loopback, a port of its own) and the rewrite of each snapshot that routes the tokens to it."""

    def __init__(self, reactor: IProcessReactor, namespace: str) -> None:
        self.reactor = reactor
        self.key = (namespace, CHALLENGES_NAME)
        self.resource = TokenAnswers()
        self.tls_alpn = TlsAlpnAnswers(namespace)  # the TLS-ALPN-01 challenge certificates' Secret, beside the tokens
        self._port: Optional[IListeningPort] = None
        self._address = ""

    def startService(self) -> None:
        super().startService()
        self._port = self.reactor.listenTCP(0, Site(self.resource), interface="127.0.0.1")  # type: ignore[arg-type]  # Site is a ServerFactory; its stubs say HTTPChannel
        address = self._port.getHost()
        assert isinstance(address, (IPv4Address, IPv6Address))  # listenTCP
        self._address = f"{address.host}:{address.port}"

    def stopService(self) -> None:
        super().stopService()
        if self._port is not None:
            self._port.stopListening()

    def rewrite(self, state: ClusterState) -> ClusterState:
        """
        (Build thread.) The responder's answers from the published ConfigMap, and C{state} with the
        routing's challenge ConfigMap pointing at this node's responder; C{state} itself when nothing is pending.
        The TLS-ALPN-01 challenge certificates' Secret is turned into the routing's ConfigMap first (L{TlsAlpnAnswers}).
        """
        state = self.tls_alpn.rewrite(state)
        answers = parse_answers(state.config_maps.get(self.key))
        self.resource.answers = {token: answer for token, (_, answer) in answers.items()}
        if not answers or not self._address:
            return state
        data = {token: host for token, (host, _) in answers.items()}
        data[RESPONDER_KEY] = self._address
        challenges = ConfigMap(ObjectMeta(*CHALLENGES), tuple(sorted(data.items())))
        return replace(state, config_maps={**state.config_maps, CHALLENGES: challenges})
