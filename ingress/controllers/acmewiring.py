# -*- test-case-name: tests.kube.test_acme_cluster -*-
"""
ACME in a cluster, wired by L{ingress.tap}: every node's answers (L{ingress.acme.answers}) and the leader's orders
(L{ingress.controllers.acmeorders}), both from --acme-directory; nothing at all without it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ingress.acme.answers import CHALLENGES_NAME, ClusterAnswers
from ingress.acme.options import AcmeSettings
from ingress.controllers.acmeorders import AcmeControllerOptions
from ingress.controllers.manager import ControllerOptions
from ingress.runtime.reactor import IProcessReactor


def cluster_answers(options: Any, reactor: IProcessReactor, controllers: Optional[ControllerOptions], watched_maps: list[tuple[str, str]]) -> Optional[ClusterAnswers]:
    """With --acme-directory, this node's responder, and the tokens' ConfigMap added to C{watched_maps}; else None."""
    settings: Optional[AcmeSettings] = options["acme"]
    if settings is None or controllers is None:  # the options refuse ACME without the controllers
        return None
    namespace = controllers.election.namespace
    watched_maps.append((namespace, CHALLENGES_NAME))
    return ClusterAnswers(reactor, namespace)


def challenge_secrets(options: Any, answers: Optional[ClusterAnswers]) -> list[tuple[str, str]]:
    """With --acme-challenge tls-alpn-01, the challenge certificates' Secret when the watched namespace leaves it out."""
    settings: Optional[AcmeSettings] = options["acme"]
    if answers is None or settings is None or settings.challenge != "tls-alpn-01":
        return []
    return answers.tls_alpn.watched(options["watch-namespace"])


def with_acme(options: Any, controllers: ControllerOptions) -> ControllerOptions:
    """The controllers' options, with the ACME controller's when --acme-directory is given."""
    settings: Optional[AcmeSettings] = options["acme"]
    if settings is None:
        return controllers
    ports = {name: port for port, name in options["reserved-ports"].items()}
    return replace(controllers, acme=AcmeControllerOptions(settings, ports.get("http", 0), ports.get("https", 0)))
